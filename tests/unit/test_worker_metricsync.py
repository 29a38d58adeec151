"""A worker child's metrics in the control process (operator/workers/metricsync.py): the
increments a child sends with its beats, added to control's Metrics, give the exposition
one process counting everything would give: same series, same values, no duplicates."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ordo.operator.telemetry.metrics import Metrics
from ordo.operator.workers.metricsync import Applier, Deltas


def work(m: Metrics, n: int) -> None:
    """What runs count (writer.py, RunMetrics, the client's requests)."""
    for i in range(n):
        m.tasks.labels("ns", "agent", "Succeeded", "Completed").inc()
        m.task_duration.labels("ns", "agent").observe(0.3 * (i + 1))
        m.task_steps.labels("ns", "agent").observe(i + 1)
        m.model_requests.labels("openai", "gpt", "success").inc(2)
        m.model_duration.labels("openai", "gpt").observe(0.07)
        m.tokens.labels("ns", "agent", "gpt", "input").inc(120)
        m.tool_calls.labels("place-order", "allowed", "success").inc()
        m.kube_requests.labels("patch").inc(3)
    m.tasks.labels("other", "agent", "Failed", "ModelError").inc()


def samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(m.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def wire(deltas: dict[str, object]) -> dict[str, object]:
    """As the pipe carries them."""
    result: dict[str, object] = json.loads(json.dumps(deltas))
    return result


def test_increments_from_children_add_up_to_one_exposition() -> None:
    alone, control = Metrics(), Metrics()
    children = [Metrics(), Metrics()]
    applier = Applier(control)
    takes = [Deltas(m) for m in children]
    control.kube_requests.labels("get").inc(5)  # control's own requests
    alone.kube_requests.labels("get").inc(5)
    for round_ in (1, 3, 0, 2):  # several beats, some with nothing new
        for child, take in zip(children, takes, strict=True):
            work(child, round_)
            work(alone, round_)
            applier.apply(wire(take.take()))
    assert samples(control) == pytest.approx(samples(alone))  # (sums: float rounding)


def test_an_unchanged_child_sends_nothing_and_unknown_names_are_skipped() -> None:
    child = Metrics()
    take = Deltas(child)
    assert take.take() == {}
    work(child, 1)
    assert take.take()
    assert take.take() == {}
    control = Metrics()
    before = generate_latest(control.registry)
    Applier(control).apply(
        {
            "counters": [["ordo_not_a_metric", {"a": "b"}, 1.0], ["ordo_tasks", {"x": "y"}, 1]],
            "histograms": [["ordo_task_steps", {"namespace": "n", "agent": "a"}, [1], 1.0]],
        }
    )
    assert generate_latest(control.registry) == before
