"""Hostile manifests on a real control plane.

(a) Every hostile manifest of tests/unit/test_hostile_manifests.py that the CRD schema can
    express is refused by kube-apiserver (`kubectl apply --dry-run=server`) with a message naming
    the field; the ones it cannot express (user-written JSON Schemas) are admitted, which is why
    the operator checks them.
(b) Objects the API server holds although they are hostile — admitted because the CRD cannot see
    the problem, or stored before the CRD was tightened (created here under a loosened CRD, then
    the real CRDs are applied again, as an upgrade does) — are referenced by Tasks run by
    `ordo operator`. Each Task must end with the documented reason while the scripted model
    server sees no request at all.

(This file is not named test_hostile_manifests.py: pytest imports test modules by basename, and
tests/unit has one of that name.)
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.openai_server import OpenAIServer
from tests.support.operator import OperatorProcess, get_json, wait_for, wait_task
from tests.unit.test_hostile_manifests import HOSTILE, Hostile

from ordo.api import KINDS, crdgen
from ordo_devcluster import BinariesNotFoundError, ControlPlane

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
API = "ordo.dev/v1alpha1"


def _named(error: str, path: str) -> bool:
    leaf = path.rsplit(".", 1)[-1].split("[")[0]
    return path in error or leaf in error


# --- (a) the API server refuses what the CRD schema can express -----------------------------


@pytest.mark.parametrize("case", [c for c in HOSTILE if c.crd], ids=lambda c: c.id)
def test_api_server_refuses_naming_the_field(
    control_plane: ControlPlane, namespace: str, case: Hostile
) -> None:
    result = control_plane.kubectl(
        "apply",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(case.body),
        check=False,
    )
    assert result.returncode != 0, f"{case.id} was admitted by the API server"
    assert _named(result.stderr, case.field), f"{case.id}: {result.stderr}"


@pytest.mark.parametrize("case", [c for c in HOSTILE if not c.crd], ids=lambda c: c.id)
def test_api_server_admits_what_only_ordo_can_check(
    control_plane: ControlPlane, namespace: str, case: Hostile
) -> None:
    """A JSON Schema inside a spec is opaque to the CRD: the operator must refuse it."""
    result = control_plane.kubectl(
        "apply",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(case.body),
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("kind", "spec", "path"),
    [
        ("Task", {"agentRef": "a", "limits": {"timeout": "0.5ms"}}, "spec.limits.timeout"),
        ("Task", {"agentRef": "a", "limits": {"timeout": "168h1s"}}, "spec.limits.timeout"),
        ("Tool", {"type": "mock", "timeout": "0.0000001ms"}, "spec.timeout"),
    ],
)
def test_api_server_and_validate_agree_at_the_bounds(
    control_plane: ControlPlane, namespace: str, kind: str, spec: dict[str, Any], path: str
) -> None:
    """Go's duration parser (CEL) and ordo's agree just outside 1ms..168h."""
    from ordo.api import manifests

    body = {"apiVersion": API, "kind": kind, "metadata": {"name": "b"}, "spec": spec}
    obj, problems = manifests.parse_document(manifests.Document("b", 0, body))
    assert obj is None and [p.field for p in problems] == [path]
    result = control_plane.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(body), check=False
    )
    assert result.returncode != 0 and "must be between 1ms and 168h" in result.stderr, result


def test_api_server_admits_the_bounds_themselves(
    control_plane: ControlPlane, namespace: str
) -> None:
    for timeout in ("1ms", "168h", "0.001s", "167h59m60s"):
        body = {
            "apiVersion": API,
            "kind": "Task",
            "metadata": {"name": "b"},
            "spec": {"agentRef": "a", "limits": {"timeout": timeout}},
        }
        control_plane.kubectl(
            "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(body)
        )


# --- (b) hostile references end the Task before any model request ----------------------------


def _obj(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name, **meta}, "spec": spec}


@dataclass
class Scenario:
    """Objects in their own namespace, one Task `t`, and what must become of it."""

    id: str
    reason: str
    admitted: list[dict[str, Any]] = field(default_factory=list)
    """Applied under the real CRDs (the API server admits them)."""
    stored_before_tightening: list[dict[str, Any]] = field(default_factory=list)
    """Created under a loosened CRD, which is then replaced by the real one."""
    model_requests: int = 0
    namespace: str = ""


def _base(
    sid: str,
    *,
    agent: dict[str, Any] | None = None,
    endpoint: dict[str, Any] | None = None,
    task: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """The usual set: a ModelEndpoint pointing at the scenario's path on the model server, an
    Agent, a Task; each overridable."""
    return {
        "ModelEndpoint": _obj(
            "ModelEndpoint",
            "model",
            {
                "provider": "openai-compatible",
                "baseUrl": "{model}/" + sid + "/v1",
                "model": "gpt-test",
                "retry": {"maxAttempts": 1, "backoff": "10ms"},
                **(endpoint or {}),
            },
        ),
        "Agent": _obj(
            "Agent",
            "agent",
            {"modelRef": "model", "limits": {"maxSteps": 3, "timeout": "60s"}, **(agent or {})},
        ),
        "Task": _obj("Task", "t", {"agentRef": "agent", "input": "hi", **(task or {})}),
    }


def _scenario(
    sid: str,
    reason: str,
    *,
    before: tuple[str, ...] = (),
    extra: tuple[dict[str, Any], ...] = (),
    model_requests: int = 0,
    **overrides: Any,
) -> Scenario:
    objs = _base(sid, **overrides)
    for o in extra:
        objs[f"{o['kind']}/{o['metadata']['name']}"] = o
    stored = [objs[k] for k in before]
    admitted = [o for k, o in objs.items() if k not in before]
    return Scenario(sid, reason, admitted, stored, model_requests)


LOOKUP = _obj("Tool", "lookup", {"type": "mock", "description": "Look up."})

SCENARIOS: list[Scenario] = [
    # stored before the CRD refused zero limits: the operator must not read 0 as "no limit"
    _scenario(
        "task-timeout-0s", "InvalidSpec", before=("Task",), task={"limits": {"timeout": "0s"}}
    ),
    _scenario("task-maxsteps-0", "InvalidSpec", before=("Task",), task={"limits": {"maxSteps": 0}}),
    _scenario(
        "agent-timeout-0h0m",
        "InvalidSpec",
        before=("Agent",),
        agent={"limits": {"maxSteps": 3, "timeout": "0h0m"}},
    ),
    _scenario(
        "endpoint-timeout-0s", "InvalidSpec", before=("ModelEndpoint",), endpoint={"timeout": "0s"}
    ),
    _scenario(
        "tool-timeout-0ms",
        "InvalidSpec",
        before=("Tool/lookup",),
        extra=({**LOOKUP, "spec": {**LOOKUP["spec"], "timeout": "0ms"}},),
        agent={"tools": ["lookup"]},
    ),
    # an AgentPolicy the operator cannot parse: its caps would silently vanish
    _scenario(
        "policy-operator-unknown",
        "PolicyUnavailable",
        before=("AgentPolicy/strict",),
        extra=(
            _obj(
                "AgentPolicy",
                "strict",
                {"agentSelector": {"matchExpressions": [{"key": "team", "operator": "Contains"}]}},
            ),
        ),
    ),
    _scenario(
        "policy-maxsteps-0",
        "PolicyUnavailable",
        before=("AgentPolicy/strict",),
        extra=(_obj("AgentPolicy", "strict", {"maxSteps": 0}),),
    ),
    # admitted by the API server (a JSON Schema is opaque to the CRD)
    _scenario(
        "tool-ref-typo",
        "InvalidSpec",
        extra=(
            _obj(
                "Tool",
                "lookup",
                {
                    "type": "mock",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"q": {"$ref": "#/$defs/Qeury"}},
                        "$defs": {"Query": {"type": "string"}},
                    },
                },
            ),
        ),
        agent={"tools": ["lookup"]},
    ),
    _scenario(
        "tool-remote-ref",
        "InvalidSpec",
        extra=(
            _obj(
                "Tool",
                "lookup",
                {
                    "type": "mock",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"q": {"$ref": "http://127.0.0.1:9/schema.json"}},
                    },
                },
            ),
        ),
        agent={"tools": ["lookup"]},
    ),
    _scenario(
        "tool-pattern-backreference",
        "InvalidSpec",
        extra=(
            _obj(
                "Tool",
                "lookup",
                {
                    "type": "mock",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"q": {"type": "string", "pattern": "^(a+)+\\1$"}},
                    },
                },
            ),
        ),
        agent={"tools": ["lookup"]},
    ),
    _scenario(
        "task-output-pattern-backreference",
        "InvalidSpec",
        task={
            "outputSchema": {
                "type": "object",
                "properties": {"id": {"type": "string", "pattern": "^(\\w+)-\\1$"}},
            }
        },
    ),
    _scenario(
        "agent-output-type-objekt",
        "InvalidSpec",
        agent={"outputSchema": {"type": "objekt"}},
    ),
    # a role that does not exist: governance cannot grant, the call is denied and never runs
    # (the model is asked once: the denial happens when it requests the tool)
    _scenario(
        "agent-role-missing",
        "ToolDenied",
        agent={"tools": ["lookup"], "roles": ["ghost"]},
        extra=(LOOKUP,),
        model_requests=1,
    ),
]


def _loosened_crd(kind: str) -> dict[str, Any]:
    """The kind's CRD with a spec that admits anything (as an older, laxer schema would)."""
    crd = copy.deepcopy(crdgen.crd(KINDS[kind]))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema.pop("x-kubernetes-validations", None)
    return crd


def _apply(cp: ControlPlane, namespace: str, body: dict[str, Any], model_url: str) -> None:
    text = json.dumps(body).replace("{model}", model_url)
    cp.kubectl("apply", "-n", namespace, "-f", "-", input=text)


def _refused(cp: ControlPlane, namespace: str, body: dict[str, Any], model_url: str) -> bool:
    """Would the API server create this object now? (Under another name: an update that leaves
    a stored invalid value unchanged is admitted, by CRD validation ratcheting.)"""
    probe = {**body, "metadata": {**body["metadata"], "name": body["metadata"]["name"] + "-new"}}
    text = json.dumps(probe).replace("{model}", model_url)
    result = cp.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=text, check=False
    )
    return result.returncode != 0


@dataclass
class Outcome:
    status: dict[str, Any]
    requests: int
    log: list[str]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """One private control plane (the CRD swap must not touch the session's), one operator
    watching every namespace, one model server; every scenario in its own namespace."""
    work = tmp_path_factory.mktemp("hostile")
    try:
        cp = ControlPlane(crds=CRDS)
    except BinariesNotFoundError as exc:
        pytest.skip(f"control plane not built (run scripts/build-controlplane): {exc}")
    loose = work / "loose"
    loose.mkdir()
    kinds = {o["kind"] for s in SCENARIOS for o in s.stored_before_tightening}
    for kind in kinds:
        (loose / f"{kind}.yaml").write_text(yaml.safe_dump(_loosened_crd(kind)))
    with cp, OpenAIServer(None, fallback={"auto": True}) as model:
        for s in SCENARIOS:
            s.namespace = cp.create_namespace(prefix=s.id[:40])
            for body in s.admitted:
                if body["kind"] != "Task":
                    _apply(cp, s.namespace, body, model.url)
        # An older, laxer schema: these objects get stored.
        cp.apply_crds(loose)
        for s in SCENARIOS:
            for body in s.stored_before_tightening:
                wait_for(
                    lambda ns=s.namespace, b=body: not _refused(cp, ns, b, model.url),
                    timeout=30,
                    what=f"the loosened CRD to admit {s.id}",
                )
                _apply(cp, s.namespace, body, model.url)
        # The upgrade: the real CRDs again. The stored objects stay as they are.
        cp.apply_crds(CRDS)
        for s in SCENARIOS:
            for body in s.stored_before_tightening:
                wait_for(
                    lambda ns=s.namespace, b=body: _refused(cp, ns, b, model.url),
                    timeout=30,
                    what=f"the real CRD to refuse {s.id} again",
                )
        operator = OperatorProcess(cp, "all", work, scope=["--all-namespaces"]).start()
        try:
            for s in SCENARIOS:
                for body in s.admitted:
                    if body["kind"] == "Task":
                        _apply(cp, s.namespace, body, model.url)
            results: dict[str, Outcome] = {}
            for s in SCENARIOS:
                try:
                    body = wait_task(cp, s.namespace, "t", timeout=90)
                    status = body.get("status") or {}
                except AssertionError:
                    status = (get_json(cp, "task", "t", "-n", s.namespace).get("status")) or {}
                    status = {**status, "phase": f"not terminal ({status.get('phase')})"}
                path = f"/{s.id}/v1/chat/completions"
                requests = sum(1 for r in model.requests if r.path == path)
                results[s.id] = Outcome(status, requests, operator.task_log("t", limit=6))
            yield results
        finally:
            operator.stop()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_hostile_reference_ends_the_task_with_the_documented_reason(
    outcomes: dict[str, Outcome], scenario: Scenario
) -> None:
    outcome = outcomes[scenario.id]
    status = outcome.status
    seen = (status.get("phase"), status.get("reason"), (status.get("message") or "")[:300])
    if status.get("reason") != scenario.reason:
        seen += tuple(outcome.log)
    assert (status.get("phase"), status.get("reason")) == ("Failed", scenario.reason), seen
    assert outcome.requests == scenario.model_requests, (
        f"the model server saw {outcome.requests} request(s)",
        seen,
    )
    if scenario.reason == "ToolDenied":
        records = status.get("toolCalls") or []
        assert [(r["tool"], r["decision"]) for r in records] == [("lookup", "denied")], records
    assert status.get("completedAt"), seen
