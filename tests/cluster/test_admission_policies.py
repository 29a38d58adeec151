"""The chart's ValidatingAdmissionPolicy for reserved labels (issue 26 §4), on the real
kube-apiserver: labels under `policy.ordo.dev/` on Agents may be set, changed or removed only
by an identity that may update AgentPolicies in the namespace (RBAC decides, through CEL's
`authorizer`), so an editor cannot unbind a policy that selects by them; other labels stay
free. Also which installs render it (cluster-wide by default; namespaced only on request,
bound to the watched namespaces)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
from tests.support.operator import wait_for
from tests.support.packaging import helm_template, kustomize_build, of_kind, to_yaml

from ordo_devcluster import ControlPlane

POLICY = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"
RESERVED = "policy.ordo.dev/tier"
BOUND = f"{{{RESERVED}: x}}"
REFUSED = "labels under policy.ordo.dev/ bind AgentPolicies"

AGENT = """
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata:
  name: {name}
  labels: {labels}
spec: {{modelRef: m}}
"""


def admission_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reserved-labels policy and its binding (the chart has other admission policies:
    tests/cluster/test_approval_admission.py)."""
    return [
        d
        for d in of_kind(docs, POLICY, BINDING)
        if d["metadata"]["name"].endswith("reserved-policy-labels")
    ]


def test_rendered_with_a_cluster_wide_install_only_by_default(tmp_path: Path) -> None:
    cluster_wide = admission_docs(helm_template(tmp_path))
    assert [d["kind"] for d in cluster_wide] == [POLICY, BINDING]
    policy, binding = cluster_wide
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"] == {}  # every namespace
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": ["ordo.dev"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["agents"],
        }
    ]
    # The kustomize base (a cluster-wide install) carries the same objects.
    base = admission_docs(kustomize_build())
    assert [(d["metadata"]["name"], d["spec"]) for d in base] == [
        (d["metadata"]["name"], d["spec"]) for d in cluster_wide
    ]
    # A namespaced install creates nothing cluster-wide unless asked to...
    watched = {"watchNamespaces": ["team-a", "team-b"]}
    assert admission_docs(helm_template(tmp_path, values=watched)) == []
    # ...and then binds the policy to its watched namespaces only (every shard's).
    for values in (
        {**watched, "admissionPolicies": {"enabled": True}},
        {
            "shards": [
                {"name": "a", "namespaces": ["team-a"]},
                {"name": "b", "namespaces": ["team-b"]},
            ],
            "admissionPolicies": {"enabled": True},
        },
    ):
        _, binding = admission_docs(helm_template(tmp_path, values=values))
        assert binding["spec"]["matchResources"] == {
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": ["team-a", "team-b"],
                    }
                ]
            }
        }
    off = {"admissionPolicies": {"enabled": False}}
    assert admission_docs(helm_template(tmp_path, values=off)) == []


Kubectl = Callable[..., CompletedProcess[str]]


@pytest.fixture
def users(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> dict[str, Kubectl]:
    """Install the rendered policy, binding and user roles (a release of its own, bound to
    this test's namespace only, so no other test sees it); kubectl as a ServiceAccount bound
    to the chart's `editor`, and one bound to its `governance-admin`, in the namespace."""
    release = f"adm{uuid.uuid4().hex[:6]}"
    values = {
        "watchNamespaces": [namespace],
        "admissionPolicies": {"enabled": True},
        "rbac": {"userRoles": {"create": True}},
    }
    docs = helm_template(tmp_path, release=release, values=values)
    roles = ("editor", "governance-admin")
    installed = admission_docs(docs) + [
        d for d in of_kind(docs, "ClusterRole") if d["metadata"]["name"].endswith(roles)
    ]
    assert len(installed) == 4
    control_plane.kubectl("apply", "--server-side", "-f", "-", input=to_yaml(installed))

    def as_user(role: str) -> Kubectl:
        control_plane.kubectl(
            "create",
            "rolebinding",
            role,
            "-n",
            namespace,
            f"--clusterrole={release}-ordo-{role}",
            f"--serviceaccount={namespace}:{role}",
        )
        kubeconfig = control_plane.service_account_kubeconfig(namespace, role)

        def run(*args: str, **kwargs: Any) -> CompletedProcess[str]:
            return control_plane.kubectl(*args, "-n", namespace, kubeconfig=kubeconfig, **kwargs)

        return run

    users = {role: as_user(role) for role in roles}
    # The policy takes effect once the API server has loaded it (and, on a control plane that
    # just started, once its admission informers synced: 35 s once in CI): wait until it refuses.
    # A new name per attempt: a probe the policy let through (not loaded yet) exists, and
    # applying it again is an update that keeps the label, which the policy rightly allows.
    attempts = iter(range(1000))
    last: list[str] = []

    def refuses() -> bool:
        probe = AGENT.format(name=f"probe-{next(attempts)}", labels=BOUND)
        result = users["editor"]("apply", "-f", "-", input=probe, check=False)
        last[:] = [result.stderr.strip()[-300:]]
        return REFUSED in result.stderr

    try:
        wait_for(refuses, 120, what="the admission policy to take effect")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the last answer: {last}") from None
    return users


def test_only_policy_admins_set_change_or_remove_reserved_labels(
    users: dict[str, Kubectl],
) -> None:
    editor, governance = users["editor"], users["governance-admin"]

    def refused(result: CompletedProcess[str]) -> None:
        assert result.returncode != 0, result.stdout
        assert REFUSED in result.stderr, result.stderr

    # Create: an editor cannot bind (or pre-bind) an Agent by a reserved label.
    refused(
        editor(
            "apply",
            "-f",
            "-",
            input=AGENT.format(name="a", labels=BOUND),
            check=False,
        )
    )
    # Ordinary labels stay free for editors.
    editor("apply", "-f", "-", input=AGENT.format(name="a", labels="{team: blue}"))
    editor("label", "agent", "a", "team=green", "--overwrite")
    # A policy admin binds it.
    governance("label", "agent", "a", f"{RESERVED}=restricted")
    # Removing or changing it as an editor is refused: the policy stays bound.
    refused(editor("label", "agent", "a", f"{RESERVED}-", check=False))
    refused(editor("label", "agent", "a", f"{RESERVED}=other", "--overwrite", check=False))
    refused(
        editor(
            "patch",
            "agent",
            "a",
            "--type=json",
            "-p",
            '[{"op": "remove", "path": "/metadata/labels/policy.ordo.dev~1tier"}]',
            check=False,
        )
    )
    # An editor still edits the Agent itself, and its other labels, with the label kept.
    editor("label", "agent", "a", "team=red", "--overwrite")
    editor("patch", "agent", "a", "--type=merge", "-p", '{"spec": {"prompt": "Be brief."}}')
    labels = editor("get", "agent", "a", "-o", "jsonpath={.metadata.labels}").stdout
    assert '"policy.ordo.dev/tier":"restricted"' in labels and '"team":"red"' in labels
    # Re-applying a manifest that carries the reserved label unchanged is no change to it.
    kept = AGENT.format(name="a", labels=f"{{{RESERVED}: restricted, team: red}}")
    editor("apply", "--server-side", "--force-conflicts", "-f", "-", input=kept)
    # A policy admin may change and remove it.
    governance("label", "agent", "a", f"{RESERVED}=strict", "--overwrite")
    governance("label", "agent", "a", f"{RESERVED}-")
    # And may create an Agent bound from the start.
    governance("apply", "-f", "-", input=AGENT.format(name="b", labels=BOUND))
