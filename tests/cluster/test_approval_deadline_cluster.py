"""Every run ends, also when a waiting tool call's deadline in status is unreadable (issue 23
item 6): a Task whose `status.pendingApprovals[].deadline` was replaced by something that is
not an RFC 3339 timestamp with a zone ends `ApprovalTimedOut` at the deadline its checkpoint
holds, instead of waiting forever; the tool never runs."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from tests.cluster.test_approval_cluster import script, setup, waiting
from tests.support.counting_tool import CountingTool
from tests.support.openai_server import OpenAIServer
from tests.support.operator import OperatorProcess, apply, doc, wait_for, wait_task

from ordo import timestamps
from ordo_devcluster import ControlPlane

APPROVAL_TIMEOUT = 15


@pytest.fixture
def operator(operator_factory: Callable[..., OperatorProcess]) -> OperatorProcess:
    return operator_factory()


@pytest.mark.parametrize("garbage", ["not a time", "2030-01-15T08:00:00"])
def test_an_unreadable_deadline_in_status_ends_at_the_checkpoints_deadline(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, garbage: str
) -> None:
    cp, ns = control_plane, namespace
    with CountingTool() as tool, OpenAIServer({"deploy it": script()}) as model:
        setup(cp, ns, model.url + "/v1", tool.url, timeout=f"{APPROVAL_TIMEOUT}s")
        apply(cp, ns, doc("Task", "gated", {"agentRef": "agent", "input": "deploy it"}))
        task = wait_for(lambda: waiting(cp, ns, "gated"), 60, what="AwaitingApproval")
        (entry,) = task["status"]["pendingApprovals"]
        deadline = timestamps.epoch(entry["deadline"])
        assert deadline is not None
        patch = [{"op": "replace", "path": "/status/pendingApprovals/0/deadline", "value": garbage}]
        cp.kubectl(
            "patch", "task", "gated", "-n", ns, "--subresource=status", "--type=json",
            "-p", json.dumps(patch),
        )  # fmt: skip
        # Read as "never", this Task would stay Running for good.
        status = wait_task(cp, ns, "gated", timeout=APPROVAL_TIMEOUT + 60)["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "ApprovalTimedOut"), status
        ended = timestamps.epoch(status["completedAt"])
        assert ended is not None and ended >= deadline - 1  # at the checkpoint's deadline
        assert tool.count == 0
        assert "does not parse" in operator.logs()
