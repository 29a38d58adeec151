"""The pending calls published for approvers (operator/tasks/pendingcalls.py, issue 26 §5):
only the waiting calls' ids, tools, arguments and digests; written, replaced and withdrawn
against an in-memory ConfigMap API; and `ordo approvals` (cli/approvals.py) shows the digest,
refuses a forged publication and ignores one of another execution."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import kopf
import pytest

from ordo.cli.approvals import Refused, children_waiting, decide, list_calls, text_listing
from ordo.engine.approvals import PendingApproval, args_digest
from ordo.engine.state import RunState
from ordo.engine.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from ordo.operator.kube.client import KubeClient
from ordo.operator.tasks import pendingcalls, taskstatus

UID = "uid-1"
T = TypeVar("T")
CANARY = "transcript-canary-3b9"


class ConfigMaps:
    """A namespace's ConfigMaps and Tasks as the API server keeps them: create (409 if it
    exists), get, replace and delete with a resourceVersion precondition (409 if stale)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.tasks: dict[str, dict[str, Any]] = {}
        self.version = 0

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self.objects[body["metadata"]["name"]] = body
        return body

    user: str | None = "system:serviceaccount:ns:approver"
    created: list[dict[str, Any]]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.rstrip("/").split("/")
        if "selfsubjectreviews" in parts:
            review = {"status": {"userInfo": {"username": self.user}}} if self.user else {}
            return httpx.Response(201, json=review) if self.user is not None else _status(403)
        if "toolapprovals" in parts:
            body = json.loads(request.content)
            body["metadata"]["name"] = body["metadata"]["generateName"] + "x1"
            self.created = [*getattr(self, "created", []), body]
            return httpx.Response(201, json=body)
        if "tasks" in parts:
            task = self.tasks.get(parts[-1])
            return httpx.Response(200, json=task) if task else _status(404)
        name = parts[-1] if parts[-1] != "configmaps" else None
        known = self.objects.get(name or "")
        body = json.loads(request.content) if request.content else {}
        if request.method == "POST":
            if body["metadata"]["name"] in self.objects:
                return _status(409)
            return httpx.Response(201, json=self._stored(body))
        if known is None:
            return _status(404)
        if request.method == "GET":
            return httpx.Response(200, json=known)
        if request.method == "PUT":
            if body["metadata"].get("resourceVersion") != known["metadata"]["resourceVersion"]:
                return _status(409)
            return httpx.Response(200, json=self._stored(body))
        if request.method == "DELETE":
            wanted = (body.get("preconditions") or {}).get("resourceVersion")
            if wanted and wanted != known["metadata"]["resourceVersion"]:
                return _status(409)
            del self.objects[known["metadata"]["name"]]
            return _status(200)
        return _status(405)


def _status(code: int) -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "code": code})


def client_for(api: ConfigMaps) -> KubeClient:
    return KubeClient(
        kopf.ConnectionInfo(server="https://kube.invalid"),
        wrap_transport=lambda _real: httpx.MockTransport(api),
        backoff=0.001,
    )


def task(execution: str = "exec-1") -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": "t", "namespace": "ns", "uid": UID},
        "status": {"phase": "Running", "executionId": execution},
    }


def waiting_state(**arguments: dict[str, Any]) -> RunState:
    """A run that waits for one call per keyword (call id → arguments), after a transcript
    with a prompt, an earlier call and its result (none of which may be published)."""
    state = RunState(step=2)
    state.items = [
        UserMessage(f"do it {CANARY}"),
        AssistantMessage("", (ToolCall("c0", "lookup", {"q": CANARY}),)),
        ToolResult("c0", "lookup", f"result {CANARY}"),
        AssistantMessage(
            CANARY, tuple(ToolCall(cid, "deploy", args) for cid, args in arguments.items())
        ),
    ]
    for cid in arguments:
        state.approvals[cid] = PendingApproval(cid, "deploy", 2, 1000.0, math.inf)
    return state


def parked(state: RunState, execution: str = "exec-1") -> dict[str, Any]:
    """The Task as the runner leaves it parked on `state`."""
    body = task(execution)
    body["status"].update(taskstatus.awaiting_approval(state, None))
    return body


# -- what is published ---------------------------------------------------------------------------


def test_only_the_waiting_calls_are_published_with_their_digest() -> None:
    state = waiting_state(c1={"target": "prod", "n": 2}, c2={})
    calls = pendingcalls.calls_of(state)
    assert [c["callId"] for c in calls] == ["c1", "c2"]
    assert calls[0] == {
        "callId": "c1",
        "tool": "deploy",
        "arguments": {"target": "prod", "n": 2},
        "argsDigest": args_digest({"n": 2, "target": "prod"}),
    }
    assert CANARY not in json.dumps(calls)  # nothing else of the transcript


def test_arguments_too_large_are_left_out_but_their_digest_stays() -> None:
    state = waiting_state(c1={"blob": "x" * 500}, c2={"small": 1})
    assert "arguments" in pendingcalls.calls_of(state)[0]
    big, small = pendingcalls.calls_of(state, limit=400)
    assert "arguments" not in big and big["argumentsOmitted"] is True
    assert big["argsDigest"] == args_digest({"blob": "x" * 500})
    assert small["arguments"] == {"small": 1}


def test_arguments_without_a_canonical_form_get_no_digest() -> None:
    (call,) = pendingcalls.calls_of(waiting_state(c1={"x": math.nan}))
    assert call["argsDigest"] == ""


# -- publish, replace, withdraw ------------------------------------------------------------------


async def test_published_owned_labelled_replaced_and_withdrawn() -> None:
    api = ConfigMaps()
    client = client_for(api)
    body = task()
    first = await pendingcalls.publish(client, body, "exec-1", waiting_state(c1={"a": 1}))
    stored = api.objects[f"ordo-approval-{UID}"]
    assert stored["metadata"]["ownerReferences"][0]["uid"] == UID
    assert stored["metadata"]["labels"][pendingcalls.UID_LABEL] == UID
    assert stored["metadata"]["annotations"]["ordo.dev/execution-id"] == "exec-1"

    # A later park (another execution) replaces it; the earlier writer's withdraw is refused.
    second = await pendingcalls.publish(client, body, "exec-2", waiting_state(c2={"b": 2}))
    assert first != second
    await pendingcalls.withdraw(client, body, first)
    assert json.loads(api.objects[f"ordo-approval-{UID}"]["data"]["calls.json"])[0]["callId"] == (
        "c2"
    )
    await pendingcalls.withdraw(client, body, second)
    assert api.objects == {}
    await pendingcalls.withdraw(client, body)  # absent: fine
    await client.close()


# -- reading it: ordo approvals ------------------------------------------------------------------


async def published_api(state: RunState, execution: str = "exec-1") -> ConfigMaps:
    """The API after a run of execution `execution` parked on `state` (the Task names
    exec-1 as its execution)."""
    api = ConfigMaps()
    await calling(api, lambda client: pendingcalls.publish(client, task(), execution, state))
    api.tasks["t"] = parked(state)
    return api


async def calling(api: ConfigMaps, use: Callable[[KubeClient], Awaitable[T]]) -> T:
    client = client_for(api)
    try:
        return await use(client)
    finally:
        await client.close()


async def listing(api: ConfigMaps) -> list[dict[str, Any]]:
    return await calling(api, lambda client: list_calls(client, "ns", "t"))


async def test_ordo_approvals_shows_the_arguments_and_their_digest() -> None:
    state = waiting_state(c1={"target": "prod"})
    api = await published_api(state)
    (shown,) = await listing(api)
    assert shown == {
        "callId": "c1",
        "tool": "deploy",
        "step": 2,
        "deadline": None,
        "argsDigest": args_digest({"target": "prod"}),
        "arguments": {"target": "prod"},
    }


async def test_a_forged_publication_is_refused() -> None:
    state = waiting_state(c1={"target": "staging"})
    api = await published_api(state)
    stored = api.objects[f"ordo-approval-{UID}"]
    (call,) = json.loads(stored["data"]["calls.json"])
    call["arguments"] = {"target": "prod"}  # other arguments under the original digest
    stored["data"]["calls.json"] = json.dumps([call])
    (shown,) = await listing(api)
    assert shown["forged"] is True and "REFUSED" in shown["note"]
    assert "arguments" not in shown and "argsDigest" not in shown


async def test_a_publication_of_another_execution_is_not_shown() -> None:
    state = waiting_state(c1={"target": "prod"})
    api = await published_api(state, execution="stale")
    (shown,) = await listing(api)
    assert (
        "arguments" not in shown
        and "not written by the Task's current execution" in (shown["note"])
    )


@pytest.mark.parametrize(
    "data", ["not json", "[{}]", '[{"callId": "c1", "argsDigest": "x", "arguments": 3}]']
)
async def test_a_publication_that_does_not_parse_shows_no_arguments(data: str) -> None:
    state = waiting_state(c1={"target": "prod"})
    api = await published_api(state)
    api.objects[f"ordo-approval-{UID}"]["data"]["calls.json"] = data
    (shown,) = await listing(api)
    assert "arguments" not in shown and "does not parse" in shown["note"]


async def test_no_publication_no_arguments() -> None:
    api = ConfigMaps()
    api.tasks["t"] = parked(waiting_state(c1={}))
    (shown,) = await listing(api)
    assert "does not exist" in shown["note"] and "arguments" not in shown


# -- ordo approve: bound to the published digest, named by the API server -----------------------


async def approving(api: ConfigMaps, decision: str = "Approve", **kw: Any) -> dict[str, Any]:
    created = await calling(
        api, lambda client: decide(client, "ns", "t", "c1", decision, None, **kw)
    )
    return dict(created["spec"])


async def test_approve_names_the_published_digest_and_the_caller() -> None:
    state = waiting_state(c1={"target": "prod"})
    api = await published_api(state)
    spec = await approving(api)
    assert spec == {
        "taskRef": "t",
        "callId": "c1",
        "decision": "Approve",
        "argsDigest": args_digest({"target": "prod"}),
        "approvedBy": ConfigMaps.user,
    }
    # What the approver saw must still be what waits.
    assert await approving(api, digest=args_digest({"target": "prod"}))
    with pytest.raises(Refused, match="now has arguments with digest"):
        await approving(api, digest=args_digest({"target": "staging"}))


async def test_approve_refuses_a_forged_or_missing_publication() -> None:
    state = waiting_state(c1={"target": "prod"})
    api = await published_api(state)
    stored = api.objects[f"ordo-approval-{UID}"]
    (call,) = json.loads(stored["data"]["calls.json"])
    stored["data"]["calls.json"] = json.dumps([{**call, "arguments": {"target": "x"}}])
    with pytest.raises(Refused, match="not usable"):
        await approving(api)
    del api.objects[f"ordo-approval-{UID}"]
    with pytest.raises(Refused, match="pass --digest"):
        await approving(api)
    # With the digest given (seen elsewhere), the operator checks it against the run's state.
    assert (await approving(api, digest="sha256:" + "0" * 64))["argsDigest"] == "sha256:" + "0" * 64


async def test_without_a_user_name_approve_is_refused_and_reject_goes_ahead() -> None:
    state = waiting_state(c1={"target": "prod"})
    api = await published_api(state)
    api.user = None  # SelfSubjectReview forbidden
    with pytest.raises(Refused, match="--approved-by"):
        await approving(api)
    assert "approvedBy" not in await approving(api, "Reject")
    assert (await approving(api, approved_by="me"))["approvedBy"] == "me"


# -- a parent whose children wait: ordo approvals names the child --------------------------------


def with_children(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with the children a parent's status lists: one waits for an approval, one ran,
    one ended while the flag was still set (not shown)."""
    body["status"]["children"] = [
        {"name": "t-aa11", "agent": "researcher", "phase": "Running", "awaitingApproval": True},
        {"name": "t-bb22", "agent": "critic", "phase": "Running"},
        {"name": "t-cc33", "agent": "critic", "phase": "Succeeded", "awaitingApproval": True},
    ]
    return body


async def test_ordo_approvals_names_the_child_that_waits() -> None:
    api = ConfigMaps()
    api.tasks["t"] = with_children(task())
    assert children_waiting(api.tasks["t"]) == ["t-aa11"]
    assert children_waiting(task()) == [] and children_waiting({"status": {"children": 3}}) == []
    calls = await listing(api)
    assert calls == []
    assert text_listing("t", calls, ["t-aa11"]) == [
        "Task t waits for no tool-call approval of its own",
        "child Task t-aa11 waits for an approval: ordo approvals t-aa11",
    ]
    assert text_listing("t", [], []) == ["Task t waits for no tool-call approval"]
    # Its own calls first, then the children's.
    state = waiting_state(c1={"target": "prod"})
    api = await published_api(state)
    lines = text_listing("t", await listing(api), ["t-aa11"])
    assert lines[0].startswith("c1  tool=deploy  step=2") and lines[1].startswith("  digest: ")
    assert lines[-1] == "child Task t-aa11 waits for an approval: ordo approvals t-aa11"


async def test_deciding_on_a_parent_names_the_child_that_waits() -> None:
    api = ConfigMaps()
    api.tasks["t"] = with_children(task())
    with pytest.raises(Refused) as refused:
        await approving(api)
    assert str(refused.value) == (
        "Task 't' does not wait for call 'c1' (waiting: none); "
        "child Task t-aa11 waits for an approval: ordo approvals t-aa11"
    )
