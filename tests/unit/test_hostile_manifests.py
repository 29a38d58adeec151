"""Hostile manifests: the mistakes a user makes in YAML are refused by `ordo validate` naming the
field, before any object reaches a cluster.

The table covers limits that would silently mean "no limit" or "never run" (`0s`, `0h0m`,
negative, absurd durations, `maxSteps: 0`), schema typos, user-written JSON Schemas that cannot
work (a `$ref` typo, a remote `$ref`, a backtracking-only pattern, a schema that is not a schema)
and AgentPolicies whose fields do not parse. tests/cluster/test_hostile_cluster.py applies the
same objects to a real API server and runs the ones it admits through the operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ordo.api import manifests
from ordo.api.base import MAX_LIMIT_DURATION, MIN_LIMIT_DURATION, parse_duration
from ordo.cli import main as cli

API = "ordo.dev/v1alpha1"


def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name}, "spec": spec}


def task(**spec: Any) -> dict[str, Any]:
    return obj("Task", "t", {"agentRef": "a", "input": "hi", **spec})


def agent(**spec: Any) -> dict[str, Any]:
    return obj("Agent", "a", {"modelRef": "m", **spec})


def endpoint(**spec: Any) -> dict[str, Any]:
    return obj("ModelEndpoint", "m", {"provider": "mock", **spec})


def tool(**spec: Any) -> dict[str, Any]:
    return obj("Tool", "lookup", {"type": "mock", "description": "Look up.", **spec})


def policy(**spec: Any) -> dict[str, Any]:
    return obj("AgentPolicy", "p", spec)


SEARCH_INPUT = {"type": "object", "properties": {"q": {"type": "string"}}}


@dataclass(frozen=True)
class Hostile:
    """A manifest ordo must refuse, and the field path the refusal must name."""

    id: str
    body: dict[str, Any]
    field: str
    jsonschema: bool = False
    """Refused by the JSON-Schema checks of controller/ordo/api/jsonschemas.py."""
    crd: bool = True
    """The CRD schema can express the rule, so the API server refuses it too."""


HOSTILE: list[Hostile] = [
    # --- durations that would mean "no deadline" or cannot be a deadline ---
    Hostile("task-timeout-0s", task(limits={"timeout": "0s"}), "spec.limits.timeout"),
    Hostile("task-timeout-0ms", task(limits={"timeout": "0ms"}), "spec.limits.timeout"),
    Hostile("task-timeout-0h0m", task(limits={"timeout": "0h0m"}), "spec.limits.timeout"),
    Hostile("task-timeout-0.0s", task(limits={"timeout": "0.000s"}), "spec.limits.timeout"),
    Hostile("task-timeout-negative", task(limits={"timeout": "-1s"}), "spec.limits.timeout"),
    Hostile("task-timeout-absurd", task(limits={"timeout": "100000h"}), "spec.limits.timeout"),
    Hostile("task-timeout-sub-ms", task(limits={"timeout": "0.0001ms"}), "spec.limits.timeout"),
    Hostile("agent-timeout-0s", agent(limits={"timeout": "0s"}), "spec.limits.timeout"),
    Hostile("agent-timeout-negative", agent(limits={"timeout": "-5m"}), "spec.limits.timeout"),
    Hostile("agent-timeout-a-year", agent(limits={"timeout": "8760h"}), "spec.limits.timeout"),
    Hostile("endpoint-timeout-0s", endpoint(timeout="0s"), "spec.timeout"),
    Hostile("endpoint-backoff-0ms", endpoint(retry={"backoff": "0ms"}), "spec.retry.backoff"),
    Hostile("tool-timeout-0h0m", tool(timeout="0h0m"), "spec.timeout"),
    Hostile("tool-timeout-negative", tool(timeout="-30s"), "spec.timeout"),
    # --- step and token limits ---
    Hostile("task-maxsteps-0", task(limits={"maxSteps": 0}), "spec.limits.maxSteps"),
    Hostile("task-maxsteps-negative", task(limits={"maxSteps": -1}), "spec.limits.maxSteps"),
    Hostile("task-maxtokens-0", task(limits={"maxTokens": 0}), "spec.limits.maxTokens"),
    Hostile("agent-maxsteps-0", agent(limits={"maxSteps": 0}), "spec.limits.maxSteps"),
    Hostile("agent-maxsteps-negative", agent(limits={"maxSteps": -1}), "spec.limits.maxSteps"),
    # --- schema typos ---
    Hostile("agent-limit-typo", agent(limit={"maxSteps": 3}), "spec.limit"),
    Hostile("task-timeout-typo", task(limits={"timeOut": "30s"}), "spec.limits.timeOut"),
    Hostile("task-agentref-typo", obj("Task", "t", {"agentref": "a"}), "spec.agentref"),
    Hostile("tool-inputschema-typo", tool(inputschema=SEARCH_INPUT), "spec.inputschema"),
    Hostile("timeout-as-number", task(limits={"timeout": 30}), "spec.limits.timeout"),
    # --- user-written JSON Schemas that cannot work ---
    Hostile(
        "tool-ref-typo",
        tool(
            inputSchema={
                "type": "object",
                "properties": {"q": {"$ref": "#/$defs/Qeury"}},
                "$defs": {"Query": {"type": "string"}},
            }
        ),
        "spec.inputSchema",
        jsonschema=True,
        crd=False,
    ),
    Hostile(
        "tool-remote-ref",
        tool(
            inputSchema={
                "type": "object",
                "properties": {"q": {"$ref": "https://schemas.example.com/query.json"}},
            }
        ),
        "spec.inputSchema",
        jsonschema=True,
        crd=False,
    ),
    Hostile(
        "tool-pattern-backreference",
        tool(
            inputSchema={
                "type": "object",
                "properties": {"q": {"type": "string", "pattern": "^(a+)\\1$"}},
            }
        ),
        "spec.inputSchema",
        jsonschema=True,
        crd=False,
    ),
    Hostile(
        "task-output-pattern-backreference",
        task(
            outputSchema={
                "type": "object",
                "properties": {"id": {"type": "string", "pattern": "^(\\w+)-\\1$"}},
            }
        ),
        "spec.outputSchema",
        jsonschema=True,
        crd=False,
    ),
    Hostile(
        "task-output-pattern-unclosed",
        task(outputSchema={"type": "string", "pattern": "[unclosed"}),
        "spec.outputSchema",
        jsonschema=True,
        crd=False,
    ),
    Hostile(
        "task-output-type-objekt",
        task(outputSchema={"type": "objekt"}),
        "spec.outputSchema",
        jsonschema=True,
        crd=False,
    ),
    Hostile(
        "agent-output-type-objekt",
        agent(outputSchema={"type": "objekt", "properties": {"a": {"type": "string"}}}),
        "spec.outputSchema",
        jsonschema=True,
        crd=False,
    ),
    Hostile(
        "agent-output-required-not-a-list",
        agent(outputSchema={"type": "object", "required": "answer"}),
        "spec.outputSchema",
        jsonschema=True,
        crd=False,
    ),
    # --- AgentPolicies whose fields do not parse ---
    Hostile(
        "policy-operator-unknown",
        policy(agentSelector={"matchExpressions": [{"key": "team", "operator": "Contains"}]}),
        "spec.agentSelector.matchExpressions[0].operator",
    ),
    Hostile(
        "policy-exists-with-values",
        policy(
            agentSelector={
                "matchExpressions": [{"key": "team", "operator": "Exists", "values": ["a"]}]
            }
        ),
        "spec.agentSelector.matchExpressions[0]",
    ),
    Hostile(
        "policy-in-without-values",
        policy(agentSelector={"matchExpressions": [{"key": "team", "operator": "In"}]}),
        "spec.agentSelector.matchExpressions[0]",
    ),
    Hostile("policy-on-denied-unknown", policy(onToolDenied="Ignore"), "spec.onToolDenied"),
    Hostile("policy-models-not-a-list", policy(allowedModels="gpt-4o"), "spec.allowedModels"),
    Hostile("policy-maxsteps-string", policy(maxSteps="5"), "spec.maxSteps"),
    Hostile("policy-maxsteps-0", policy(maxSteps=0), "spec.maxSteps"),
    Hostile("policy-budget-negative", policy(maxTokensPerTask=-1), "spec.maxTokensPerTask"),
    Hostile(
        "policy-blocked-not-a-name", policy(blockedTools=["Web_Search"]), "spec.blockedTools[0]"
    ),
    Hostile(
        "policy-label-not-a-string",
        policy(agentSelector={"matchLabels": {"team": 5}}),
        "spec.agentSelector.matchLabels.team",
    ),
    Hostile("policy-field-typo", policy(blockTools=["web-search"]), "spec.blockTools"),
]


def _named(problem: manifests.Problem, path: str) -> bool:
    """The problem is on `path`, or below it, or its message names it."""
    return (
        problem.field == path
        or problem.field.startswith((path + ".", path + "["))
        or path in problem.message
    )


def test_table_ids_are_unique() -> None:
    ids = [case.id for case in HOSTILE]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.id)
def test_hostile_manifest_is_refused_naming_the_field(case: Hostile) -> None:
    obj_, problems = manifests.parse_document(manifests.Document("hostile.yaml", 0, case.body))
    assert obj_ is None, f"{case.id} was accepted"
    errors = [p for p in problems if p.severity == "error"]
    assert any(_named(p, case.field) for p in errors), (case.field, [str(p) for p in errors])


@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.id)
def test_ordo_validate_exits_1_and_prints_the_field(
    case: Hostile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    path = tmp_path / f"{case.id}.yaml"
    path.write_text(yaml.safe_dump(case.body))
    assert cli.main(["validate", "-f", str(path)]) == 1
    err = capsys.readouterr().err
    assert case.field in err, err


@pytest.mark.parametrize(
    ("case", "text"),
    [
        ("task-timeout-0s", "0 does not mean no limit"),
        ("task-timeout-absurd", f"between {MIN_LIMIT_DURATION} and {MAX_LIMIT_DURATION}"),
        ("task-timeout-negative", "cannot be negative"),
        ("tool-timeout-negative", "cannot be negative"),
    ],
)
def test_duration_messages_say_what_is_expected(case: str, text: str) -> None:
    (hostile,) = [h for h in HOSTILE if h.id == case]
    _, problems = manifests.parse_document(manifests.Document("t", 0, hostile.body))
    assert any(text in p.message for p in problems), [p.message for p in problems]


@pytest.mark.parametrize(
    "body",
    [
        task(limits={"timeout": MIN_LIMIT_DURATION}),
        task(limits={"timeout": MAX_LIMIT_DURATION}),
        task(limits={"timeout": "0.5s"}),
        task(limits={"timeout": "0h1m"}),
        task(limits={"maxSteps": 1, "maxTokens": 1}),
        agent(limits={"timeout": "1h30m", "maxSteps": 1000}),
        endpoint(timeout="500ms", retry={"backoff": "10ms"}),
        tool(timeout="2m", inputSchema=SEARCH_INPUT),
        policy(
            agentSelector={"matchExpressions": [{"key": "team", "operator": "Exists"}]},
            maxSteps=1,
        ),
    ],
    ids=lambda b: f"{b['kind']}-{sorted(b['spec'])}",
)
def test_the_nearest_valid_values_are_accepted(body: dict[str, Any]) -> None:
    obj_, problems = manifests.parse_document(manifests.Document("ok.yaml", 0, body))
    assert problems == []
    assert obj_ is not None


# --- any non-positive duration is refused (hypothesis) ---------------------------------------

UNITS = st.sampled_from(["ms", "s", "m", "h"])
ZERO_PART = st.builds(
    lambda digits, frac, unit: "0" * digits + ("." + "0" * frac if frac else "") + unit,
    st.integers(1, 4),
    st.integers(0, 3),
    UNITS,
)
ZERO_DURATION = st.lists(ZERO_PART, min_size=1, max_size=4).map("".join)
ANY_PART = st.builds(
    lambda n, frac, unit: f"{n}{'.' + str(frac) if frac is not None else ''}{unit}",
    st.integers(0, 10**6),
    st.none() | st.integers(0, 999),
    UNITS,
)
NEGATIVE_DURATION = st.lists(ANY_PART, min_size=1, max_size=3).map(lambda p: "-" + "".join(p))
NON_POSITIVE_DURATION = ZERO_DURATION | NEGATIVE_DURATION

LIMIT_FIELDS: list[tuple[str, Any]] = [
    ("spec.limits.timeout", lambda d: task(limits={"timeout": d})),
    ("spec.limits.timeout", lambda d: agent(limits={"timeout": d})),
    ("spec.timeout", lambda d: endpoint(timeout=d)),
    ("spec.retry.backoff", lambda d: endpoint(retry={"backoff": d})),
    ("spec.timeout", lambda d: tool(timeout=d)),
]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(duration=NON_POSITIVE_DURATION, where=st.sampled_from(LIMIT_FIELDS))
def test_any_non_positive_duration_is_refused(duration: str, where: tuple[str, Any]) -> None:
    path, build = where
    obj_, problems = manifests.parse_document(manifests.Document("h", 0, build(duration)))
    assert obj_ is None, duration
    assert [p.field for p in problems] == [path], [str(p) for p in problems]


@settings(max_examples=200, deadline=None)
@given(
    seconds=st.integers(1, 168 * 3600),
    unit=st.sampled_from([("s", 1), ("m", 60), ("h", 3600)]),
    where=st.sampled_from(LIMIT_FIELDS),
)
def test_any_duration_within_the_bounds_is_accepted(
    seconds: int, unit: tuple[str, int], where: tuple[str, Any]
) -> None:
    name, scale = unit
    count = max(1, seconds // scale)
    duration = f"{count}{name}"
    _, build = where
    obj_, problems = manifests.parse_document(manifests.Document("h", 0, build(duration)))
    assert problems == [], duration
    assert obj_ is not None
    assert 0 < parse_duration(duration) <= parse_duration(MAX_LIMIT_DURATION)


# --- limits only narrow: a wider Task limit is a warning -------------------------------------


def _load(tmp_path: Path, *bodies: dict[str, Any]) -> manifests.ManifestSet:
    import yaml

    path = tmp_path / "set.yaml"
    path.write_text(yaml.safe_dump_all(list(bodies)))
    return manifests.load([str(path)])


def test_task_limits_wider_than_the_agents_are_warnings(tmp_path: Path) -> None:
    mset = _load(
        tmp_path,
        endpoint(),
        agent(limits={"maxSteps": 5, "timeout": "1m", "maxTokens": 1000}),
        task(limits={"maxSteps": 50, "timeout": "10m", "maxTokens": 5000}),
    )
    assert mset.errors == []
    warnings = {w.field: w.message for w in mset.warnings}
    assert warnings == {
        "spec.limits.maxSteps": "limits only narrow: the Agent's maxSteps 5 applies (Agent 'a')",
        "spec.limits.timeout": "limits only narrow: the Agent's timeout 1m applies (Agent 'a')",
        "spec.limits.maxTokens": "limits only narrow: the Agent's maxTokens 1000 applies "
        "(Agent 'a')",
    }


def test_a_wider_task_limit_against_the_agents_defaults_is_a_warning(tmp_path: Path) -> None:
    mset = _load(tmp_path, endpoint(), agent(), task(limits={"maxSteps": 11, "timeout": "6m"}))
    assert {w.field for w in mset.warnings} == {"spec.limits.maxSteps", "spec.limits.timeout"}
    assert "the Agent's maxSteps 10 applies" in mset.warnings[0].message


def test_narrower_or_equal_task_limits_are_quiet(tmp_path: Path) -> None:
    mset = _load(
        tmp_path,
        endpoint(),
        agent(limits={"maxSteps": 5, "timeout": "1m"}),
        task(limits={"maxSteps": 5, "timeout": "60s", "maxTokens": 10}),
    )
    assert mset.problems == []


def test_limits_are_compared_only_with_the_agent_in_the_same_namespace(tmp_path: Path) -> None:
    other = agent(limits={"maxSteps": 1})
    other["metadata"]["namespace"] = "elsewhere"
    mset = _load(tmp_path, other, task(limits={"maxSteps": 50}))
    assert [w.field for w in mset.warnings if w.document and w.document.kind == "Task"] == [
        "spec.agentRef"
    ]


def test_validate_prints_the_warning_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    path = tmp_path / "set.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [endpoint(), agent(limits={"maxSteps": 5}), task(limits={"maxSteps": 9})]
        )
    )
    assert cli.main(["validate", "-f", str(path)]) == 0
    err = capsys.readouterr().err
    assert "spec.limits.maxSteps: limits only narrow: the Agent's maxSteps 5 applies" in err
    assert "0 error(s), 1 warning(s)" in err
