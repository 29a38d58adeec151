"""The Helm chart and the kustomize base: lint, render, compare, and install them on the real
control plane, then run `ordo operator` with nothing but the chart's ServiceAccount token.

- helm is built from tools/helm by scripts/build-helm; without it these tests fail in CI and
  are skipped elsewhere (as the control plane binaries are).
- RBAC is checked three ways: the rendered rules equal OPERATOR_RULES (tests/support/
  packaging.py, read from the operator's code); a `kubectl auth can-i --as` matrix asks the API
  server about every verb on every ordo kind, Secrets, ConfigMaps and Events, plus kinds the
  operator must never touch; and the operator runs Task scenarios as that identity and its log
  must show no forbidden request.
- No kubelet runs here: the Deployment is stored, never started. The operator runs as a local
  process with the Deployment's own flags and environment, authenticated with a TokenRequest
  token of the chart's ServiceAccount.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.operator import (
    OperatorProcess,
    apply,
    events,
    get_json,
    wait_for,
    wait_ready,
    wait_task,
)
from tests.support.packaging import (
    CHART,
    GROUP,
    LEASE_RULES,
    MANIFESTS,
    OPERATOR_RULES,
    ROOT,
    RUNNER_RULES,
    container,
    container_env,
    expand_rules,
    helm,
    helm_template,
    kustomize_build,
    of_kind,
    one,
    operator_args,
    to_yaml,
)

from ordo.api import KINDS
from ordo_devcluster import ControlPlane

EXAMPLES = ROOT / "examples"

# Kinds and verbs outside the operator's rules, asked in every namespace: all must be denied.
DENIED_NAMESPACED = [
    ("", "pods", "create"),
    ("", "pods", "update"),
    ("", "pods", "delete"),
    ("", "pods/exec", "create"),
    ("", "pods/log", "get"),
    ("", "services", "create"),
    ("", "serviceaccounts", "create"),
    ("", "serviceaccounts/token", "create"),
    ("", "persistentvolumeclaims", "create"),
    ("apps", "deployments", "list"),
    ("apps", "deployments", "create"),
    ("apps", "deployments", "patch"),
    ("batch", "jobs", "update"),
    ("batch", "jobs", "patch"),
    ("batch", "cronjobs", "create"),
    ("networking.k8s.io", "networkpolicies", "delete"),
    ("events.k8s.io", "events", "delete"),
    ("rbac.authorization.k8s.io", "roles", "create"),
    ("rbac.authorization.k8s.io", "roles", "escalate"),
    ("rbac.authorization.k8s.io", "roles", "bind"),
    ("rbac.authorization.k8s.io", "rolebindings", "create"),
    ("kopf.dev", "kopfpeerings", "patch"),
]
# Cluster-scoped requests (or requests across all namespaces), denied for every install.
DENIED_CLUSTER = [
    ("", "secrets", "list"),
    ("", "secrets", "watch"),
    ("", "configmaps", "list"),
    ("", "namespaces", "get"),
    ("", "namespaces", "list"),
    ("", "namespaces", "create"),
    ("", "nodes", "list"),
    ("", "persistentvolumes", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "create"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "update"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "delete"),
    ("rbac.authorization.k8s.io", "clusterroles", "create"),
    ("rbac.authorization.k8s.io", "clusterroles", "escalate"),
    ("rbac.authorization.k8s.io", "clusterroles", "bind"),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "create"),
    ("", "users", "impersonate"),
    ("", "groups", "impersonate"),
    ("", "serviceaccounts", "impersonate"),
    ("certificates.k8s.io", "certificatesigningrequests", "create"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "create"),
    ("kopf.dev", "clusterkopfpeerings", "patch"),
]
# Log lines that mean the operator hit its RBAC limits (or lost an Event or a status write).
FORBIDDEN_MARKERS = ("forbidden", " 403", "could not post event", "could not write ready")

ORDO_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
STATUS_VERBS = ("get", "update", "patch")
ORDO_KINDS = (
    "agents",
    "modelendpoints",
    "tools",
    "agentroles",
    "toolpermissions",
    "agentpolicies",
    "guardrails",
    "memories",
    "tasks",
    "toolapprovals",
    "teams",
    "taskwebhooks",
    "taskschedules",
)


# -- helpers ----------------------------------------------------------------------------------


Question = tuple[
    str | None, str, str, str, bool
]  # namespace (None: all), group, resource, verb, expected


def _resource_arg(group: str, resource: str) -> tuple[str, list[str]]:
    base, _, sub = resource.partition("/")
    name = f"{base}.{group}" if group else base
    return name, ([f"--subresource={sub}"] if sub else [])


def can_i(
    cp: ControlPlane, user: str, verb: str, group: str, resource: str, namespace: str | None
) -> bool:
    """`kubectl auth can-i VERB RESOURCE --as USER` (namespace None: across all namespaces)."""
    name, extra = _resource_arg(group, resource)
    scope = ["--all-namespaces"] if namespace is None else ["-n", namespace]
    result = cp.kubectl("auth", "can-i", verb, name, *extra, *scope, f"--as={user}", check=False)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), f"can-i {verb} {name}: {result.stdout} {result.stderr}"
    return answer == "yes"


def access_reviews(cp: ControlPlane, user: str, questions: list[Question]) -> list[bool]:
    """The API server's answers, as SubjectAccessReviews (what `kubectl auth can-i --as`
    asks), all in one kubectl call: one process instead of one per question."""
    _, _, sa_namespace, _ = user.split(":")
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{sa_namespace}"]
    groups.append("system:authenticated")
    items = []
    for ns, group, resource, verb, _ in questions:
        base, _, sub = resource.partition("/")
        attrs = {"verb": verb, "group": group, "resource": base}
        if sub:
            attrs["subresource"] = sub
        if ns is not None:
            attrs["namespace"] = ns
        items.append(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": groups, "resourceAttributes": attrs},
            }
        )
    out = cp.kubectl(
        "create",
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    ).stdout
    decoder, pos, answers = json.JSONDecoder(), 0, []
    while pos < len(out):
        if out[pos].isspace():
            pos += 1
            continue
        review, pos = decoder.raw_decode(out, pos)
        answers.append(bool(review["status"].get("allowed")))
    assert len(answers) == len(questions)
    return answers


def can_i_matrix(
    cp: ControlPlane,
    user: str,
    granted: list[str],
    denied: list[str],
    *,
    cluster_wide: bool,
    lease_namespace: str | None = None,
) -> int:
    """Ask the API server every question; return how many were asked. Every ordo kind (and its
    status), Secrets, ConfigMaps, Events and Leases with every verb in `granted` namespaces
    (allowed exactly when in OPERATOR_RULES) and in `denied` namespaces (never allowed); kinds
    the operator never touches; cluster-scoped requests. `cluster_wide`: a ClusterRole, so the
    operator's namespaced rules also hold across all namespaces. A sample of the questions is
    also put to `kubectl auth can-i --as`, which must agree. In `lease_namespace` (the
    release namespace) LEASE_RULES are allowed too."""
    questions: list[Question] = []

    def granted_in(ns: str, rule: tuple[str, str, str]) -> bool:
        return (ns in granted and rule in OPERATOR_RULES) or (
            ns == lease_namespace and rule in LEASE_RULES
        )

    core = [("", "secrets"), ("", "configmaps"), ("", "events"), ("coordination.k8s.io", "leases")]
    kinds = [(GROUP, k) for k in ORDO_KINDS] + core
    namespaces = granted + denied + ([lease_namespace] if lease_namespace else [])
    for ns in dict.fromkeys(namespaces):
        for group, kind in kinds:
            for verb in ORDO_VERBS:
                allowed = granted_in(ns, (group, kind, verb))
                questions.append((ns, group, kind, verb, allowed))
        for kind in ORDO_KINDS:
            for verb in STATUS_VERBS:
                allowed = ns in granted and (GROUP, f"{kind}/status", verb) in OPERATOR_RULES
                questions.append((ns, GROUP, f"{kind}/status", verb, allowed))
        questions += [(ns, g, r, v, False) for g, r, v in DENIED_NAMESPACED]
    questions += [(None, g, r, v, False) for g, r, v in DENIED_CLUSTER]
    # Across all namespaces: allowed only for a ClusterRole, and then exactly the rules.
    for group, kind in kinds:
        for verb in ("get", "list", "watch", "patch"):
            allowed = cluster_wide and (group, kind, verb) in OPERATOR_RULES
            questions.append((None, group, kind, verb, allowed))

    def describe(q: Question, actual: bool) -> str:
        ns, group, resource, verb, expected = q
        where = f"in {ns}" if ns else "across all namespaces"
        return f"{verb} {resource}.{group or 'core'} {where}: allowed={actual}, expected {expected}"

    answers = access_reviews(cp, user, questions)
    wrong = [describe(q, a) for q, a in zip(questions, answers, strict=True) if a != q[4]]
    assert not wrong, "RBAC differs from OPERATOR_RULES:\n" + "\n".join(wrong)
    # The same verdicts from `kubectl auth can-i --as` for a sample: in the first granted
    # namespace and across all namespaces, every question about Secrets, every allowed core
    # verb, the ordo writes, and the escalation paths.
    first = granted[0] if granted else None
    sample = [
        q
        for q in questions
        if q[0] in (first, None)
        and (
            q[2] in ("secrets", "serviceaccounts/token", "roles", "clusterroles", "users")
            or (q[1] != GROUP and q[4])
            or (q[1] == GROUP and q[3] in ("create", "patch"))
        )
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        verdicts = list(pool.map(lambda q: can_i(cp, user, q[3], q[1], q[2], q[0]), sample))
    wrong = [describe(q, a) for q, a in zip(sample, verdicts, strict=True) if a != q[4]]
    assert not wrong, "kubectl auth can-i disagrees:\n" + "\n".join(wrong)
    return len(questions)


def assert_no_forbidden(op: OperatorProcess) -> None:
    lines = [
        line
        for line in op.logs().splitlines()
        if any(marker in line.lower() for marker in FORBIDDEN_MARKERS)
    ]
    assert not lines, "the operator hit its RBAC limits:\n" + "\n".join(lines[:10])


def apply_docs(cp: ControlPlane, docs: list[dict[str, Any]]) -> None:
    """Server-side apply, CRDs first (and Established) as helm and kustomize users would."""
    crds = of_kind(docs, "CustomResourceDefinition")
    rest = [d for d in docs if d.get("kind") != "CustomResourceDefinition"]
    if crds:
        cp.kubectl("apply", "--server-side", "-f", "-", input=to_yaml(crds))
        names = [f"crd/{d['metadata']['name']}" for d in crds]
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    cp.kubectl("apply", "--server-side", "-f", "-", input=to_yaml(rest))


@dataclass
class Install:
    cp: ControlPlane
    release_namespace: str
    docs: list[dict[str, Any]]
    service_account: str
    kubeconfig: Path

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.release_namespace}:{self.service_account}"

    def operator(self, log_dir: Path, name: str) -> OperatorProcess:
        """`ordo operator` with the Deployment's flags and env, as the ServiceAccount."""
        deployment = one(self.docs, "Deployment")
        env = {**os.environ, **container_env(deployment)}
        return OperatorProcess(
            self.cp,
            name,
            log_dir,
            env=env,
            kubeconfig=self.kubeconfig,
            scope=operator_args(deployment),
        )


def install(
    cp: ControlPlane, docs: list[dict[str, Any]], release_namespace: str, tmp: Path
) -> Install:
    apply_docs(cp, docs)
    account = one([d for d in docs if _operator(d)], "ServiceAccount")["metadata"]["name"]
    kubeconfig = cp.service_account_kubeconfig(
        release_namespace, account, create=False, path=tmp / f"{release_namespace}-sa.kubeconfig"
    )
    return Install(cp, release_namespace, docs, account, kubeconfig)


QUICKSTART_TASK = "research-operators"

PROBE = """
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: probe-agent}
spec: {modelRef: no-such-model, prompt: Be brief.}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: probe}
spec: {agentRef: probe-agent, input: go}
"""

SECRETS = """
apiVersion: v1
kind: Secret
metadata:
  name: model-key
  labels: {ordo.dev/credential: "true"}
  annotations: {ordo.dev/allowed-hosts: "127.0.0.1, localhost"}
stringData: {api-key: CANARY-SECRET-VALUE-4711}
---
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: keyed}
spec:
  provider: mock
  credentials: {secretRef: {name: model-key, key: api-key}}
  mock: {turns: [{text: "done"}]}
---
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: unkeyed}
spec:
  provider: mock
  credentials: {secretRef: {name: no-such-secret, key: api-key}}
  mock: {turns: [{text: "never"}]}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: keyed-agent}
spec: {modelRef: keyed, prompt: Be brief.}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: unkeyed-agent}
spec: {modelRef: unkeyed, prompt: Be brief.}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: orphan-agent}
spec: {modelRef: no-such-model, prompt: Be brief.}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: keyed-task}
spec: {agentRef: keyed-agent, input: go}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: unkeyed-task}
spec: {agentRef: unkeyed-agent, input: go}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: orphan-task}
spec: {agentRef: orphan-agent, input: go}
"""

SLOW = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: slow}
spec:
  provider: mock
  mock: {turns: [{toolCalls: [{tool: lookup}], delay: 2s}, {text: never, delay: 5s}]}
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {name: lookup}
spec: {type: mock, description: a canned tool, mock: {result: ok}, idempotent: true}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: slow-agent}
spec: {modelRef: slow, prompt: Be brief., tools: [lookup]}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: stop-me}
spec: {agentRef: slow-agent, input: go}
"""


def run_quickstart(cp: ControlPlane, ns: str) -> dict[str, Any]:
    apply(cp, ns, EXAMPLES / "quickstart")
    task = wait_task(cp, ns, QUICKSTART_TASK)
    status = task["status"]
    assert (status["phase"], status["reason"], status["step"]) == ("Succeeded", "Succeeded", 2)
    assert status["toolCalls"][0]["decision"] == "allowed"
    # The finalizer is removed, and the checkpoint ConfigMap deleted, by writes that follow
    # the terminal status (not in it): wait for them rather than race them.
    wait_for(
        lambda: (
            "ordo.dev/run"
            not in (
                get_json(cp, "task", QUICKSTART_TASK, "-n", ns)["metadata"].get("finalizers") or []
            )
        ),
        30,
        what="the finalizer released after the terminal write",
    )
    reasons = {e["reason"] for e in events(cp, ns, QUICKSTART_TASK)}
    assert {"Started", "Succeeded"} <= reasons, reasons
    wait_for(
        lambda: not get_json(cp, "configmaps", "-n", ns)["items"],
        30,
        what="no checkpoint ConfigMap left after the Task ended",
    )
    wait_ready(cp, ns, "agent", "research-agent", "True")
    return task


# -- render only: helm lint, helm template, the kustomize base --------------------------------

ALL_OPTIONS: dict[str, Any] = {
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "grafanaDashboard": {"enabled": True},
    "peering": {"enabled": True},
    "rbac": {"userRoles": {"create": True, "aggregateToDefaultRoles": True}},
}


@pytest.mark.parametrize(
    "values",
    [{}, {"watchNamespaces": ["team-a", "team-b"]}, ALL_OPTIONS, {"image": {"tag": 1}}],
    ids=["defaults", "namespaced", "all-options", "numeric-tag"],
)
def test_helm_lint_is_clean(tmp_path: Path, values: dict[str, Any]) -> None:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(json.dumps(values))
    result = helm(tmp_path, "lint", "--strict", str(CHART), "--values", str(values_file))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_helm_rejects_values_outside_the_schema(tmp_path: Path) -> None:
    for args in (
        ["--set", "operator.maxConcurrentTasks=0"],
        ["--set", "watchNamespaces={Team_A}"],
        ["--set", "unknownKey=1"],
        ["--set", "operator.resyncSeconds=0"],
        ["--set", "resources.requests.cpu=lots"],
        ["--set", "operator.extraArgs={--not-a-flag}"],
    ):
        result = helm(tmp_path, "template", "ordo", str(CHART), *args, check=False)
        assert result.returncode != 0 and "schema" in result.stderr, (args, result.stderr)


def test_chart_defaults_equal_the_kustomize_base(tmp_path: Path) -> None:
    chart = helm_template(tmp_path, namespace="ordo-system", include_crds=True)
    base = kustomize_build()
    # The same RBAC: exactly the operator's rules, bound to the operator's ServiceAccount.
    chart_rules = expand_rules(one(chart, "ClusterRole")["rules"])
    base_rules = expand_rules(one(base, "ClusterRole")["rules"])
    assert chart_rules == base_rules == set(OPERATOR_RULES)
    for docs in (chart, base):
        binding = one(docs, "ClusterRoleBinding")
        account = one(docs, "ServiceAccount")["metadata"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["name"], "namespace": "ordo-system"}
        ]
        assert binding["roleRef"]["name"] == one(docs, "ClusterRole")["metadata"]["name"]
        # One Role besides: the process Leases, in the operator's own namespace.
        role, role_binding = one(docs, "Role"), one(docs, "RoleBinding")
        assert role["metadata"]["namespace"] == "ordo-system"
        assert expand_rules(role["rules"]) == set(LEASE_RULES)
        assert role_binding["roleRef"]["name"] == role["metadata"]["name"]
        assert role_binding["subjects"] == binding["subjects"]
    # The same CRDs.
    crds = {d["metadata"]["name"]: d for d in of_kind(chart, "CustomResourceDefinition")}
    assert crds == {d["metadata"]["name"]: d for d in of_kind(base, "CustomResourceDefinition")}
    assert len(crds) == len(KINDS)  # one CRD per kind the API defines
    # The same Deployment, Service and container, labels aside.
    c_dep, b_dep = one(chart, "Deployment"), one(base, "Deployment")
    for key in ("replicas", "strategy"):
        assert c_dep["spec"][key] == b_dep["spec"][key], key
    c_pod, b_pod = c_dep["spec"]["template"]["spec"], b_dep["spec"]["template"]["spec"]
    for key in (
        "securityContext",
        "terminationGracePeriodSeconds",
        "volumes",
        "automountServiceAccountToken",
    ):
        assert c_pod[key] == b_pod[key], key
    c_ctr, b_ctr = container(c_dep), container(b_dep)
    for key in (
        "image",
        "args",
        "env",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
    ):
        assert c_ctr[key] == b_ctr[key], key
    c_svc, b_svc = one(chart, "Service"), one(base, "Service")
    assert c_svc["metadata"]["name"] == b_svc["metadata"]["name"]
    assert c_svc["spec"] == b_svc["spec"]


def test_chart_deployment_is_restricted(tmp_path: Path) -> None:
    deployment = one(helm_template(tmp_path), "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 60
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctr = container(deployment)
    sc = ctr["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert ctr["resources"]["requests"] and ctr["resources"]["limits"]["memory"]
    assert {"name": "tmp", "mountPath": "/tmp"} in ctr["volumeMounts"]
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert f"--health-port={ports['health']}" in ctr["args"]
    assert f"--metrics-port={ports['metrics']}" in ctr["args"]
    assert container_env(deployment)["HOME"] == "/tmp"


def test_chart_namespaced_install_creates_nothing_cluster_wide(tmp_path: Path) -> None:
    docs = helm_template(
        tmp_path, namespace="ordo-system", values={"watchNamespaces": ["team-a", "team-b"]}
    )
    cluster_scoped = [
        d["kind"]
        for d in docs
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition")
    ]
    assert not cluster_scoped, cluster_scoped
    roles = {d["metadata"]["namespace"]: d for d in of_kind(docs, "Role") if _operator(d)}
    bindings = {d["metadata"]["namespace"]: d for d in of_kind(docs, "RoleBinding") if _operator(d)}
    assert set(roles) == set(bindings) == {"team-a", "team-b"}
    for ns, role in roles.items():
        assert expand_rules(role["rules"]) == set(OPERATOR_RULES), ns
        assert bindings[ns]["subjects"] == [
            {"kind": "ServiceAccount", "name": "ordo", "namespace": "ordo-system"}
        ]
    args = container(one(docs, "Deployment"))["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--all-namespaces" not in args


def _operator(doc: dict[str, Any]) -> bool:
    """The operator's own object in a watched namespace (not the Job-mode runner's, nor the
    process Leases' Role in the release namespace)."""
    return doc["metadata"]["labels"].get("app.kubernetes.io/component") == "operator" and not doc[
        "metadata"
    ]["name"].endswith("-leases")


def _runner(doc: dict[str, Any]) -> bool:
    """The Job-mode runner's object."""
    return doc["metadata"]["labels"].get("app.kubernetes.io/component") == "task-runner"


def test_chart_grants_the_process_leases_in_the_release_namespace_only(tmp_path: Path) -> None:
    """Every shard's ServiceAccount may keep its processes' Leases in the release namespace,
    and no Lease rule exists anywhere else."""
    docs = helm_template(
        tmp_path,
        namespace="ordo-system",
        values={
            "shards": [
                {"name": "a", "namespaces": ["team-a"]},
                {"name": "b", "namespaces": ["team-b"]},
            ]
        },
    )
    leases = [
        d for d in of_kind(docs, "Role", "RoleBinding") if d["metadata"]["name"].endswith("-leases")
    ]
    role, binding = one(leases, "Role"), one(leases, "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "ordo-system"
    assert expand_rules(role["rules"]) == set(LEASE_RULES)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"ordo-{shard}", "namespace": "ordo-system"}
        for shard in ("a", "b")
    ]
    others = [d for d in of_kind(docs, "Role", "ClusterRole") if d is not role]
    assert not any("leases" in str(d.get("rules")) for d in others)


def test_chart_creates_the_runner_account_in_each_watched_namespace(tmp_path: Path) -> None:
    docs = helm_template(
        tmp_path,
        values={"watchNamespaces": ["team-a", "team-b"], "jobs": {"secretNames": ["model-key"]}},
    )
    runners = [d for d in docs if d["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
    runners = [d for d in runners if _runner(d)]
    assert sorted((d["kind"], d["metadata"]["namespace"]) for d in runners) == sorted(
        (k, ns) for k in ("ServiceAccount", "Role", "RoleBinding") for ns in ("team-a", "team-b")
    )
    for role in of_kind(runners, "Role"):
        assert expand_rules(role["rules"]) == set(RUNNER_RULES) | {
            ("", "secrets[model-key]", "get")
        }
    for binding in of_kind(runners, "RoleBinding"):
        ns = binding["metadata"]["namespace"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "ordo-runner", "namespace": ns}
        ]
    # No secretNames: no Secret rule at all (an empty resourceNames would mean every Secret).
    docs = helm_template(tmp_path, values={"watchNamespaces": ["team-a"]})
    role = next(d for d in of_kind(docs, "Role") if _runner(d))
    assert expand_rules(role["rules"]) == set(RUNNER_RULES)
    # The operator builds the pods from the chart's own image and the runner account.
    args = container(one(docs, "Deployment"))["args"]
    assert "--job-image=ordo:0.1.0" in args and "--job-service-account=ordo-runner" in args


def test_chart_peering_adds_only_its_own_peering_object(tmp_path: Path) -> None:
    for values, kind, role_kind in (
        ({"peering": {"enabled": True}}, "ClusterKopfPeering", "ClusterRole"),
        (
            {"peering": {"enabled": True}, "watchNamespaces": ["team-a"]},
            "KopfPeering",
            "Role",
        ),
    ):
        docs = helm_template(tmp_path, values=values)
        plural = kind.lower() + "s"
        peering = one(docs, kind)
        role = one([d for d in docs if _operator(d)], role_kind)
        extra = expand_rules(role["rules"]) - set(OPERATOR_RULES)
        name = peering["metadata"]["name"]
        assert extra == {
            ("kopf.dev", plural, "list"),
            ("kopf.dev", plural, "watch"),
            ("kopf.dev", f"{plural}[{name}]", "get"),
            ("kopf.dev", f"{plural}[{name}]", "patch"),
        }
        assert f"--peering={name}" in container(one(docs, "Deployment"))["args"]
        crds = {d["metadata"]["name"] for d in of_kind(docs, "CustomResourceDefinition")}
        assert crds == {"kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}


def test_chart_optional_objects_equal_the_kustomize_components(tmp_path: Path) -> None:
    chart = helm_template(tmp_path, values=ALL_OPTIONS)
    monitoring = kustomize_build(MANIFESTS / "overlays" / "monitoring")
    assert one(chart, "PrometheusRule")["spec"] == one(monitoring, "PrometheusRule")["spec"]
    assert one(chart, "ServiceMonitor")["spec"] == one(monitoring, "ServiceMonitor")["spec"]
    alerts = [r["alert"] for r in one(chart, "PrometheusRule")["spec"]["groups"][0]["rules"]]
    assert alerts == [
        "OrdoTaskFailureRatioHigh",
        "OrdoModelErrorRatioHigh",
        "OrdoTasksPendingTooLong",
        "OrdoCheckpointUntrusted",
        "OrdoOperatorDown",
    ]
    user_roles = kustomize_build(MANIFESTS / "components" / "user-roles")
    chart_roles = {
        d["metadata"]["name"]: expand_rules(d["rules"])
        for d in of_kind(chart, "ClusterRole")
        if d["metadata"]["name"] != "ordo"
    }
    assert chart_roles == {d["metadata"]["name"]: expand_rules(d["rules"]) for d in user_roles}
    dashboard = one([d for d in of_kind(chart, "ConfigMap")], "ConfigMap")
    assert json.loads(dashboard["data"]["ordo.json"]) == json.loads(
        (CHART / "files" / "dashboard.json").read_text()
    )


# -- on the control plane: the namespaced install ---------------------------------------------


@dataclass
class Namespaced:
    install: Install
    watched: list[str]
    unwatched: str


@pytest.fixture(scope="module")
def namespaced(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Namespaced]:
    tmp = tmp_path_factory.mktemp("namespaced")
    release_ns = control_plane.create_namespace(prefix="ordo-system")
    watched = [control_plane.create_namespace(prefix="team") for _ in range(2)]
    unwatched = control_plane.create_namespace(prefix="other")
    docs = helm_template(
        tmp, namespace=release_ns, values={"watchNamespaces": watched}, include_crds=True
    )
    # CRDs (identical to the session's), ServiceAccount, Roles, RoleBindings, Service and a
    # Deployment that no kubelet will ever start.
    yield Namespaced(install(control_plane, docs, release_ns, tmp), watched, unwatched)


def test_namespaced_install_is_stored_as_rendered(
    control_plane: ControlPlane, namespaced: Namespaced
) -> None:
    ns = namespaced.install.release_namespace
    stored = get_json(control_plane, "deployment", "ordo", "-n", ns)
    assert stored["spec"]["template"]["spec"]["serviceAccountName"] == "ordo"
    for watched in namespaced.watched:
        role = get_json(control_plane, "role", "ordo", "-n", watched)
        assert expand_rules(role["rules"]) == set(OPERATOR_RULES)
    assert (
        control_plane.kubectl("get", "role", "ordo", "-n", namespaced.unwatched, check=False)
    ).returncode != 0


def test_namespaced_install_can_i_matrix(
    control_plane: ControlPlane, namespaced: Namespaced
) -> None:
    asked = can_i_matrix(
        control_plane,
        namespaced.install.user,
        granted=namespaced.watched,
        denied=[namespaced.unwatched, namespaced.install.release_namespace],
        cluster_wide=False,
        lease_namespace=namespaced.install.release_namespace,
    )
    assert asked > 400


def test_namespaced_identity_is_refused_for_real(
    control_plane: ControlPlane, namespaced: Namespaced
) -> None:
    """Real requests with the ServiceAccount's token, not just can-i: what it may not do."""
    ns = namespaced.watched[0]
    kubeconfig = namespaced.install.kubeconfig

    def as_operator(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return control_plane.kubectl(*args, kubeconfig=kubeconfig, check=False, input=input)

    control_plane.kubectl(
        "create", "secret", "generic", "visible-by-name", "-n", ns, "--from-literal=k=v"
    )
    assert as_operator("get", "secret", "visible-by-name", "-n", ns).returncode == 0
    for args in (
        ("get", "secrets", "-n", ns),
        ("get", "secrets", "--all-namespaces"),
        ("get", "secret", "visible-by-name", "-n", namespaced.unwatched),
        ("get", "configmaps", "-n", ns),
        ("get", "pods", "-n", namespaced.unwatched),
        ("create", "job", "x", "--image=busybox", "-n", namespaced.unwatched),
        ("get", "tasks", "-n", namespaced.unwatched),
        ("create", "role", "x", "--verb=get", "--resource=secrets", "-n", ns),
        ("create", "token", "ordo", "-n", namespaced.install.release_namespace),
    ):
        result = as_operator(*args)
        assert result.returncode != 0 and "forbidden" in result.stderr.lower(), (args, result)
    # It may not create, edit or delete ordo objects: it only patches a Task's finalizers and
    # the status of its kinds, and deletes finished Tasks whose TTL passed (retention). (The
    # operator is not running here: the probe stays untouched.)
    ns = namespaced.watched[1]
    apply(control_plane, ns, PROBE)
    for args, body in (
        (("patch", "agent", "probe-agent", "-n", ns, "--type=merge", "-p", '{"spec":{}}'), None),
        (("delete", "agent", "probe-agent", "-n", ns), None),
        (("create", "-n", ns, "-f", "-"), PROBE.replace("name: probe", "name: probe-2")),
        (("annotate", "agent", "probe-agent", "-n", ns, "x=y"), None),
    ):
        result = as_operator(*args, input=body)
        assert result.returncode != 0 and "forbidden" in result.stderr.lower(), (args, result)
    # RBAC grants `patch` on Tasks (for the finalizer) and cannot narrow it to one field; the
    # Task CRD's CEL rule keeps the spec immutable except `cancel`, so even that grant cannot
    # point a Task at another Agent.
    result = as_operator(
        "patch", "task", "probe", "-n", ns, "--type=merge", "-p", '{"spec":{"agentRef":"other"}}'
    )
    assert result.returncode != 0 and "immutable" in result.stderr.lower(), result
    control_plane.kubectl("delete", "-n", ns, "-f", "-", input=PROBE)


def test_namespaced_install_runs_tasks_with_only_its_service_account(
    control_plane: ControlPlane, namespaced: Namespaced, tmp_path: Path
) -> None:
    cp = control_plane
    first, second = namespaced.watched
    op = namespaced.install.operator(tmp_path, "namespaced").start()
    try:
        assert op.scope[: len(namespaced.watched)] == [f"--namespace={n}" for n in [first, second]]
        # Everything at once, in both watched namespaces and in one that is not watched.
        apply(cp, first, EXAMPLES / "quickstart")
        apply(cp, first, EXAMPLES / "governance")
        apply(cp, first, SECRETS)
        apply(cp, first, SLOW)
        apply(cp, second, EXAMPLES / "quickstart")
        apply(cp, namespaced.unwatched, EXAMPLES / "quickstart")

        # Cancel: spec.cancel on a running Task (written by the operator's checkpoints).
        wait_task(cp, first, "stop-me", phases=("Running",))
        cp.kubectl(
            "patch",
            "task",
            "stop-me",
            "-n",
            first,
            "--type=merge",
            "-p",
            '{"spec":{"cancel":true}}',
        )
        status = wait_task(cp, first, "stop-me")["status"]
        assert (status["phase"], status["reason"]) == ("Cancelled", "Cancelled"), status

        # The quickstart, in each watched namespace.
        for ns in (first, second):
            run_quickstart(cp, ns)

        # Governance: both Tasks end ToolDenied, with a Warning Event each.
        for name in ("intern-cleanup", "auditor-cleanup"):
            status = wait_task(cp, first, name)["status"]
            assert (status["phase"], status["reason"]) == ("Failed", "ToolDenied"), status
            warnings = [e for e in events(cp, first, name) if e["reason"] == "ToolDenied"]
            assert warnings and warnings[0]["type"] == "Warning"

        # A Secret read by name: the keyed endpoint is Ready and its Task succeeds; a missing
        # Secret and a missing ModelEndpoint fail before any model call.
        assert wait_ready(cp, first, "modelendpoint", "keyed", "True")["reason"] == "Configured"
        missing = wait_ready(cp, first, "modelendpoint", "unkeyed", "False")
        assert missing["reason"] == "SecretNotFound"
        status = wait_task(cp, first, "keyed-task")["status"]
        assert status["phase"] == "Succeeded", status
        for name, reason in (
            ("unkeyed-task", "SecretNotFound"),
            ("orphan-task", "ModelEndpointNotFound"),
        ):
            status = wait_task(cp, first, name)["status"]
            assert (status["phase"], status["reason"], status["step"]) == ("Failed", reason, 0)
        agent = wait_ready(cp, first, "agent", "orphan-agent", "False")
        assert agent["reason"] == "MissingReferences"

        # Nothing was done in the namespace the install does not cover.
        time.sleep(1)
        task = get_json(cp, "task", QUICKSTART_TASK, "-n", namespaced.unwatched)
        assert not task.get("status"), task.get("status")
        assert not task["metadata"].get("finalizers")
        assert not events(cp, namespaced.unwatched)

        metrics = op.metrics()
        assert 'ordo_kube_api_requests_total{verb="patch-status"}' in metrics
        assert f'namespace="{second}",phase="Succeeded"' in metrics
    finally:
        op.stop()
    assert_no_forbidden(op)
    # The Secret's value went nowhere it should not.
    assert "CANARY-SECRET-VALUE-4711" not in op.logs()
    for name in ("keyed", "unkeyed"):
        assert "CANARY" not in json.dumps(get_json(cp, "modelendpoint", name, "-n", first))


# -- on a cluster of its own: the cluster-wide chart and the kustomize base --------------------


@pytest.fixture
def own_cluster(control_plane_factory: Callable[..., ControlPlane]) -> Iterator[ControlPlane]:
    """An empty control plane (no CRDs): the installs bring their own, and an operator watching
    every namespace cannot disturb the other tests' namespaces."""
    with control_plane_factory() as cp:
        yield cp


def test_cluster_wide_chart_and_kustomize_base(own_cluster: ControlPlane, tmp_path: Path) -> None:
    cp = own_cluster
    # Helm: release "ordo-chart" in its own namespace, every namespace watched.
    cp.kubectl("create", "namespace", "ordo-chart")
    chart = install(
        cp,
        helm_template(tmp_path, release="ordo-chart", namespace="ordo-chart", include_crds=True),
        "ordo-chart",
        tmp_path,
    )
    # kustomize: the base as it is (namespace ordo-system, ClusterRole ordo).
    base = install(cp, kustomize_build(), "ordo-system", tmp_path)
    established = cp.kubectl("get", "crd", "-o", "name").stdout.split()
    assert len([c for c in established if c.endswith(".ordo.dev")]) == len(KINDS)

    tenants = [cp.create_namespace(prefix="tenant") for _ in range(2)]
    for identity in (chart, base):
        asked = can_i_matrix(
            cp,
            identity.user,
            granted=[*tenants, identity.release_namespace],
            denied=[],
            cluster_wide=True,
            lease_namespace=identity.release_namespace,
        )
        assert asked > 400

    # The operator as the chart's ServiceAccount, then as the kustomize one: the quickstart in
    # namespaces that did not exist when it was installed (no per-namespace RBAC needed).
    for identity, ns in ((chart, tenants[0]), (base, tenants[1])):
        op = identity.operator(tmp_path, identity.release_namespace).start()
        try:
            assert op.scope[0] == "--all-namespaces"
            run_quickstart(cp, ns)
        finally:
            op.stop()
        assert_no_forbidden(op)


def test_peered_operators_run_tasks_and_pause_together(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """With `peering.enabled` an operator runs Tasks (its Task events come through kopf, not
    ordo's own feed, so that peering can pause them), and a second operator on the same
    peering object pauses both: a new Task is then not touched at all."""
    cp = control_plane
    release_ns = cp.create_namespace(prefix="ordo-system")
    team = cp.create_namespace(prefix="team")
    docs = helm_template(
        tmp_path,
        namespace=release_ns,
        values={"watchNamespaces": [team], "peering": {"enabled": True}},
        include_crds=True,
    )
    peered = install(cp, docs, release_ns, tmp_path)
    first = peered.operator(tmp_path, "peer-1").start()
    second: OperatorProcess | None = None
    try:
        assert any(a.startswith("--peering=") for a in first.scope)
        run_quickstart(cp, team)
        second = peered.operator(tmp_path, "peer-2").start()
        wait_for(
            lambda: "Pausing all operators" in first.logs(),
            60,
            what="the first operator to pause for its peer",
        )
        apply(cp, team, PROBE)
        time.sleep(5)
        probe = get_json(cp, "task", "probe", "-n", team)
        assert not probe.get("status"), probe.get("status")
        assert not probe["metadata"].get("finalizers")
    finally:
        if second is not None:
            second.stop()
        first.stop()
