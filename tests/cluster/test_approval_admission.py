"""The chart's approver-identity admission policies (issue 26 §5), on the real kube-apiserver:
a ToolApproval's `spec.approvedBy` must be the user creating it, and a Task's
`ordo.dev/requested-by` annotation, when set, must be the user creating the Task and never
changes. Also which installs render them, and that the kustomize base carries the same."""

from __future__ import annotations

import uuid
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
import yaml
from tests.support.operator import wait_for
from tests.support.packaging import helm_template, kustomize_build, of_kind, to_yaml

from ordo_devcluster import ControlPlane

POLICY = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"
DIGEST = "sha256:" + "a" * 64
NOT_YOU = "spec.approvedBy must be your user name"
FIXED = "cannot be set, changed or removed after the Task is created"


def approval(name: str, approved_by: str | None, decision: str = "Approve") -> str:
    spec: dict[str, Any] = {"taskRef": "t", "callId": "c1", "decision": decision}
    if decision == "Approve":
        spec["argsDigest"] = DIGEST
    if approved_by is not None:
        spec["approvedBy"] = approved_by
    return to_yaml(
        [
            {
                "apiVersion": "ordo.dev/v1alpha1",
                "kind": "ToolApproval",
                "metadata": {"name": name},
                "spec": spec,
            }
        ]
    )


def task(name: str, requester: str | None) -> str:
    meta: dict[str, Any] = {"name": name}
    if requester is not None:
        meta["annotations"] = {"ordo.dev/requested-by": requester}
    body = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Task", "metadata": meta}
    return to_yaml([{**body, "spec": {"agentRef": "a"}}])


def schedule(name: str, requester: str) -> str:
    meta = {"name": name, "annotations": {"ordo.dev/requested-by": requester}}
    template = {"spec": {"agentRef": "a", "input": "report"}}
    spec = {"schedule": "0 0 * * *", "taskTemplate": template}
    return to_yaml(
        [
            {
                "apiVersion": "ordo.dev/v1alpha1",
                "kind": "TaskSchedule",
                "metadata": meta,
                "spec": spec,
            }
        ]
    )


def identity_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in of_kind(docs, POLICY, BINDING)
        if d["metadata"]["name"].endswith(("toolapproval-approver", "task-requester"))
    ]


def test_rendered_like_the_other_admission_policies(tmp_path: Path) -> None:
    cluster_wide = identity_docs(helm_template(tmp_path))
    assert sorted(d["kind"] for d in cluster_wide) == [POLICY, POLICY, BINDING, BINDING]
    for binding in of_kind(cluster_wide, BINDING):
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"] == {}
    # The kustomize base carries the same objects.
    base = identity_docs(kustomize_build())
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(((key(d), d["spec"]) for d in base), key=lambda x: x[0]) == sorted(
        ((key(d), d["spec"]) for d in cluster_wide), key=lambda x: x[0]
    )
    watched = {"watchNamespaces": ["team-a"]}
    assert identity_docs(helm_template(tmp_path, values=watched)) == []
    bound = identity_docs(
        helm_template(tmp_path, values={**watched, "admissionPolicies": {"enabled": True}})
    )
    for binding in of_kind(bound, BINDING):
        selector = binding["spec"]["matchResources"]["namespaceSelector"]
        assert selector["matchExpressions"][0]["values"] == ["team-a"]
    off = {"admissionPolicies": {"approverIdentity": {"enabled": False}}}
    assert identity_docs(helm_template(tmp_path, values=off)) == []


@pytest.fixture
def users(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> dict[str, tuple[str, Any]]:
    """The policies installed from the chart (a release of its own, bound to this namespace);
    two ServiceAccounts that may create ToolApprovals and Tasks: name → (user name, kubectl)."""
    cp = control_plane
    release = f"apr{uuid.uuid4().hex[:6]}"
    values = {"watchNamespaces": [namespace], "admissionPolicies": {"enabled": True}}
    installed = identity_docs(helm_template(tmp_path, release=release, values=values))
    assert len(installed) == 4
    cp.kubectl("apply", "--server-side", "-f", "-", input=to_yaml(installed))
    verbs = "create,get,list,patch,update"
    kinds = "toolapprovals.ordo.dev,tasks.ordo.dev,taskschedules.ordo.dev"
    cp.kubectl(
        "create", "role", "decider", "-n", namespace, f"--verb={verbs}", f"--resource={kinds}"
    )
    accounts = [f"--serviceaccount={namespace}:{who}" for who in ("alice", "bob")]
    cp.kubectl("create", "rolebinding", "decider", "-n", namespace, "--role=decider", *accounts)
    out: dict[str, tuple[str, Any]] = {}
    for who in ("alice", "bob"):
        kubeconfig = cp.service_account_kubeconfig(namespace, who)

        def run(*args: str, _k: Path = kubeconfig, **kw: Any) -> CompletedProcess[str]:
            return cp.kubectl(*args, "-n", namespace, kubeconfig=_k, **kw)

        out[who] = (f"system:serviceaccount:{namespace}:{who}", run)
    _, alice = out["alice"]
    # Both policies are loaded independently: wait until each refuses. A new name per attempt:
    # a probe created before its policy was loaded exists, and creating it again would only
    # answer AlreadyExists.
    attempts = iter(range(1000))

    def both_refuse() -> bool:
        n = next(attempts)
        first = alice("create", "-f", "-", input=approval(f"probe-{n}", "mallory"), check=False)
        second = alice("create", "-f", "-", input=task(f"probe-{n}", "mallory"), check=False)
        return NOT_YOU in first.stderr and "must be your user name" in second.stderr

    # A control plane that just started syncs its admission informers first.
    wait_for(both_refuse, 120, what="the admission policies to take effect")
    return out


def refused(result: CompletedProcess[str], message: str) -> None:
    assert result.returncode != 0, result.stdout
    assert message in result.stderr, result.stderr


def test_a_tool_approval_names_its_creator(users: dict[str, tuple[str, Any]]) -> None:
    (alice_name, alice), (bob_name, _) = users["alice"], users["bob"]
    # Naming someone else (another ServiceAccount, or anybody) is refused.
    refused(alice("create", "-f", "-", input=approval("x1", bob_name), check=False), NOT_YOU)
    refused(alice("create", "-f", "-", input=approval("x2", "admin"), check=False), NOT_YOU)
    # Naming oneself passes; so does a Reject that names nobody (it still rejects).
    alice("create", "-f", "-", input=approval("mine", alice_name))
    alice("create", "-f", "-", input=approval("no", None, decision="Reject"))
    # An Approve that names nobody is refused by the CRD.
    result = alice("create", "-f", "-", input=approval("anon", None), check=False)
    assert result.returncode != 0 and "approvedBy" in result.stderr


def test_a_task_names_its_requester_and_keeps_it(users: dict[str, tuple[str, Any]]) -> None:
    (alice_name, alice), (bob_name, bob) = users["alice"], users["bob"]
    refused(
        alice("create", "-f", "-", input=task("t1", bob_name), check=False),
        "ordo.dev/requested-by must be your user name",
    )
    alice("create", "-f", "-", input=task("t2", alice_name))
    alice("create", "-f", "-", input=task("t3", None))
    # Nobody sets, changes or removes it afterwards (not even its requester).
    key = "ordo.dev/requested-by"
    refused(bob("annotate", "task", "t2", f"{key}={bob_name}", "--overwrite", check=False), FIXED)
    refused(alice("annotate", "task", "t2", f"{key}-", check=False), FIXED)
    refused(alice("annotate", "task", "t3", f"{key}={alice_name}", check=False), FIXED)
    # Other edits of the Task pass.
    alice("annotate", "task", "t2", "note=fine")
    alice("patch", "task", "t2", "--type=merge", "-p", '{"spec": {"cancel": true}}')


def test_a_task_schedule_names_its_creator_and_only_the_operator_copies_it(
    users: dict[str, tuple[str, Any]],
) -> None:
    (alice_name, alice), (bob_name, _) = users["alice"], users["bob"]
    key = "ordo.dev/requested-by"

    def schedule(name: str, requester: str) -> str:
        meta = {"name": name, "annotations": {key: requester}}
        spec = {"schedule": "@daily", "taskTemplate": {"spec": {"agentRef": "a"}}}
        body = {"apiVersion": "ordo.dev/v1alpha1", "kind": "TaskSchedule", "metadata": meta}
        return to_yaml([{**body, "spec": spec}])

    mine = "ordo.dev/requested-by must be your user name"
    refused(alice("create", "-f", "-", input=schedule("s1", bob_name), check=False), mine)
    alice("create", "-f", "-", input=schedule("s2", alice_name))
    fixed = "cannot be set, changed or removed after the TaskSchedule is created"
    refused(
        alice("annotate", "taskschedule", "s2", f"{key}={bob_name}", "--overwrite", check=False),
        fixed,
    )
    # The trigger label does not let anyone but the operator name someone else on a Task.
    (scheduled,) = yaml.safe_load_all(task("t-s", bob_name))
    scheduled["metadata"]["labels"] = {"ordo.dev/trigger-kind": "TaskSchedule"}
    refused(alice("create", "-f", "-", input=to_yaml([scheduled]), check=False), mine)


def test_only_a_triggers_requester_changes_what_it_runs(
    users: dict[str, tuple[str, Any]],
) -> None:
    """Its Tasks name the trigger's requester, who then may not approve them: anyone else who
    may edit the trigger could otherwise run their own template under that name."""
    (alice_name, alice), (_, bob) = users["alice"], users["bob"]
    alice("create", "-f", "-", input=schedule("nightly", alice_name))

    def patch(who: Any, spec: str, check: bool = True) -> CompletedProcess[str]:
        return who("patch", "taskschedule", "nightly", "--type=merge", "-p", spec, check=check)

    other_agent = '{"spec": {"taskTemplate": {"spec": {"agentRef": "b", "input": "x"}}}}'
    refused(patch(bob, other_agent, check=False), f"only {alice_name} (its ordo.dev/requested-by)")
    refused(patch(bob, '{"spec": {"schedule": "* * * * *"}}', check=False), "only ")
    # Anyone who may edit it may stop it, and edit its metadata; only the requester resumes it.
    patch(bob, '{"spec": {"suspend": true}}')
    bob("label", "taskschedule", "nightly", "note=fine")
    refused(patch(bob, '{"spec": {"suspend": false}}', check=False), "only ")
    patch(alice, '{"spec": {"suspend": false}}')
    patch(alice, other_agent)
