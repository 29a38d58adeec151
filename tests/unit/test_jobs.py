"""Execution mode Job, the pure parts: mode selection, the Job manifest, the pod-failure →
reason mapping, the Job's deadline, the `ordo operator --job-*` flags and the API fields."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from ordo.api import REASONS, Agent, Task
from ordo.cli.main import build_parser
from ordo.operator import main as operator_main
from ordo.operator.jobmode.supervisor import (
    build_job,
    deadline_seconds,
    finished,
    job_name,
    job_problem,
    pod_problem,
    pods_active,
    quantity,
    remaining_timeout,
    resources,
    runs_in_job,
    select_mode,
)
from ordo.operator.settings import JobSettings

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
SETTINGS = JobSettings(image="registry.example/ordo:1.2.3", service_account="ordo-runner")


def _task(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "metadata": {
            "name": "research",
            "namespace": "team-a",
            "uid": "0b6f1c2e-1111-2222-3333-444455556666",
            "resourceVersion": "7",
        },
        "spec": {"agentRef": "researcher", "input": "hello"},
        "status": status,
    }


def _agent(execution: dict[str, Any] | None = None, timeout: str = "5m") -> dict[str, Any]:
    spec: dict[str, Any] = {"modelRef": "m", "limits": {"timeout": timeout}}
    if execution is not None:
        spec["execution"] = execution
    return {"metadata": {"name": "researcher"}, "spec": spec}


def _ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- mode selection ---------------------------------------------------------------------------


def test_agent_mode_wins_over_the_operator_default() -> None:
    assert select_mode(_agent({"mode": "Job"}), "InProcess") == "Job"
    assert select_mode(_agent({"mode": "InProcess"}), "Job") == "InProcess"


def test_operator_default_applies_when_the_agent_names_no_mode() -> None:
    assert select_mode(_agent(), "Job") == "Job"
    assert select_mode(_agent({"resources": {"limits": {"memory": "1Gi"}}}), "Job") == "Job"
    assert select_mode(_agent(), "InProcess") == "InProcess"


def test_recorded_mode_wins_so_a_resumed_task_keeps_its_mode() -> None:
    assert select_mode(_agent({"mode": "Job"}), "Job", recorded="InProcess") == "InProcess"
    assert select_mode(_agent({"mode": "InProcess"}), "InProcess", recorded="Job") == "Job"


def test_a_missing_agent_runs_in_process_and_fails_there() -> None:
    # No pod is started only to report AgentNotFound.
    assert select_mode(None, "Job") == "InProcess"


def test_runs_in_job_needs_running_and_job() -> None:
    assert runs_in_job(_task(phase="Running", executionMode="Job"))
    assert not runs_in_job(_task(phase="Running", executionMode="InProcess"))
    assert not runs_in_job(_task(phase="Running"))
    assert not runs_in_job(_task(phase="Succeeded", executionMode="Job"))


# -- the Job manifest -------------------------------------------------------------------------


def test_job_manifest_is_owned_by_the_task_and_runs_the_claim() -> None:
    task = _task(phase="Running", executionId="abc123", startedAt=_ts(0))
    job = build_job(task, _agent(), "abc123", SETTINGS, remaining_timeout=300)
    meta = job["metadata"]
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert meta["name"] == job_name(task) == "ordo-task-0b6f1c2e-1111-2222-3333-444455556666"
    assert meta["namespace"] == "team-a"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "ordo"
    assert meta["annotations"]["ordo.dev/execution-id"] == "abc123"
    (owner,) = meta["ownerReferences"]
    assert owner == {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "name": "research",
        "uid": task["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == SETTINGS.image
    assert container["command"][:8] == [
        "ordo",
        "run-task",
        "--namespace",
        "team-a",
        "--name",
        "research",
        "--execution-id",
        "abc123",
    ]
    # The command parses as `ordo run-task`.
    parser = argparse.ArgumentParser()
    operator_main.add_run_task_arguments(parser)
    args = parser.parse_args(container["command"][2:])
    assert (args.namespace, args.name, args.execution_id) == ("team-a", "research", "abc123")
    assert args.lease_seconds == SETTINGS.lease_seconds
    assert args.credential_policy == SETTINGS.credential_policy == "Enforce"
    warn = build_job(
        task, _agent(), "abc123", replace(SETTINGS, credential_policy="Warn"), remaining_timeout=300
    )
    command = warn["spec"]["template"]["spec"]["containers"][0]["command"]
    assert parser.parse_args(command[2:]).credential_policy == "Warn"  # the pod reads Secrets
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["HOME"]["value"] == "/tmp"


def test_job_pod_is_restricted_and_uses_the_runner_service_account() -> None:
    job = build_job(_task(), _agent(), "e1", SETTINGS, remaining_timeout=60)
    spec = job["spec"]
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "ordo-runner"
    assert pod["restartPolicy"] == "Never"
    assert pod["enableServiceLinks"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = pod["containers"][0]["securityContext"]
    assert sc == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # The namespace's checkpoint keyring (optional), never the operator's: a Secret of the
    # Task's namespace, mounted read-only and passed to run-task.
    key = {"name": "checkpoint-key", "mountPath": "/etc/ordo/checkpoint-key", "readOnly": True}
    assert pod["containers"][0]["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}, key]
    assert pod["volumes"] == [
        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        {
            "name": "checkpoint-key",
            "secret": {
                "secretName": "ordo-runner-checkpoint-key",
                "optional": True,
                "defaultMode": 0o440,
            },
        },
    ]
    # Where the namespace has that Secret, the pod requires it: a kubelet that cannot read it
    # yet retries the mount instead of starting a pod that seals with a key of its own (whose
    # replacement would end the Task Interrupted).
    keyed = build_job(
        _task(), _agent(), "e1", SETTINGS, remaining_timeout=60, key_secret_exists=True
    )
    volumes = keyed["spec"]["template"]["spec"]["volumes"]
    assert volumes[1]["secret"]["optional"] is False
    command = pod["containers"][0]["command"]
    assert "--checkpoint-key-file=/etc/ordo/checkpoint-key/keyring" in command
    assert build_parser().parse_args(command[1:]).checkpoint_key_file.endswith("/keyring")
    # One pod at a time; disruptions do not count; finished Jobs expire.
    assert spec["podReplacementPolicy"] == "Failed"
    assert spec["completions"] == spec["parallelism"] == 1
    assert spec["backoffLimit"] == 3
    assert spec["ttlSecondsAfterFinished"] == 600
    assert spec["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    ]


def test_job_deadline_is_the_remaining_timeout_plus_lease_and_grace() -> None:
    job = build_job(_task(), _agent(), "e1", SETTINGS, remaining_timeout=300)
    assert job["spec"]["activeDeadlineSeconds"] == 300 + 30 + 120
    settings = JobSettings(image="x", lease_seconds=5, deadline_grace_seconds=10)
    assert deadline_seconds(100.2, settings) == 116
    assert deadline_seconds(-50, settings) == 60  # never below a minute
    assert deadline_seconds(0.5, JobSettings(image="x")) == 151


def test_remaining_timeout_is_anchored_at_the_claim() -> None:
    now = NOW.timestamp()
    task = _task(phase="Running", startedAt=_ts(100))
    assert remaining_timeout(task, _agent(timeout="5m"), now) == pytest.approx(200)
    narrowed = dict(task, spec={**task["spec"], "limits": {"timeout": "2m"}})
    assert remaining_timeout(narrowed, _agent(timeout="5m"), now) == pytest.approx(20)
    # A Task's wider timeout does not widen the Agent's.
    wider = dict(task, spec={**task["spec"], "limits": {"timeout": "1h"}})
    assert remaining_timeout(wider, _agent(timeout="5m"), now) == pytest.approx(200)
    assert remaining_timeout(_task(), _agent(timeout="90s"), now) == pytest.approx(90)


def test_resources_come_from_the_agent_then_the_operator_defaults() -> None:
    settings = JobSettings(
        image="x", requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "512Mi"}
    )
    assert resources(_agent(), settings) == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    }
    own = _agent({"mode": "Job", "resources": {"limits": {"memory": "64Mi", "cpu": "1"}}})
    assert resources(own, settings) == {
        "requests": {"cpu": "100m", "memory": "64Mi"},
        "limits": {"memory": "64Mi", "cpu": "1"},
    }
    job = build_job(_task(), own, "e1", settings, remaining_timeout=60)
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "memory": "64Mi",
        "cpu": "1",
    }
    assert resources(None, JobSettings(image="x", requests={}, limits={})) == {}


def test_a_default_request_above_the_agents_limit_is_lowered_to_it() -> None:
    # The API refuses requests above limits: an Agent asking for a small limit gets it.
    own = _agent({"mode": "Job", "resources": {"limits": {"memory": "24Mi", "cpu": "50m"}}})
    settings = JobSettings(image="x", requests={"cpu": "100m", "memory": "128Mi"})
    assert resources(own, settings) == {
        "requests": {"cpu": "50m", "memory": "24Mi"},
        "limits": {"memory": "24Mi", "cpu": "50m"},
    }
    # A request the Agent sets itself is left as written (the API server judges it).
    both = _agent({"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "24Mi"}}})
    assert resources(both, settings)["requests"]["memory"] == "1Gi"
    # A default below the limit stays.
    roomy = _agent({"resources": {"limits": {"memory": "1Gi"}}})
    assert resources(roomy, settings)["requests"]["memory"] == "128Mi"


@pytest.mark.parametrize(
    ("text", "value"),
    [("100m", 0.1), ("2", 2.0), ("1.5", 1.5), ("128Mi", 128 * 2**20), ("1G", 1e9), ("1Ki", 1024)],
)
def test_quantities_parse(text: str, value: float) -> None:
    assert quantity(text) == pytest.approx(value)


def test_not_a_quantity() -> None:
    with pytest.raises(ValueError):
        quantity("lots")


def test_job_mode_needs_an_image() -> None:
    with pytest.raises(ValueError, match="--job-image"):
        build_job(_task(), _agent(), "e1", JobSettings(), remaining_timeout=60)


def test_long_task_names_make_valid_label_values() -> None:
    task = _task()
    task["metadata"]["name"] = "a" * 62 + "-b" + "c" * 100
    job = build_job(task, None, "e1", SETTINGS, remaining_timeout=60)
    value = job["metadata"]["labels"]["ordo.dev/task"]
    assert len(value) <= 63 and value[-1].isalnum()


# -- pod failures → reasons -------------------------------------------------------------------


def _pod(
    name: str,
    *,
    age: float = 5,
    phase: str = "Running",
    terminated: dict[str, Any] | None = None,
    waiting: str | None = None,
    reason: str | None = None,
    memory: str = "64Mi",
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if terminated is not None:
        state["terminated"] = terminated
    if waiting is not None:
        state["waiting"] = {"reason": waiting, "message": "secret detail that is not copied"}
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": [{"name": "run", "image": "ordo:test", "state": state}],
    }
    if reason:
        status["reason"] = reason
    return {
        "metadata": {"name": name, "creationTimestamp": _ts(age)},
        "spec": {"containers": [{"name": "run", "resources": {"limits": {"memory": memory}}}]},
        "status": status,
    }


def _job(condition: str | None = None, reason: str = "", failed: int = 0) -> dict[str, Any]:
    conditions = [{"type": condition, "status": "True", "reason": reason}] if condition else []
    return {
        "metadata": {"name": "ordo-task-x"},
        "spec": {"activeDeadlineSeconds": 450},
        "status": {"conditions": conditions, "failed": failed},
    }


def test_oomkilled_ends_the_task_at_once_naming_the_limit() -> None:
    pods = [_pod("p1", phase="Failed", terminated={"reason": "OOMKilled", "exitCode": 137})]
    failure = pod_problem(pods, NOW, 120)
    assert failure is not None
    assert failure.reason == "PodFailed" and failure.phase == "Failed" and failure.stop_job
    assert "OOMKilled" in failure.message and "64Mi" in failure.message


def test_an_image_that_is_never_pulled_fails_at_once() -> None:
    for why in ("ErrImageNeverPull", "InvalidImageName"):
        failure = pod_problem([_pod("p1", phase="Pending", waiting=why, age=1)], NOW, 120)
        assert failure is not None and failure.reason == "ImageUnavailable", why
        assert why in failure.message and "secret detail" not in failure.message
        assert failure.stop_job


def test_pull_errors_get_a_grace() -> None:
    young = [_pod("p1", phase="Pending", waiting="ImagePullBackOff", age=30)]
    assert pod_problem(young, NOW, 120) is None
    old = [_pod("p1", phase="Pending", waiting="ImagePullBackOff", age=121)]
    failure = pod_problem(old, NOW, 120)
    assert failure is not None and failure.reason == "ImageUnavailable"
    config = [_pod("p1", phase="Pending", waiting="CreateContainerConfigError", age=200)]
    failure = pod_problem(config, NOW, 120)
    assert failure is not None and failure.reason == "PodFailed"
    assert "CreateContainerConfigError" in failure.message


def test_healthy_deleted_and_starting_pods_are_no_problem() -> None:
    pods = [
        _pod("p2", phase="Running", age=1),
        _pod("p1", phase="Failed", terminated={"reason": "Error", "exitCode": 143}, age=20),
        _pod("p0", phase="Pending", waiting="ContainerCreating", age=500),
    ]
    assert pod_problem(pods, NOW, 120) is None
    assert pods_active(pods) == ["p2", "p0"]


def test_deadline_exceeded_is_timeout() -> None:
    failure = job_problem(_job("Failed", "DeadlineExceeded"), [])
    assert failure is not None
    assert failure.reason == "Timeout" and "450s" in failure.message and not failure.stop_job


def test_backoff_limit_names_the_last_pod() -> None:
    pods = [
        _pod("p1", phase="Failed", terminated={"reason": "Error", "exitCode": 1}, age=60),
        _pod("p2", phase="Failed", terminated={"reason": "Error", "exitCode": 2}, age=10),
    ]
    failure = job_problem(_job("Failed", "BackoffLimitExceeded", failed=4), pods)
    assert failure is not None and failure.reason == "PodFailed"
    assert "BackoffLimitExceeded" in failure.message and "4 failed pod(s)" in failure.message
    assert "p2: Error (exit code 2)" in failure.message
    evicted = [_pod("p3", phase="Failed", reason="Evicted")]
    failure = job_problem(_job("Failed", "BackoffLimitExceeded", failed=4), evicted)
    assert failure is not None and "p3: Evicted" in failure.message


def test_a_job_that_completes_without_ending_the_task_fails_it() -> None:
    failure = job_problem(_job("Complete"), [])
    assert failure is not None and failure.reason == "PodFailed"
    assert job_problem(_job(), []) is None
    assert finished(_job("Complete")) == "Complete"
    assert finished(_job("Failed", "BackoffLimitExceeded")) == "Failed"
    assert finished(_job()) is None


def test_every_reason_the_mapping_uses_is_documented_in_the_api() -> None:
    assert {"PodFailed", "ImageUnavailable", "Timeout", "Cancelled"} <= set(REASONS)


# -- API and flags ----------------------------------------------------------------------------


def test_agent_execution_fields_validate() -> None:
    agent = Agent.model_validate(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Agent",
            "metadata": {"name": "a"},
            "spec": {
                "modelRef": "m",
                "execution": {
                    "mode": "Job",
                    "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "1Gi"}},
                },
            },
        }
    )
    assert agent.spec.execution is not None and agent.spec.execution.mode == "Job"
    for bad in ({"mode": "Pod"}, {"resources": {"limits": {"memory": "lots"}}}):
        with pytest.raises(ValidationError):
            Agent.model_validate(
                {
                    "apiVersion": "ordo.dev/v1alpha1",
                    "kind": "Agent",
                    "metadata": {"name": "a"},
                    "spec": {"modelRef": "m", "execution": bad},
                }
            )


def test_task_status_carries_the_execution_mode() -> None:
    task = Task.model_validate(_task(phase="Running", executionMode="Job"))
    assert task.status is not None and task.status.execution_mode == "Job"


def test_job_flags_parse() -> None:
    assert operator_main.parse_quantities("cpu=100m,memory=128Mi") == {
        "cpu": "100m",
        "memory": "128Mi",
    }
    assert operator_main.parse_quantities("") == {}
    with pytest.raises(ValueError):
        operator_main.parse_quantities("gpu=1")
    parser = argparse.ArgumentParser()
    operator_main.add_arguments(parser)
    args = parser.parse_args(
        ["--default-execution-mode", "Job", "--job-image", "ordo:1", "--job-limits", "memory=1Gi"]
    )
    assert args.default_execution_mode == "Job" and args.job_image == "ordo:1"


def test_job_mode_default_without_image_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ordo.cli.main", "operator", "--default-execution-mode", "Job"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--job-image" in result.stderr
