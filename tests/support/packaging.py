"""Helpers for the packaging tests: find helm and kubectl, render the chart and the kustomize
base, and normalise RBAC rules.

``OPERATOR_RULES`` is the one statement of what the operator may do, read from the code
(controller/ordo/operator: kopf watches, kube.py's verbs, the checkpoint ConfigMap, the
process Leases, Events).
The chart, the kustomize base and the ``kubectl auth can-i`` matrix are all checked against it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "ordo"
MANIFESTS = ROOT / "manifests"
KUSTOMIZE_BASE = MANIFESTS / "base"
HELM_MODULE = ROOT / "tools" / "helm"
HELM_ENV = "ORDO_HELM"

GROUP = "ordo.dev"
# (apiGroup, resource[/subresource], verb): everything the operator's identity may do in a
# watched namespace. Nothing else, anywhere.
Rule = tuple[str, str, str]
ORDO_RESOURCES = (
    "tasks",
    "agents",
    "modelendpoints",
    "tools",
    "memories",
    "agentroles",
    "toolpermissions",
    "agentpolicies",
    "guardrails",
    "toolapprovals",
)
OPERATOR_RULES: frozenset[Rule] = frozenset(
    # kopf watches these (list + watch); ordo's client gets and lists them.
    {(GROUP, r, v) for r in ORDO_RESOURCES for v in ("get", "list", "watch")}
    # The ordo.dev/run finalizer (a merge patch of metadata.finalizers, resourceVersion-guarded).
    | {(GROUP, "tasks", "patch")}
    # A finished Task whose TTL passed (operator/lifecycle/retention.py: resourceVersion-conditional),
    # the children of a deleted parent (operator/tasks/childwait.py).
    | {(GROUP, "tasks", "delete")}
    # Child Tasks of agent Tool calls (operator/tasks/children.py), owned by their parent
    # (a blocking ownerReference needs update on the parent's finalizers).
    | {(GROUP, "tasks", "create"), (GROUP, "tasks/finalizers", "update")}
    # Status written with merge patches: Task progress and results, Ready conditions.
    | {(GROUP, f"{r}/status", "patch") for r in ORDO_RESOURCES}
    # Teams (a Team Task's members, their Ready condition); the Job runner never reads them.
    | {(GROUP, "teams", v) for v in ("get", "list", "watch")}
    | {(GROUP, "teams/status", "patch")}
    # TaskWebhooks: their Ready condition (the Secret key opted in, the template's Agent exists).
    | {(GROUP, "taskwebhooks", v) for v in ("get", "list", "watch")}
    | {(GROUP, "taskwebhooks/status", "patch")}
    # TaskSchedules (operator/triggers/): read, their status written; the Tasks they create use
    # the Task verbs above. The Job runner never reads them.
    | {(GROUP, "taskschedules", v) for v in ("get", "list", "watch")}
    | {(GROUP, "taskschedules/status", "patch")}
    # Secrets named by ModelEndpoints, Tools and Memories: get by name, never list or watch.
    | {("", "secrets", "get")}
    # The per-Task checkpoint ConfigMap ordo-checkpoint-<uid> (every save after the first is a
    # JSON Patch fenced on its execution annotation: patch); those of finished Tasks are
    # deleted in batches by their ordo.dev/checkpoint-uid label (deletecollection).
    | {
        ("", "configmaps", v)
        for v in ("get", "create", "update", "patch", "delete", "deletecollection")
    }
    # ordo's own Events (core/v1).
    | {("", "events", "create")}
    # Execution mode Job (operator/jobmode/supervisor.py): the Job ordo-task-<uid> (created, watched by kopf,
    # read, deleted to stop it) and its pods (read, to map a failure to a Task reason).
    | {("batch", "jobs", v) for v in ("get", "list", "watch", "create", "delete")}
    | {("", "pods", v) for v in ("get", "list")}
)

# What the operator may do in its own (release) namespace on top of that: its processes' Leases
# (operator/tasks/processlease.py: create its own, renew it with a merge patch, delete it at
# shutdown; list and watch the peers'; delete one lapsed for ten periods). No get, no update.
LEASE_RULES: frozenset[Rule] = frozenset(
    {("coordination.k8s.io", "leases", v) for v in ("list", "watch", "create", "patch", "delete")}
)

# What the runner ServiceAccount of a namespace (Job-mode pods, `ordo run-task`) may do there:
# read the ordo objects a Task references (never watch), write the Task's finalizer and status,
# its checkpoint and Events (the execution lease is in the Task's status). Secrets only by
# the names in jobs.secretNames, added as
# ("", "secrets[name,...]", "get").
RUNNER_RULES: frozenset[Rule] = frozenset(
    {(GROUP, r, v) for r in ORDO_RESOURCES for v in ("get", "list")}
    | {(GROUP, "tasks", "patch"), (GROUP, "tasks/status", "patch")}
    # A Job-mode parent creates its child Tasks (operator/tasks/children.py).
    | {(GROUP, "tasks", "create"), (GROUP, "tasks/finalizers", "update")}
    | {("", "configmaps", v) for v in ("get", "create", "update", "patch", "delete")}
    | {("", "events", "create")}
)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _missing(what: str, how: str) -> None:
    if in_ci():
        pytest.fail(f"{what} is required in CI: {how}", pytrace=False)
    pytest.skip(f"{what} not available ({how})")


def helm_version() -> str:
    """The helm version pinned in tools/helm/go.mod."""
    text = (HELM_MODULE / "go.mod").read_text()
    match = re.search(r"^\s*helm\.sh/helm/v3\s+(v\S+)", text, re.MULTILINE)
    assert match, "tools/helm/go.mod does not require helm.sh/helm/v3"
    return match.group(1)


def helm_binary() -> Path:
    """`$ORDO_HELM`, else the binary scripts/build-helm builds; fail in CI, skip elsewhere."""
    override = os.environ.get(HELM_ENV)
    path = (
        Path(override) if override else ROOT / ".cache" / "helm" / helm_version() / "bin" / "helm"
    )
    if not (path.is_file() and os.access(path, os.X_OK)):
        _missing(f"helm ({path})", "run scripts/build-helm")
    return path


def kubectl_binary() -> Path:
    """The pinned kubectl of the test control plane (its kustomize renders manifests/)."""
    from ordo_devcluster import BinariesNotFoundError, find_binaries

    try:
        return find_binaries() / "kubectl"
    except BinariesNotFoundError as exc:
        _missing("kubectl", f"run scripts/build-controlplane: {exc}")
        raise AssertionError("unreachable") from None


def _helm_env(tmp: Path) -> dict[str, str]:
    # helm writes its config, cache and data directories; keep them out of $HOME.
    env = dict(os.environ)
    env.update(
        HELM_CONFIG_HOME=str(tmp / "config"),
        HELM_CACHE_HOME=str(tmp / "cache"),
        HELM_DATA_HOME=str(tmp / "data"),
    )
    return env


def helm(tmp: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(helm_binary()), *args],
        capture_output=True,
        text=True,
        env=_helm_env(tmp),
        timeout=120,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"helm {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def helm_template(
    tmp: Path,
    *,
    release: str = "ordo",
    namespace: str = "ordo-system",
    values: Mapping[str, Any] | None = None,
    include_crds: bool = False,
) -> list[dict[str, Any]]:
    """`helm template` of charts/ordo with `values` (written to a file, so lists stay lists)."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    if values:
        values_file = tmp / f"values-{release}-{len(list(tmp.glob('values-*')))}.yaml"
        values_file.write_text(yaml.safe_dump(dict(values)))
        args += ["--values", str(values_file)]
    if include_crds:
        args.append("--include-crds")
    return documents(helm(tmp, *args).stdout)


def kustomize_build(path: Path = KUSTOMIZE_BASE) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(kubectl_binary()), "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {path} failed:\n{result.stderr}")
    return documents(result.stdout)


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def to_yaml(docs: Iterable[Mapping[str, Any]]) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


def of_kind(docs: Iterable[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") in kinds]


def one(docs: Iterable[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def expand_rules(rules: Iterable[Mapping[str, Any]]) -> set[Rule]:
    """Flatten PolicyRules into (group, resource, verb) triples. A rule narrowed by
    resourceNames is kept apart (as `resource[name,...]`) so it never counts as a grant on
    every object; a wildcard is kept as `*` and fails every comparison loudly."""
    out: set[Rule] = set()
    for rule in rules:
        assert "nonResourceURLs" not in rule, f"unexpected non-resource rule {rule}"
        names = rule.get("resourceNames") or []
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                key = f"{resource}[{','.join(sorted(names))}]" if names else resource
                for verb in rule.get("verbs") or []:
                    out.add((group, key, verb))
    return out


def container(deployment: Mapping[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, containers
    return dict(containers[0])


def operator_args(deployment: Mapping[str, Any]) -> list[str]:
    """The Deployment's `ordo operator` flags, without the ports and resync interval that a
    test runner chooses itself, and the checkpoint key file: the path is inside the pod, so
    OperatorProcess passes a keyring file of its own (tests/support/operator.py)."""
    skip = ("--metrics-port", "--health-port", "--resync-seconds", "--checkpoint-key-file")
    return [a for a in container(deployment).get("args", []) if not a.startswith(skip)]


def container_env(deployment: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment as a kubelet would give it: plain values, and the pod's
    namespace for a `metadata.namespace` fieldRef (POD_NAMESPACE)."""
    env: dict[str, str] = {}
    namespace = (deployment.get("metadata") or {}).get("namespace", "default")
    for item in container(deployment).get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == (
            "metadata.namespace"
        ):
            env[item["name"]] = namespace
    return env
