"""Operator shards in the chart (`shards:`, docs/scaling.md): one Deployment and one
ServiceAccount per shard, each operator watching only its own namespaces, with a Role and
RoleBinding per namespace that bind only that shard's account. Safe by construction: a
namespace in two shards (two operators racing for its Tasks) is refused at render time, by
name, whether or not the chart creates RBAC.

The schema cases need only jsonschema; the rendering cases run helm (scripts/build-helm) and,
like tests/unit/test_helm_values.py, carry the `services` marker.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from tests.support.packaging import (
    CHART,
    OPERATOR_RULES,
    RUNNER_RULES,
    container,
    expand_rules,
    helm,
    helm_template,
    of_kind,
    operator_args,
)

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())

TWO_SHARDS: dict[str, Any] = {
    "shards": [
        {"name": "a", "namespaces": ["team-a", "team-b"]},
        {
            "name": "b",
            "namespaces": ["team-c"],
            "maxConcurrentTasks": 50,
            "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}},
        },
    ]
}
OWNER = {"team-a": "a", "team-b": "a", "team-c": "b"}

helm_needed = pytest.mark.services


def _accepts(shards: object) -> bool:
    values = copy.deepcopy(DEFAULTS)
    values["shards"] = shards
    try:
        jsonschema.validate(values, SCHEMA, cls=jsonschema.Draft7Validator)
    except jsonschema.ValidationError:
        return False
    return True


def _by_name(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in of_kind(docs, kind)}


def _operator_docs(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The operator's own objects of `kind` in the watched namespaces (not the Job-mode
    runner's, nor the process Leases' Role in the release namespace)."""
    return [
        d
        for d in of_kind(docs, kind)
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"
        and not d["metadata"]["name"].endswith("-leases")
    ]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# -- the schema ------------------------------------------------------------------------------


def test_schema_accepts_shards_and_refuses_malformed_ones() -> None:
    assert _accepts([])
    assert _accepts(TWO_SHARDS["shards"])
    for bad in (
        [{"name": "a"}],  # no namespaces
        [{"name": "a", "namespaces": []}],  # a shard that watches nothing
        [{"name": "A_1", "namespaces": ["x"]}],  # not a DNS label
        [{"name": "a" * 21, "namespaces": ["x"]}],  # leaves no room in the Deployment name
        [{"name": "a", "namespaces": ["Team_A"]}],
        [{"name": "a", "namespaces": ["x", "x"]}],  # twice in one shard
        [{"name": "a", "namespaces": ["x"], "maxConcurrentTasks": 0}],
        [{"name": "a", "namespaces": ["x"], "replicas": 2}],  # unknown key
        [{"name": "a", "namespaces": ["x"], "resources": {"requests": {"gpu": 1}}}],
    ):
        assert not _accepts(bad), bad


# -- rendering -------------------------------------------------------------------------------


@helm_needed
def test_each_shard_is_an_operator_watching_only_its_namespaces(tmp_path: Path) -> None:
    docs = helm_template(tmp_path, values=TWO_SHARDS)
    deployments = _by_name(docs, "Deployment")
    assert set(deployments) == {"ordo-a", "ordo-b"}
    accounts = {d["metadata"]["name"] for d in _operator_docs(docs, "ServiceAccount")}
    assert accounts == {"ordo-a", "ordo-b"}
    for shard, deployment in (("a", deployments["ordo-a"]), ("b", deployments["ordo-b"])):
        args = operator_args(deployment)
        watched = sorted(a.removeprefix("--namespace=") for a in args if a.startswith("--n"))
        assert watched == sorted(ns for ns, owner in OWNER.items() if owner == shard)
        assert "--all-namespaces" not in args
        pod = deployment["spec"]["template"]
        assert pod["spec"]["serviceAccountName"] == f"ordo-{shard}"
        assert pod["metadata"]["labels"]["ordo.dev/shard"] == shard
    # Each Deployment's selector picks its own pods and never the other shard's.
    for name, deployment in deployments.items():
        selector = deployment["spec"]["selector"]["matchLabels"]
        for other_name, other in deployments.items():
            labels = other["spec"]["template"]["metadata"]["labels"]
            assert _matches(selector, labels) == (name == other_name), (name, other_name)
    # Per-shard settings win over the chart-wide ones.
    a, b = container(deployments["ordo-a"]), container(deployments["ordo-b"])
    assert "--max-concurrent-tasks=10" in a["args"] and "--max-concurrent-tasks=50" in b["args"]
    assert a["resources"] == DEFAULTS["resources"]
    assert b["resources"] == {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}


@helm_needed
def test_shard_rbac_reaches_only_its_own_namespaces(tmp_path: Path) -> None:
    docs = helm_template(tmp_path, values=TWO_SHARDS)
    assert not of_kind(docs, "ClusterRole", "ClusterRoleBinding")
    roles = _operator_docs(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(OWNER)
    for role in roles:
        assert expand_rules(role["rules"]) == OPERATOR_RULES, role["metadata"]
    bindings = _operator_docs(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(OWNER)
    for binding in bindings:
        ns = binding["metadata"]["namespace"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": f"ordo-{OWNER[ns]}", "namespace": "ordo-system"}
        ]
    # Job mode: the runner account in every namespace of every shard.
    runner_roles = [r for r in of_kind(docs, "Role") if r["metadata"]["name"] == "ordo-runner"]
    assert sorted(r["metadata"]["namespace"] for r in runner_roles) == sorted(OWNER)
    assert all(expand_rules(r["rules"]) == RUNNER_RULES for r in runner_roles)
    # The process Leases: one Role in the release namespace, bound to every shard's account.
    (leases,) = [b for b in of_kind(docs, "RoleBinding") if b["metadata"]["name"] == "ordo-leases"]
    assert leases["metadata"]["namespace"] == "ordo-system"
    assert sorted(s["name"] for s in leases["subjects"]) == sorted(
        f"ordo-{shard}" for shard in set(OWNER.values())
    )


@helm_needed
def test_sharded_peering_is_namespaced(tmp_path: Path) -> None:
    docs = helm_template(tmp_path, values={**TWO_SHARDS, "peering": {"enabled": True}})
    assert not of_kind(docs, "ClusterKopfPeering", "ClusterRole")
    peerings = of_kind(docs, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == sorted(OWNER)
    for role in _operator_docs(docs, "Role"):
        kinds = {r[1] for r in expand_rules(role["rules"]) if r[0] == "kopf.dev"}
        assert kinds == {"kopfpeerings", "kopfpeerings[ordo]"}


@helm_needed
def test_unsharded_renders_one_unlabelled_operator(tmp_path: Path) -> None:
    # No shards: exactly what the chart rendered before (no shard label, so the Deployment's
    # immutable selector is unchanged on upgrade).
    for values in ({}, {"watchNamespaces": ["team-a"]}):
        docs = helm_template(tmp_path, values=values)
        (deployment,) = of_kind(docs, "Deployment")
        assert deployment["metadata"]["name"] == "ordo"
        assert "ordo.dev/shard" not in deployment["spec"]["selector"]["matchLabels"]
        assert [d["metadata"]["name"] for d in _operator_docs(docs, "ServiceAccount")] == ["ordo"]


@helm_needed
@pytest.mark.parametrize("rbac", [True, False])
@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {
                "shards": [
                    {"name": "a", "namespaces": ["team-a", "team-b"]},
                    {"name": "b", "namespaces": ["team-c", "team-b"]},
                ]
            },
            'namespace "team-b" is in shard "a" and in shard "b"',
        ),
        (
            {"shards": [{"name": "a", "namespaces": ["x"]}, {"name": "a", "namespaces": ["y"]}]},
            'the name "a" is used twice',
        ),
        (
            {"watchNamespaces": ["x"], "shards": [{"name": "a", "namespaces": ["y"]}]},
            "either watchNamespaces",
        ),
        (
            {"fullnameOverride": "o" * 60, "shards": [{"name": "shard", "namespaces": ["y"]}]},
            "longer than 63 characters",
        ),
    ],
    ids=["namespace-in-two-shards", "duplicate-name", "with-watchNamespaces", "name-too-long"],
)
def test_unsafe_shards_are_refused_by_name(
    tmp_path: Path, values: dict[str, Any], message: str, rbac: bool
) -> None:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(json.dumps({**values, "rbac": {"create": rbac}}))
    result = helm(
        tmp_path, "template", "ordo", str(CHART), "--values", str(values_file), check=False
    )
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


@helm_needed
def test_helm_lint_is_clean_with_shards(tmp_path: Path) -> None:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(json.dumps({**TWO_SHARDS, "peering": {"enabled": True}}))
    result = helm(tmp_path, "lint", "--strict", str(CHART), "--values", str(values_file))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout
