"""Packaging checks that need neither a cluster nor helm: the Dockerfile's entrypoint, the
CRD copies in the chart and the kustomize base, the chart's values schema, the kustomize RBAC
against what the operator does, and the metric names in the dashboard, the alerts and the
docs. tests/cluster/test_packaging.py renders the chart and applies it to the control plane."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from tests.support.packaging import (
    CHART,
    KUSTOMIZE_BASE,
    LEASE_RULES,
    MANIFESTS,
    OPERATOR_RULES,
    ROOT,
    RUNNER_RULES,
    documents,
    expand_rules,
    one,
)

from ordo.api import crdgen
from ordo.cli.main import build_parser
from ordo.gateway.metrics import GatewayMetrics
from ordo.operator.telemetry.metrics import Metrics

DOCKERFILE = ROOT / "Dockerfile"
VENV_BIN = Path(sys.executable).parent


# -- Dockerfile ----------------------------------------------------------------------------


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continuations joined."""
    logical: list[str] = []
    current = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "Dockerfile ends inside a line continuation"
    out = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def _stages(path: Path) -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, rest in _instructions(path):
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, rest))
    return stages


def _env(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in stage:
        if keyword == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    instructions = _instructions(DOCKERFILE)
    args = {k: v for k, v in (rest.partition("=")[::2] for kw, rest in instructions if kw == "ARG")}
    stages = _stages(DOCKERFILE)
    assert len(stages) >= 2, "expected a build stage and a runtime stage"
    final = stages[-1]
    base = final[0][1].split()[0]
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
    assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", base), base
    # The runtime stage copies the built virtualenv and nothing else from the context.
    copies = [rest for kw, rest in final if kw == "COPY"]
    assert copies and all(c.startswith("--from=") for c in copies), copies
    users = [rest for kw, rest in final if kw == "USER"]
    assert users, "the runtime stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "USER must be a numeric non-root uid (runAsNonRoot)"
    assert gid.isdigit() and int(gid) != 0
    # The chart's podSecurityContext runs as the same uid.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(uid)


def test_dockerfile_runtime_writes_nothing_outside_tmp() -> None:
    env = _env(_stages(DOCKERFILE)[-1])
    assert env["HOME"] == "/tmp"
    assert env["TMPDIR"] == "/tmp"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert "/opt/ordo/bin" in env["PATH"].split(":")


def _entrypoint() -> list[str]:
    final = _stages(DOCKERFILE)[-1]
    entrypoints = [rest for kw, rest in final if kw == "ENTRYPOINT"]
    assert entrypoints, "the runtime stage needs an ENTRYPOINT"
    command = json.loads(entrypoints[-1])  # exec form only: signals reach the operator
    assert isinstance(command, list) and all(isinstance(c, str) for c in command)
    cmds = [rest for kw, rest in final if kw == "CMD"]
    if cmds:
        command += json.loads(cmds[-1])
    return list(command)


def test_dockerfile_entrypoint_is_ordo_operator_and_runs() -> None:
    command = _entrypoint()
    assert command[0] == "/opt/ordo/bin/ordo"
    assert command[1:] == ["operator"]
    # The same command from this checkout's virtualenv (the image installs the same package).
    local = [str(VENV_BIN / Path(command[0]).name), *command[1:], "--help"]
    result = subprocess.run(local, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ordo operator"), result.stdout[:200]
    for flag in ("--all-namespaces", "--namespace", "--max-concurrent-tasks", "--health-port"):
        assert flag in result.stdout


def test_dockerfile_copies_only_what_the_build_context_allows() -> None:
    ignore = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*", "the build context should be an allowlist"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    sources: list[str] = []
    for kw, rest in _stages(DOCKERFILE)[0]:
        if kw == "COPY" and not rest.startswith("--from="):
            sources += rest.split()[:-1]
    assert sources
    for source in sources:
        assert source in allowed, f"COPY {source} is excluded by .dockerignore"
        assert (ROOT / source).exists(), source


# -- CRD copies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "directory", [ROOT / "crds", CHART / "crds", KUSTOMIZE_BASE / "crds"], ids=lambda p: str(p)
)
def test_crd_copies_are_the_generated_crds(directory: Path) -> None:
    rendered = crdgen.render_all()
    present = {p.name: p.read_text() for p in directory.glob("*.yaml")}
    assert sorted(present) == sorted(rendered), "run `ordo crds --output-dir DIR`"
    for name, text in rendered.items():
        assert present[name] == text, f"{directory / name} differs from `ordo crds`"


def test_kustomize_base_lists_every_crd() -> None:
    kustomization = yaml.safe_load((KUSTOMIZE_BASE / "kustomization.yaml").read_text())
    crds = sorted(r for r in kustomization["resources"] if r.startswith("crds/"))
    assert crds == sorted(f"crds/{name}" for name in crdgen.render_all())


# -- chart values schema -------------------------------------------------------------------


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return schema


def test_values_yaml_satisfies_its_schema() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(values, _schema())
    # Every top-level value is described by the schema (and nothing unknown is accepted).
    assert set(values) <= set(_schema()["properties"])


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("operator", "maxConcurrentTasks"), 0),
        (("watchNamespaces",), ["Not_A_Namespace"]),
        (("watchNamespaces",), ["team-a", "team-a"]),
        (("image", "pullPolicy"), "Sometimes"),
        (("operator", "logFormat"), "xml"),
        (("terminationGracePeriodSeconds",), 5),
        (("prometheusRule", "taskFailureRatio"), 2),
        (("prometheusRule", "pendingFor"), "soon"),
        (("imagePullSecrets",), ["regcred"]),
        (("serviceMonitor", "enabeld"), True),
        (("replicas",), 2),
        (("image", "tag"), 1.1),
        (("operator", "resyncSeconds"), 0),
        (("operator", "extraArgs"), ["--log-level=DEBUG"]),
        (("resources",), {"requests": {"cpu": "lots"}}),
        (("resources",), {"requests": {"gpu": 1}}),
        (("jobs", "resources"), {"limits": {"ephemeral-storage": "1Gi"}}),
        (("admissionPolicies", "enabled"), "yes"),
        (("admissionPolicies", "reservedLabels", "prefix"), "policy.ordo.dev"),
        (("admissionPolicies", "reservedLabels", "prefix"), "x/' || true || '/"),
        (("admissionPolicies", "reservedLabels", "resources"), []),
        (("admissionPolicies", "reservedLabels", "resources"), ["secrets"]),
    ],
)
def test_values_schema_rejects(path: tuple[str, ...], value: object) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    target = values
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values, _schema())


# -- kustomize base: RBAC and the operator's flags -----------------------------------------


def _base_docs() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((KUSTOMIZE_BASE / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        docs += documents((KUSTOMIZE_BASE / resource).read_text())
    return docs


def test_kustomize_base_grants_exactly_the_operator_rules() -> None:
    docs = _base_docs()
    role = one(docs, "ClusterRole")
    assert expand_rules(role["rules"]) == set(OPERATOR_RULES)
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    account = one(docs, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "ordo-system"}
    ]
    # The one Role: the process Leases, in the operator's own namespace, for the same account.
    leases, lease_binding = one(docs, "Role"), one(docs, "RoleBinding")
    assert expand_rules(leases["rules"]) == set(LEASE_RULES)
    assert lease_binding["roleRef"]["name"] == leases["metadata"]["name"]
    assert lease_binding["subjects"] == binding["subjects"]


def test_kustomize_runner_grants_exactly_the_runner_rules() -> None:
    docs = documents((MANIFESTS / "runner" / "runner.yaml").read_text())
    role = one(docs, "Role")
    assert expand_rules(role["rules"]) == set(RUNNER_RULES)
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    binding = one(docs, "RoleBinding")
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]


def test_kustomize_deployment_flags_parse_as_ordo_operator() -> None:
    deployment = one(_base_docs(), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(["operator", *container["args"]])
    assert args.all_namespaces and not args.namespace
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert (args.metrics_port, args.health_port) == (ports["metrics"], ports["health"])
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


def test_user_roles_component_never_touches_secrets_or_configmaps() -> None:
    roles = documents((MANIFESTS / "components" / "user-roles" / "user-roles.yaml").read_text())
    assert len(roles) == 5
    for role in roles:
        for group, resource, verb in expand_rules(role["rules"]):
            if role["metadata"]["name"] == "ordo-approver" and group == "":
                # `ordo approvals TASK` reads the published pending calls: get only, never Secrets
                assert (resource, verb) == ("configmaps", "get")
                continue
            assert group == "ordo.dev", role["metadata"]["name"]


# -- metric names ----------------------------------------------------------------------------


def _populated() -> Metrics:
    """ordo's metrics with one sample in each family."""
    metrics = Metrics()
    metrics.tasks.labels("ns", "a", "Succeeded", "Succeeded").inc()
    metrics.task_duration.labels("ns", "a").observe(1)
    metrics.task_steps.labels("ns", "a").observe(1)
    metrics.model_requests.labels("p", "m", "success").inc()
    metrics.model_duration.labels("p", "m").observe(1)
    metrics.tokens.labels("ns", "a", "m", "input").inc()
    metrics.tool_calls.labels("t", "allowed", "succeeded").inc()
    metrics.kube_requests.labels("get").inc()
    metrics.tasks_deleted.labels("ns").inc()
    metrics.trigger_tasks.labels("TaskSchedule", "created").inc()
    metrics.guardrail_decisions.labels("g", "input", "denied").inc()
    metrics.tool_rule_decisions.labels("ns", "p", "r", "Deny", "Enforce", "matched").inc()
    metrics.credential_violations.labels("host").inc()
    metrics.claims.labels("claimed").inc()
    metrics.delegations.labels("ns", "created").inc()
    metrics.cache_synced.labels("Agent").set(1)
    metrics.cache_watch_restarts.labels("Agent", "expired").inc()
    return metrics


def _gateway_populated() -> GatewayMetrics:
    """`ordo gateway`'s registry (served on its own --metrics-port), one sample each."""
    m = GatewayMetrics(CollectorRegistry())
    m.requests.labels(method="SendMessage", code="200").inc()
    m.tasks_created.labels(namespace="ns", agent="a").inc()
    return m


def _exposed_names() -> set[str]:
    """Every sample name ordo's registries (operator and gateway) expose (histogram/counter
    suffixes included)."""
    text = generate_latest(_populated().registry).decode()
    text += generate_latest(_gateway_populated().registry).decode()
    return {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def _ordo_names(text: str) -> set[str]:
    return set(re.findall(r"\bordo_[a-z_]+[a-z]\b", text))


FAMILIES = {
    "ordo_tasks_total",
    "ordo_task_duration_seconds",
    "ordo_task_steps",
    "ordo_model_requests_total",
    "ordo_model_request_duration_seconds",
    "ordo_tokens_total",
    "ordo_tool_calls_total",
    "ordo_tasks_running",
    "ordo_tasks_pending",
    "ordo_kube_api_requests_total",
}


def test_dashboard_and_alerts_use_only_exposed_metrics() -> None:
    exposed = _exposed_names()
    assert all(f in exposed or f + "_count" in exposed for f in FAMILIES)
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = set().union(*(_ordo_names(e) for e in exprs))
    assert used and used <= exposed, used - exposed
    # Every metric family appears on the dashboard.
    assert {n.removesuffix("_bucket") for n in used} >= FAMILIES, FAMILIES - used
    rules = (CHART / "templates" / "prometheusrule.yaml").read_text()
    alert_names = _ordo_names(rules)
    assert alert_names and alert_names <= exposed, alert_names - exposed


def test_operations_doc_documents_every_metric_and_no_other() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    documented = _ordo_names(text)
    exposed = _exposed_names()
    assert documented >= FAMILIES, FAMILIES - documented
    assert documented <= exposed | FAMILIES, documented - exposed


def test_metric_label_names_match_the_operations_doc() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    checked = 0
    families = [*_populated().registry.collect(), *_gateway_populated().registry.collect()]
    for family in families:
        name = family.name + ("_total" if family.type == "counter" else "")
        labels: list[str] = []
        for sample in family.samples:
            labels += [k for k in sample.labels if k != "le" and k not in labels]
        if not labels:
            continue
        documented = re.search(rf"`{name}\{{([a-z_, ]+)\}}`", text)
        assert documented, f"docs/operations.md should show `{name}{{{', '.join(labels)}}}`"
        assert [x.strip() for x in documented.group(1).split(",")] == labels, name
        checked += 1
    assert checked == 21


# -- user docs: relative links and anchors resolve -------------------------------------------

USER_DOCS = ("concepts", "quickstart", "governance", "operations", "security", "comparison")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    anchors = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("name", USER_DOCS)
def test_user_doc_links_resolve(name: str) -> None:
    doc = ROOT / "docs" / f"{name}.md"
    links = re.findall(r"\]\(([^)\s]+)\)", doc.read_text())
    relative = [link for link in links if not link.startswith(("http://", "https://"))]
    assert relative, f"{doc} links to no other page"
    for link in relative:
        target, _, anchor = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        assert path.exists(), f"{doc.name}: {link} does not exist"
        if anchor:
            assert anchor in _anchors(path), f"{doc.name}: no heading for #{anchor} in {path.name}"
