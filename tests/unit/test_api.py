"""The ordo.dev/v1alpha1 API: generated CRDs, examples, invalid manifests, helpers, CEL mirrors.

The invalid manifests in tests/data/invalid are the shared contract with the cluster tests:
each one must be rejected here by `ordo validate` with an error on the field path its
`# expect:` header names, and by kube-apiserver when applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from ordo.api import (
    KINDS,
    Resource,
    crdgen,
    manifests,
    model_tool_name,
    parse_duration,
    reserved_tool_name,
)
from ordo.api.agent import Agent
from ordo.api.memory import Memory
from ordo.api.modelendpoint import ModelEndpoint
from ordo.api.policy import LabelSelector
from ordo.api.tool import Tool
from ordo.cli import main as cli

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
EXAMPLES = REPO / "examples"
INVALID = REPO / "tests" / "data" / "invalid"

EXAMPLE_DIRS = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())
INVALID_FILES = sorted(INVALID.glob("*.yaml"))
EXPECTED_EXAMPLES = {
    "quickstart",
    "research-agent",
    "governance",
    "delegation",
    "structured-output",
    "openai",
    "anthropic",
    "ollama",
}


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def _example_documents() -> list[manifests.Document]:
    docs, problems = manifests.read_documents([str(EXAMPLES)])
    assert not problems
    return docs


# --- (a) the generated CRDs are current ----------------------------------------------------


def test_crds_are_current() -> None:
    rendered = crdgen.render_all()
    on_disk = {p.name: p.read_text() for p in CRDS.glob("*.yaml")}
    assert len(rendered) == 13
    assert sorted(on_disk) == sorted(rendered), "run `ordo crds`"
    for name, text in rendered.items():
        assert on_disk[name] == text, f"crds/{name} is stale: run `ordo crds`"


def test_crds_check_command_agrees(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["crds", "--check", "--output-dir", str(CRDS)]) == 0


def test_crds_check_command_detects_drift(tmp_path: Path) -> None:
    crdgen.write_all(tmp_path)
    stale = tmp_path / "agents.ordo.dev.yaml"
    stale.write_text(stale.read_text().replace("maxSteps", "maxStep"))
    assert cli.main(["crds", "--check", "--output-dir", str(tmp_path)]) == 1


def test_one_crd_per_kind_with_names_and_category() -> None:
    for info in KINDS.values():
        crd = yaml.safe_load((CRDS / f"{info.plural}.ordo.dev.yaml").read_text())
        names = crd["spec"]["names"]
        assert names["kind"] == info.kind
        assert names["categories"] == ["ordo"]
        assert names["shortNames"], info.kind
        version = crd["spec"]["versions"][0]
        assert version["subresources"] == {"status": {}}
        assert version["additionalPrinterColumns"][-1]["name"] == "Age"


# --- (g) every CRD schema is structural ------------------------------------------------------

FORBIDDEN_KEYS = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "const", "title"}


def _schema_nodes(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _schema_nodes(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _schema_nodes(node["additionalProperties"], f"{path}{{}}")


def _crd_schemas() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out.append((path.name, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]))
    return out


@pytest.mark.parametrize(
    ("name", "schema"), _crd_schemas(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_crd_schema_is_structural(name: str, schema: dict[str, Any]) -> None:
    problems = []
    for path, node in _schema_nodes(schema, "$"):
        if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{path}: no type")
        if bad := FORBIDDEN_KEYS & node.keys():
            problems.append(f"{path}: forbidden keys {sorted(bad)}")
        if node.get("additionalProperties") is False:
            problems.append(f"{path}: additionalProperties: false")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{path}: properties and additionalProperties together")
        if "default" in node and ".status" in path:
            problems.append(f"{path}: default in status")
        for req in node.get("required", []):
            if req not in node.get("properties", {}):
                problems.append(f"{path}: required {req!r} is not a property")
        list_type = node.get("x-kubernetes-list-type")
        if list_type == "set" and node["items"].get("type") not in (
            "string",
            "integer",
            "number",
            "boolean",
        ):
            problems.append(f"{path}: list-type set of non-scalars")
        if list_type == "map":
            for key in node.get("x-kubernetes-list-map-keys", []):
                if key not in node["items"].get("required", []):
                    problems.append(f"{path}: map key {key!r} is not required")
    meta = schema["properties"]["metadata"]
    if set(meta.get("properties", {})) - {"name", "generateName"}:
        problems.append("$.metadata: only name and generateName may be declared")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("name", "schema"), _crd_schemas(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_crd_defaults_satisfy_their_schema(name: str, schema: dict[str, Any]) -> None:
    checked = 0
    for _path, node in _schema_nodes(schema, "$"):
        if "default" in node:
            plain = {k: v for k, v in node.items() if not k.startswith("x-kubernetes-")}
            jsonschema.Draft4Validator(plain).validate(node["default"])
            checked += 1
    if name in ("agents.ordo.dev.yaml", "tools.ordo.dev.yaml", "modelendpoints.ordo.dev.yaml"):
        assert checked > 0


def test_cel_rule_field_paths_exist_in_schema() -> None:
    for name, schema in _crd_schemas():
        for rule in schema.get("x-kubernetes-validations", []):
            if "fieldPath" in rule:
                node = schema
                for part in rule["fieldPath"].lstrip(".").split("."):
                    node = node["properties"][part]  # KeyError: the API server refuses the CRD
                assert node["type"] == "string", name


# --- (b) every example validates ---------------------------------------------------------------


def test_example_folders() -> None:
    assert {p.name for p in EXAMPLE_DIRS} >= EXPECTED_EXAMPLES
    for folder in EXAMPLE_DIRS:
        assert (folder / "README.md").is_file(), f"{folder.name} has no README.md"


@pytest.mark.parametrize("folder", EXAMPLE_DIRS, ids=_ids(EXAMPLE_DIRS))
def test_example_validates(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mset = manifests.load([str(folder)])
    assert [str(p) for p in mset.problems] == []
    assert mset.objects
    kinds = {obj.kind for _, obj in mset.objects}
    # every example runs something (a webhook's Tasks come from its deliveries)
    assert kinds & {"Task", "TaskWebhook"}, "every example runs something"
    assert cli.main(["validate", "-f", str(folder)]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().err


def test_all_examples_together_validate() -> None:
    mset = manifests.load([str(EXAMPLES)])
    assert [str(p) for p in mset.problems] == []


def test_research_agent_uses_every_configuration_kind() -> None:
    mset = manifests.load([str(EXAMPLES / "research-agent")])
    kinds = {obj.kind for _, obj in mset.objects}
    # A ToolApproval decides a call of a running Task: nothing an example can name ahead.
    # Teams and triggers have their own examples (examples/team, webhook, schedule).
    assert kinds == set(KINDS) - {"ToolApproval", "Team", "TaskWebhook", "TaskSchedule"}
    (agent,) = [o for _, o in mset.objects if isinstance(o, Agent)]
    assert agent.spec.memory is not None and agent.spec.memory.ref and agent.spec.memory.allow


def test_example_documents_are_named_and_namespace_free() -> None:
    for doc in _example_documents():
        meta = doc.body.get("metadata", {})
        assert meta.get("name"), doc.where
        assert "namespace" not in meta, f"{doc.where}: examples carry no namespace"


def test_example_names_never_collide() -> None:
    """All examples can be applied to one namespace: a (kind, name) defined in two folders
    must be the same object, or one example would overwrite the other's."""
    seen: dict[tuple[str, str], Any] = {}
    for doc in _example_documents():
        key = (doc.kind, doc.name)
        if key in seen:
            assert seen[key] == doc.body, f"{doc.where} collides with another example"
        seen[key] = doc.body


def test_secret_templates_hold_placeholders_only() -> None:
    secrets = [d for d in _example_documents() if manifests.is_secret(d.body)]
    assert {Path(d.source).parent.name for d in secrets} == {"openai", "anthropic", "webhook"}
    for doc in secrets:
        assert Path(doc.source).name == "secret.example.yaml"
        assert "data" not in doc.body, "templates use stringData"
        for value in doc.body["stringData"].values():
            assert "REPLACE" in value
        meta = doc.body["metadata"]  # opted in, for the provider's host only
        assert meta["labels"] == {"ordo.dev/credential": "true"}
        hosts = {"openai": "api.openai.com:443", "anthropic": "api.anthropic.com:443"}
        host = hosts.get(Path(doc.source).parent.name, "")  # a webhook's: sent nowhere
        assert meta["annotations"] == {"ordo.dev/allowed-hosts": host}


def _readme_yaml_blocks() -> list[tuple[str, str]]:
    blocks = []
    for readme in sorted(EXAMPLES.glob("*/README.md")):
        for block in re.findall(r"```yaml\n(.*?)```", readme.read_text(), re.DOTALL):
            if "apiVersion: ordo.dev/" in block:
                blocks.append((readme.parent.name, block))
    return blocks


def test_readme_manifests_validate(tmp_path: Path) -> None:
    blocks = _readme_yaml_blocks()
    assert blocks, "research-agent/README.md shows an http tool"
    for i, (folder, block) in enumerate(blocks):
        path = tmp_path / f"{folder}-{i}.yaml"
        path.write_text(block)
        mset = manifests.load([str(path)])
        assert mset.errors == [], f"{folder}/README.md block {i}: {mset.errors}"


# --- (c) round trip --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [d for d in _example_documents() if not manifests.is_secret(d.body)],
    ids=lambda d: f"{Path(d.source).parent.name}/{d.kind}/{d.name}",
)
def test_example_round_trip(doc: manifests.Document) -> None:
    obj, problems = manifests.parse_document(doc)
    assert problems == []
    assert obj is not None
    assert obj.to_dict() == doc.body


# --- (d) invalid manifests are rejected on the named field -----------------------------------


def _expectations(path: Path) -> tuple[str, str | None]:
    lines = path.read_text().splitlines()
    match = re.fullmatch(r"# expect: (\S+)", lines[0])
    assert match, f"{path.name}: first line must be '# expect: <field path>'"
    message = None
    if len(lines) > 1 and (m := re.fullmatch(r"# expect-message: (.+)", lines[1])):
        message = m.group(1)
    return match.group(1), message


def test_enough_invalid_manifests() -> None:
    assert len(INVALID_FILES) >= 35
    kinds = set()
    for path in INVALID_FILES:
        (body,) = list(yaml.safe_load_all(path.read_text()))
        assert body["apiVersion"] == "ordo.dev/v1alpha1", path.name
        assert body["kind"] in KINDS, path.name
        kinds.add(body["kind"])
    assert kinds == set(KINDS), "every kind has invalid examples"


def _matches(field: str, expected: str) -> bool:
    return field == expected or field.startswith((expected + ".", expected + "["))


@pytest.mark.parametrize("path", INVALID_FILES, ids=_ids(INVALID_FILES))
def test_invalid_manifest_is_rejected(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected_field, expected_message = _expectations(path)
    mset = manifests.load([str(path)])
    assert mset.objects == []
    assert mset.errors, f"{path.name} was accepted"
    hits = [e for e in mset.errors if _matches(e.field, expected_field)]
    assert hits, f"no error on {expected_field}: {[str(e) for e in mset.errors]}"
    if expected_message:
        assert any(expected_message in e.message for e in hits), [e.message for e in hits]
    assert cli.main(["validate", "-f", str(path)]) == 1
    assert expected_field in capsys.readouterr().err


def test_invalid_manifest_names_say_what_is_wrong() -> None:
    for path in INVALID_FILES:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+\.yaml", path.name), path.name


# --- messages and loading ---------------------------------------------------------------------


def _load_text(tmp_path: Path, text: str) -> manifests.ManifestSet:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return manifests.load([str(path)])


def test_problem_names_file_document_kind_and_name(tmp_path: Path) -> None:
    mset = _load_text(
        tmp_path,
        "apiVersion: ordo.dev/v1alpha1\nkind: Agent\nmetadata: {name: a}\nspec: {modelRef: m}\n"
        "---\napiVersion: ordo.dev/v1alpha1\nkind: Agent\nmetadata: {name: b}\nspec: {}\n",
    )
    (err,) = mset.errors
    assert err.text.endswith("[1] Agent/b: spec.modelRef: required field is missing")


def test_yaml_syntax_error_is_a_problem(tmp_path: Path) -> None:
    mset = _load_text(tmp_path, "kind: Agent\nspec: [unclosed\n")
    (err,) = mset.errors
    assert "invalid YAML" in err.message


def test_unknown_kind_and_wrong_api_version(tmp_path: Path) -> None:
    mset = _load_text(
        tmp_path,
        "apiVersion: ordo.dev/v1alpha1\nkind: Agnet\nmetadata: {name: a}\n---\n"
        "apiVersion: ordo.dev/v1\nkind: Agent\nmetadata: {name: a}\nspec: {modelRef: m}\n",
    )
    assert [e.field for e in mset.errors] == ["kind", "apiVersion"]


def test_foreign_objects_are_warnings_and_secrets_are_kept(tmp_path: Path) -> None:
    mset = _load_text(
        tmp_path,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n"
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s, labels: {ordo.dev/credential: 'true'},"
        " annotations: {ordo.dev/allowed-hosts: 127.0.0.1}}\nstringData: {k: v}\n",
    )
    assert mset.errors == []
    assert [w.message for w in mset.warnings] == ["not an ordo.dev object; skipped"]
    assert [d.name for d in mset.secrets] == ["s"]


def test_missing_reference_is_a_warning(tmp_path: Path) -> None:
    mset = _load_text(
        tmp_path,
        "apiVersion: ordo.dev/v1alpha1\nkind: Task\nmetadata: {name: t}\nspec: {agentRef: nobody}\n",
    )
    assert mset.errors == []
    (warning,) = mset.warnings
    assert warning.field == "spec.agentRef"


def test_validate_missing_path_exits_2(tmp_path: Path) -> None:
    assert cli.main(["validate", "-f", str(tmp_path / "nope.yaml")]) == 2


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"modelRef": "m", "limits": {"maxSteps": "5"}}, "spec.limits.maxSteps"),
        ({"modelRef": "m", "limits": {"maxSteps": True}}, "spec.limits.maxSteps"),
        ({"modelRef": "m", "model_ref": "m"}, "spec.model_ref"),
        ({"modelRef": "m", "roles": ["a", "b", "a"]}, "spec.roles"),
        ({"modelRef": "m", "memory": {"ref": "x", "allow": ["read", "read"]}}, "spec.memory.allow"),
    ],
)
def test_validate_is_as_strict_as_the_api_server(spec: dict[str, Any], field: str) -> None:
    doc = manifests.Document(
        "t",
        0,
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Agent",
            "metadata": {"name": "a"},
            "spec": spec,
        },
    )
    obj, problems = manifests.parse_document(doc)
    assert obj is None
    assert field in [p.field for p in problems]


# --- (e) helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5s", 1.5),
        ("2h", 7200.0),
        ("1m30s500ms", 90.5),
        ("0s", 0.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "30", "30 s", "1d", "-1s", "PT30S", "s", "1.s", "5M", "1h 30m"]
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("name", "model_name"),
    [
        ("web-search", "web-search"),
        ("search.v2", "search_v2"),
        ("a", "a"),
        ("x" * 64, "x" * 64),
        ("a.b.c-1", "a_b_c-1"),
    ],
)
def test_model_tool_name(name: str, model_name: str) -> None:
    assert model_tool_name(name) == model_name


@pytest.mark.parametrize("name", ["", "x" * 65, "has space", "slash/name", "ümlaut"])
def test_model_tool_name_rejects(name: str) -> None:
    with pytest.raises(ValueError, match="cannot be a model function name"):
        model_tool_name(name)


@pytest.mark.parametrize(
    ("name", "reserved"),
    [
        ("memory.write", True),
        ("memory.ingest", True),
        ("memory.future-op", True),
        ("memory", False),
        ("memory-write", False),
        ("memorywrite", False),
        ("team.memory.write", False),
    ],
)
def test_reserved_tool_name(name: str, reserved: bool) -> None:
    """Every Tool name whose model-visible name starts `memory_` is reserved (object names
    have no `_`, so that is exactly the `memory.` prefix the CRD's rule refuses)."""
    assert reserved_tool_name(name) is reserved
    assert model_tool_name(name).startswith("memory_") is reserved


def test_every_valid_tool_object_name_up_to_64_maps() -> None:
    tool = Tool.model_validate(
        {"metadata": {"name": "a" + "-b.c" * 15 + "d"}, "spec": {"type": "mock"}}
    )
    assert len(tool.name) <= 64
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", model_tool_name(tool.name))


def _selector(**kwargs: Any) -> LabelSelector:
    return LabelSelector.model_validate(kwargs)


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {}, True),
        ({}, {"team": "x"}, True),
        ({"matchLabels": {"team": "research"}}, {"team": "research", "x": "y"}, True),
        ({"matchLabels": {"team": "research"}}, {"team": "ops"}, False),
        ({"matchLabels": {"team": "research"}}, {}, False),
        (
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
            {"tier": "b"},
            True,
        ),
        (
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]},
            {"tier": "c"},
            False,
        ),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}, {}, False),
        (
            {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]},
            {"tier": "c"},
            True,
        ),
        (
            {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]},
            {"tier": "a"},
            False,
        ),
        # As in Kubernetes: NotIn matches objects without the label.
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {"tier": ""}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {"tier": "a"}, False),
        # Every requirement must hold (AND), matchLabels included.
        (
            {
                "matchLabels": {"team": "research"},
                "matchExpressions": [{"key": "tier", "operator": "Exists"}],
            },
            {"team": "research"},
            False,
        ),
        (
            {
                "matchLabels": {"team": "research"},
                "matchExpressions": [
                    {"key": "tier", "operator": "Exists"},
                    {"key": "env", "operator": "NotIn", "values": ["prod"]},
                ],
            },
            {"team": "research", "tier": "intern", "env": "dev"},
            True,
        ),
    ],
)
def test_label_selector_matches(
    selector: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    assert _selector(**selector).matches(labels) is expected


# --- (e) the Python mirrors of the CEL rules ---------------------------------------------------

# Every CEL rule that has a Python check, with objects it must accept and reject. The rule
# text is the key, so a new rule without cases fails test_every_cel_rule_has_cases.
AGENT = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "a"}}
MEP = {"apiVersion": "ordo.dev/v1alpha1", "kind": "ModelEndpoint", "metadata": {"name": "m"}}
TOOL = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Tool", "metadata": {"name": "t"}}
MEM = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Memory", "metadata": {"name": "mem"}}
KEY = {"secretRef": {"name": "s", "key": "k"}}
HTTP = {"url": "https://x.example"}
MCP = {"url": "http://mcp:8080/mcp"}
A2A = {"url": "https://agent.example/a2a"}
POL = {"apiVersion": "ordo.dev/v1alpha1", "kind": "AgentPolicy", "metadata": {"name": "p"}}


def _req(operator: str, values: list[str] | None = None) -> dict[str, Any]:
    req: dict[str, Any] = {"key": "team", "operator": operator}
    if values is not None:
        req["values"] = values
    return req


GRL = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Guardrail", "metadata": {"name": "g"}}
GRL_PATTERN = {"patterns": ["x"]}
GRL_HTTP = {"url": "http://check.local/v1"}
GRL_MODEL = {"modelRef": "judge", "instructions": "deny secrets"}


def _grl(type_: str, **settings: Any) -> dict[str, Any]:
    return {**GRL, "spec": {"type": type_, "points": ["input"], **settings}}


TA = {"apiVersion": "ordo.dev/v1alpha1", "kind": "ToolApproval", "metadata": {"name": "a"}}
TA_SPEC = {"taskRef": "t", "callId": "call_1"}
TA_WHO = {"argsDigest": "sha256:" + "0" * 64, "approvedBy": "alice"}
TASK = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Task", "metadata": {"name": "t"}}
TASK_AGENT = {**TASK, "spec": {"agentRef": "a", "input": "x"}}
TASK_TEAM = {**TASK, "spec": {"teamRef": "t", "input": "x"}}
TEAM = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Team", "metadata": {"name": "t"}}
MEMBER = {"name": "a", "agentRef": "a"}


def _team(
    strategy: str, members: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    return {**TEAM, "spec": {"strategy": strategy, "members": members or [MEMBER], **spec}}


def _webhook(profile: str, **spec: Any) -> dict[str, Any]:
    auth = {"profile": profile, "secretRef": {"name": "s", "key": "k"}}
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "TaskWebhook",
        "metadata": {"name": "w"},
        "spec": {"auth": auth, "taskTemplate": {"spec": {"agentRef": "a"}}, **spec},
    }


TSCH: dict[str, Any] = {
    "apiVersion": "ordo.dev/v1alpha1",
    "kind": "TaskSchedule",
    "metadata": {"name": "nightly"},
    "spec": {"schedule": "@daily", "taskTemplate": {"spec": {"agentRef": "a"}}},
}
CEL_CASES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    "self.type != 'pattern' || has(self.pattern)": (
        [_grl("pattern", pattern=GRL_PATTERN), _grl("http", http=GRL_HTTP)],
        [_grl("pattern")],
    ),
    "has(self.http) || self.type != 'http'": (
        [_grl("http", http=GRL_HTTP), _grl("model", model=GRL_MODEL)],
        [_grl("http")],
    ),
    "self.type != 'model' || has(self.model)": (
        [_grl("model", model=GRL_MODEL), _grl("pattern", pattern=GRL_PATTERN)],
        [_grl("model")],
    ),
    "[has(self.pattern), has(self.http), has(self.model)].filter(x, x).size() <= 1": (
        [_grl("pattern", pattern=GRL_PATTERN)],
        [_grl("pattern", pattern=GRL_PATTERN, http=GRL_HTTP)],
    ),
    "!has(self.allow) || has(self.ref)": (
        [
            {**AGENT, "spec": {"modelRef": "m", "memory": {"ref": "x", "allow": ["read"]}}},
            {**AGENT, "spec": {"modelRef": "m", "memory": {"ref": "x"}}},
            {**AGENT, "spec": {"modelRef": "m", "memory": {}}},
        ],
        [{**AGENT, "spec": {"modelRef": "m", "memory": {"allow": []}}}],
    ),
    "!has(self.skills) || self.skills.all(s, !has(s.tools) || s.tools.all(t, has(self.tools) && t in self.tools))": (
        [
            {
                **AGENT,
                "spec": {
                    "modelRef": "m",
                    "tools": ["a", "b"],
                    "skills": [{"name": "s", "tools": ["b"]}],
                },
            },
            {**AGENT, "spec": {"modelRef": "m", "skills": [{"name": "s"}]}},
            {**AGENT, "spec": {"modelRef": "m", "skills": [{"name": "s", "tools": []}]}},
        ],
        [
            {
                **AGENT,
                "spec": {
                    "modelRef": "m",
                    "tools": ["a"],
                    "skills": [{"name": "s", "tools": ["b"]}],
                },
            },
            {**AGENT, "spec": {"modelRef": "m", "skills": [{"name": "s", "tools": ["b"]}]}},
        ],
    ),
    "has(self.text) || has(self.toolCalls)": (
        [
            {**MEP, "spec": {"provider": "mock", "mock": {"turns": [{"text": ""}]}}},
            {**MEP, "spec": {"provider": "mock", "mock": {"turns": [{"toolCalls": []}]}}},
        ],
        [{**MEP, "spec": {"provider": "mock", "mock": {"turns": [{"usage": {"inputTokens": 1}}]}}}],
    ),
    "self.provider == 'mock' || has(self.model)": (
        [
            {**MEP, "spec": {"provider": "mock"}},
            {**MEP, "spec": {"provider": "ollama", "model": "x"}},
        ],
        [
            {**MEP, "spec": {"provider": "ollama"}},
            {**MEP, "spec": {"provider": "openai-compatible"}},
        ],
    ),
    "!(self.provider in ['openai', 'anthropic', 'azure-openai']) || has(self.credentials)": (
        [
            {**MEP, "spec": {"provider": "openai", "model": "x", "credentials": KEY}},
            {**MEP, "spec": {"provider": "openai-compatible", "model": "x"}},
        ],
        [
            {**MEP, "spec": {"provider": "anthropic", "model": "x"}},
            {
                **MEP,
                "spec": {
                    "provider": "azure-openai",
                    "model": "x",
                    "baseUrl": "https://r.openai.azure.com",
                },
            },
        ],
    ),
    "self.provider != 'azure-openai' || has(self.baseUrl)": (
        [
            {
                **MEP,
                "spec": {
                    "provider": "azure-openai",
                    "model": "x",
                    "credentials": KEY,
                    "baseUrl": "https://r.example",
                },
            }
        ],
        [{**MEP, "spec": {"provider": "azure-openai", "model": "x", "credentials": KEY}}],
    ),
    "!has(self.mock) || self.provider == 'mock'": (
        [{**MEP, "spec": {"provider": "mock", "mock": {}}}],
        [{**MEP, "spec": {"provider": "ollama", "model": "x", "mock": {}}}],
    ),
    "self.type != 'http' || has(self.http)": (
        [{**TOOL, "spec": {"type": "http", "http": HTTP}}, {**TOOL, "spec": {"type": "mock"}}],
        [{**TOOL, "spec": {"type": "http"}}],
    ),
    "self.type != 'mcp' || has(self.mcp)": (
        [{**TOOL, "spec": {"type": "mcp", "mcp": MCP}}],
        [{**TOOL, "spec": {"type": "mcp"}}],
    ),
    "[has(self.http), has(self.mcp), has(self.mock), has(self.agent), has(self.a2a)]"
    ".filter(x, x).size() <= 1": (
        [
            {**TOOL, "spec": {"type": "mock", "mock": {}}},
            {**TOOL, "spec": {"type": "a2a", "a2a": A2A}},
        ],
        [
            {**TOOL, "spec": {"type": "mock", "mock": {}, "http": HTTP}},
            {**TOOL, "spec": {"type": "agent", "agent": {"ref": "a"}, "mock": {}}},
            {**TOOL, "spec": {"type": "a2a", "a2a": A2A, "http": HTTP}},
        ],
    ),
    "self.type != 'a2a' || has(self.a2a)": (
        [{**TOOL, "spec": {"type": "a2a", "a2a": {**A2A, "secretRef": KEY["secretRef"]}}}],
        [{**TOOL, "spec": {"type": "a2a"}}],
    ),
    "self.type == 'a2a' || !has(self.a2a)": (
        [{**TOOL, "spec": {"type": "mock", "mock": {}}}],
        [{**TOOL, "spec": {"type": "mock", "a2a": A2A}}],
    ),
    "self.type != 'agent' || has(self.agent)": (
        [{**TOOL, "spec": {"type": "agent", "agent": {"ref": "helper"}}}],
        [{**TOOL, "spec": {"type": "agent"}}],
    ),
    "self.type == 'agent' || !has(self.agent)": (
        [{**TOOL, "spec": {"type": "mock", "mock": {}}}],
        [{**TOOL, "spec": {"type": "mock", "agent": {"ref": "helper"}}}],
    ),
    "(self.type == 'http') == has(self.http) || !has(self.http)": (
        [{**TOOL, "spec": {"type": "http", "http": HTTP}}],
        [{**TOOL, "spec": {"type": "mock", "http": HTTP}}],
    ),
    "(self.type == 'mcp') == has(self.mcp) || !has(self.mcp)": (
        [{**TOOL, "spec": {"type": "mcp", "mcp": MCP}}],
        [{**TOOL, "spec": {"type": "mock", "mcp": MCP}}],
    ),
    "!has(self.inputSchema) || !has(self.inputSchema.type) || self.inputSchema.type == 'object'": (
        [
            {**TOOL, "spec": {"type": "mock", "inputSchema": {"type": "object"}}},
            {**TOOL, "spec": {"type": "mock", "inputSchema": {"properties": {}}}},
        ],
        [{**TOOL, "spec": {"type": "mock", "inputSchema": {"type": "array"}}}],
    ),
    "size(self.metadata.name) <= 63": (
        [{**TSCH, "metadata": {"name": "x" * 63}}],
        [{**TSCH, "metadata": {"name": "x" * 64}}],
    ),
    "size(self.metadata.name) <= 64": (
        [{**TOOL, "metadata": {"name": "x" * 64}, "spec": {"type": "mock"}}],
        [{**TOOL, "metadata": {"name": "x" * 65}, "spec": {"type": "mock"}}],
    ),
    "self.decision != 'Approve' || (has(self.argsDigest) && has(self.approvedBy))": (
        [
            {**TA, "spec": {**TA_SPEC, "decision": "Approve", **TA_WHO}},
            {**TA, "spec": {**TA_SPEC, "decision": "Reject"}},
            {**TA, "spec": {**TA_SPEC, "decision": "Reject", **TA_WHO}},
        ],
        [
            {**TA, "spec": {**TA_SPEC, "decision": "Approve"}},
            {**TA, "spec": {**TA_SPEC, "decision": "Approve", "argsDigest": TA_WHO["argsDigest"]}},
            {**TA, "spec": {**TA_SPEC, "decision": "Approve", "approvedBy": "alice"}},
        ],
    ),
    "oldSelf.hasValue() || !self.metadata.name.startsWith('memory.')": (
        [
            {**TOOL, "metadata": {"name": name}, "spec": {"type": "mock"}}
            for name in ("memory", "memory-write", "my.memory.write", "memorywrite")
        ],
        [
            {**TOOL, "metadata": {"name": name}, "spec": {"type": "mock"}}
            for name in ("memory.write", "memory.read", "memory.search", "memory.x")
        ],
    ),
    "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0)"
    " : (!has(self.values) || size(self.values) == 0)": (
        [
            {**POL, "spec": {"agentSelector": {"matchExpressions": [_req("In", ["a"])]}}},
            {**POL, "spec": {"agentSelector": {"matchExpressions": [_req("NotIn", ["a"])]}}},
            {**POL, "spec": {"agentSelector": {"matchExpressions": [_req("Exists")]}}},
            {**POL, "spec": {"agentSelector": {"matchExpressions": [_req("DoesNotExist", [])]}}},
        ],
        [
            {**POL, "spec": {"agentSelector": {"matchExpressions": [_req("In", [])]}}},
            {**POL, "spec": {"agentSelector": {"matchExpressions": [_req("NotIn")]}}},
            {**POL, "spec": {"agentSelector": {"matchExpressions": [_req("Exists", ["a"])]}}},
        ],
    ),
    "self.provider == 'in-memory' || has(self.url)": (
        [
            {**MEM, "spec": {"provider": "in-memory"}},
            {**MEM, "spec": {"provider": "postgres", "url": "postgresql://pg/ordo"}},
        ],
        [{**MEM, "spec": {"provider": "redis"}}, {**MEM, "spec": {"provider": "postgres"}}],
    ),
    "self.ingest.chunkOverlap < self.ingest.chunkSize": (
        [
            {
                **MEM,
                "spec": {"provider": "in-memory", "ingest": {"chunkSize": 64, "chunkOverlap": 63}},
            },
            {**MEM, "spec": {"provider": "in-memory"}},
        ],
        [
            {**MEM, "spec": {"provider": "in-memory", "ingest": {"chunkSize": 64}}},
            {
                **MEM,
                "spec": {
                    "provider": "in-memory",
                    "ingest": {"chunkSize": 100, "chunkOverlap": 100},
                },
            },
        ],
    ),
    "has(self.agentRef) != has(self.teamRef)": (
        [TASK_AGENT, TASK_TEAM],
        [{**TASK, "spec": {"input": "x"}}, {**TASK, "spec": {"agentRef": "a", "teamRef": "t"}}],
    ),
    "!has(self.teamRef) || (!has(self.skill) && !has(self.instructions) && "
    "!(has(self.limits) && has(self.limits.maxSteps)))": (
        [
            TASK_TEAM,
            {**TASK, "spec": {"teamRef": "t", "limits": {"timeout": "1m", "maxTokens": 9}}},
            {**TASK, "spec": {"agentRef": "a", "skill": "s", "limits": {"maxSteps": 2}}},
        ],
        [
            {**TASK, "spec": {"teamRef": "t", "skill": "s"}},
            {**TASK, "spec": {"teamRef": "t", "instructions": "be brief"}},
            {**TASK, "spec": {"teamRef": "t", "limits": {"maxSteps": 2}}},
        ],
    ),
    "self.strategy != 'Parallel' || has(self.aggregator)": (
        [_team("Parallel", aggregator={"agentRef": "agg"}), _team("Sequential")],
        [_team("Parallel")],
    ),
    "self.strategy != 'Sequential' || !has(self.aggregator)": (
        [_team("Sequential"), _team("Parallel", aggregator={"agentRef": "agg"})],
        [_team("Sequential", aggregator={"agentRef": "agg"})],
    ),
    "self.members.all(m, self.members.exists_one(n, n.name == m.name))": (
        [_team("Sequential", members=[MEMBER, {"name": "b", "agentRef": "a"}])],
        [_team("Sequential", members=[MEMBER, {**MEMBER, "agentRef": "other"}])],
    ),
    "self.auth.profile == 'HMAC' || !has(self.tolerance)": (
        [_webhook("HMAC", tolerance="1m"), _webhook("GitHub")],
        [_webhook("GitHub", tolerance="1m")],
    ),
}


def _cel_rules() -> dict[str, str]:
    """Rule text -> message of every CEL rule that has a Python check, from every model."""
    rules: dict[str, str] = {}
    seen: set[type] = set()

    def walk(model: type) -> None:
        if model in seen or not hasattr(model, "model_fields"):
            return
        seen.add(model)
        for rule in getattr(model, "cel_rules", ()):
            if rule.check is not None:
                rules[rule.rule] = rule.message
        for field in model.model_fields.values():
            for arg in _type_args(field.annotation):
                walk(arg)

    for info in KINDS.values():
        walk(info.model)
    return rules


def _type_args(annotation: Any) -> Iterator[Any]:
    yield annotation
    for arg in getattr(annotation, "__args__", ()):
        yield from _type_args(arg)
    for arg in getattr(annotation, "__metadata__", ()):
        yield from _type_args(arg)
    origin = getattr(annotation, "__origin__", None)
    if origin is not None:
        yield from _type_args(origin)


def test_every_cel_rule_has_cases() -> None:
    rules = _cel_rules()
    assert set(rules) == set(CEL_CASES)


def test_every_cel_rule_is_in_a_crd() -> None:
    in_crds = {
        rule["rule"]
        for _, schema in _crd_schemas()
        for _, node in _schema_nodes(schema, "$")
        for rule in node.get("x-kubernetes-validations", [])
    }
    assert set(_cel_rules()) <= in_crds


@pytest.mark.parametrize("rule", sorted(CEL_CASES))
def test_cel_rule_python_check(rule: str) -> None:
    message = _cel_rules()[rule]
    good, bad = CEL_CASES[rule]
    assert good and bad
    for body in good:
        obj, problems = manifests.parse_document(manifests.Document("t", 0, body))
        assert problems == [], body
        assert isinstance(obj, Resource)
    for body in bad:
        obj, problems = manifests.parse_document(manifests.Document("t", 0, body))
        assert obj is None, body
        assert any(message in p.message or p.message in message for p in problems), (
            body,
            [p.message for p in problems],
        )


def test_model_defaults_match_crd_defaults() -> None:
    agent = Agent.model_validate({"metadata": {"name": "a"}, "spec": {"modelRef": "m"}})
    assert (agent.spec.limits.max_steps, agent.spec.limits.timeout) == (10, "5m")
    endpoint = ModelEndpoint.model_validate(
        {"metadata": {"name": "m"}, "spec": {"provider": "mock"}}
    )
    assert (endpoint.spec.timeout, endpoint.spec.retry.max_attempts) == ("60s", 3)
    memory = Memory.model_validate({"metadata": {"name": "m"}, "spec": {"provider": "in-memory"}})
    assert (memory.spec.ingest.chunk_size, memory.spec.ingest.chunk_overlap) == (1000, 100)
    crd = yaml.safe_load((CRDS / "agents.ordo.dev.yaml").read_text())
    limits = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["limits"]
    assert limits["default"] == {}
    assert limits["properties"]["maxSteps"]["default"] == 10
    assert limits["properties"]["timeout"]["default"] == "5m"


def test_objects_read_back_from_the_cluster_validate(tmp_path: Path) -> None:
    """`kubectl get -o yaml` output carries server-set metadata; all of it is ObjectMeta."""
    mset = _load_text(
        tmp_path,
        """apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata:
  name: a
  namespace: team-a
  uid: 0b0e9a1c-7a0e-4a8e-9d5e-1f2f3f4f5f6f
  resourceVersion: "4711"
  generation: 2
  creationTimestamp: "2026-01-01T00:00:00Z"
  labels: {app.kubernetes.io/part-of: research, tier: "", team: research}
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"spec": {}}'
  finalizers: [ordo.dev/task]
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: c, uid: x}]
  managedFields: [{manager: kubectl, operation: Apply}]
spec: {modelRef: m}
""",
    )
    # Only the reference warning: the ModelEndpoint is not in the set.
    assert [(p.severity, p.field) for p in mset.problems] == [("warning", "spec.modelRef")]
    assert mset.errors == []
    assert len(mset.objects) == 1
