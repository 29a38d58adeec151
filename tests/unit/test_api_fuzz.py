"""Fuzzing `manifests.load` with mutated example documents: whatever a user writes, validation
reports problems and never raises."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ordo.api import KINDS, manifests

REPO = Path(__file__).resolve().parents[2]
_DOCS, _ = manifests.read_documents([str(REPO / "examples")])
# A ToolApproval decides one call of a running Task, so no example can name one ahead: the
# fuzz seed gets one of its own.
TOOL_APPROVAL = {
    "apiVersion": "ordo.dev/v1alpha1",
    "kind": "ToolApproval",
    "metadata": {"name": "approve-lookup", "namespace": "default"},
    "spec": {
        "taskRef": "research",
        "callId": "call_1",
        "decision": "Approve",
        "argsDigest": "sha256:" + "0" * 64,
        "approvedBy": "alice@example.com",
        "reason": "ok",
    },
}
BODIES = [d.body for d in _DOCS if not manifests.is_secret(d.body)] + [TOOL_APPROVAL]

ENUM_LIKE = [
    *KINDS,
    "List",
    "Secret",
    "mock",
    "openai",
    "http",
    "mcp",
    "in-memory",
    "redis",
    "Fail",
    "ReturnError",
    "In",
    "Exists",
    "all",
    "any",
    "read",
    "30s",
    "-1s",
    "tool:x:invoke",
    "memory.write",
    "ordo.dev/v1alpha1",
    "v1",
    "",
]

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(ENUM_LIKE),
)
json_values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=10), st.integers(-5, 5)), children, max_size=4),
    ),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `node` (the root excluded)."""
    out: list[tuple[Any, ...]] = []
    items: list[tuple[Any, Any]] = []
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    for key, child in items:
        path = (*prefix, key)
        out.append(path)
        out.extend(_paths(child, path))
    return out


def _parent(root: Any, path: tuple[Any, ...]) -> Any:
    node = root
    for key in path[:-1]:
        node = node[key]
    return node


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    body = copy.deepcopy(draw(st.sampled_from(BODIES)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = _paths(body)
        op = draw(st.sampled_from(["drop", "set", "add", "enum", "root"]))
        if op == "root" or not paths:
            body = draw(st.one_of(json_values, st.just(body)))
            if isinstance(body, dict) and draw(st.booleans()):
                body["kind"] = draw(st.sampled_from(ENUM_LIKE))
            continue
        path = draw(st.sampled_from(paths))
        parent = _parent(body, path)
        key = path[-1]
        if op == "drop":
            del parent[key]
        elif op == "set":
            parent[key] = draw(json_values)
        elif op == "enum":
            parent[key] = draw(st.one_of(st.sampled_from(ENUM_LIKE), st.text(max_size=12)))
        elif op == "add":
            target = parent[key] if isinstance(parent[key], dict) else parent
            if isinstance(target, dict):
                target[draw(st.text(min_size=1, max_size=12))] = draw(json_values)
            else:
                target.append(draw(json_values))
    return body


def _same(a: Any, b: Any) -> bool:
    """Equality that treats NaN as equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _load(tmp_dir: Path, text: str) -> manifests.ManifestSet:
    path = tmp_dir / "fuzz.yaml"
    path.write_text(text)
    return manifests.load([str(path)])


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _check(mset: manifests.ManifestSet) -> None:
    assert all(isinstance(p, manifests.Problem) for p in mset.problems)
    for problem in mset.problems:
        assert problem.severity in ("error", "warning")
        assert str(problem)  # renders


def test_the_examples_are_the_seed() -> None:
    assert len(BODIES) >= 30
    assert {b["kind"] for b in BODIES} == set(KINDS)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=mutated_documents())
def test_mutated_documents_never_crash_validation(tmp_dir: Path, body: Any) -> None:
    text = yaml.safe_dump(body, allow_unicode=True)
    mset = _load(tmp_dir, text)
    _check(mset)
    if mset.objects:
        # Whatever is accepted is kept as written (once in JSON: mapping keys are strings,
        # as kubectl's YAML-to-JSON conversion makes them).
        ((doc, obj),) = mset.objects
        assert _same(obj.to_dict(), json.loads(json.dumps(doc.body)))
    elif isinstance(body, dict) and body.get("kind") != "List" and not mset.warnings:
        # A document that is neither accepted nor skipped must say why.
        assert mset.errors or mset.secrets


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(min_value=0, max_value=len(BODIES) - 1),
    position=st.floats(min_value=0, max_value=1),
    cut=st.integers(min_value=0, max_value=20),
    insert=st.lists(
        st.sampled_from([*":-{}[]&*!|>'\"#%@`, \n\t?", "!!binary ", "<<: ", "kind: List\n", "  "]),
        max_size=10,
    ).map("".join),
)
def test_mangled_yaml_text_never_crashes_validation(
    tmp_dir: Path, index: int, position: float, cut: int, insert: str
) -> None:
    text = yaml.safe_dump(BODIES[index], sort_keys=False)
    at = int(position * len(text))
    mset = _load(tmp_dir, text[:at] + insert + text[at + cut :])
    _check(mset)


@pytest.mark.parametrize(
    "text",
    [
        "kind: List\nitems: 5\n",
        "kind: List\nitems: [5, {kind: Agent}]\n",
        "kind: List\nitems: {a: 1}\n",
        "- 1\n- 2\n",
        "just a string\n",
        "apiVersion: ordo.dev/v1alpha1\nkind: [Agent]\nmetadata: 5\n",
        "apiVersion: ordo.dev/v1alpha1\nkind: Agent\nmetadata: {name: [a]}\nspec: {modelRef: m}\n",
        "apiVersion: ordo.dev/v1alpha1\nkind: Agent\nmetadata: {name: a, labels: {1: 2}}\nspec: {modelRef: m}\n",
        "apiVersion: {a: 1}\nkind: Agent\n",
        "apiVersion: ordo.dev/v1alpha1\nkind: Task\nmetadata: {name: t}\nspec: {agentRef: a, input: !!binary aGk=}\n",
        "apiVersion: ordo.dev/v1alpha1\nkind: Agent\nmetadata: {name: a, creationTimestamp: 2024-01-01}\nspec: {modelRef: m}\n",
    ],
)
def test_odd_documents_are_problems_not_crashes(tmp_dir: Path, text: str) -> None:
    mset = _load(tmp_dir, text)
    _check(mset)


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_a_non_finite_number_is_refused_naming_the_field(tmp_dir: Path, value: str) -> None:
    """YAML's .inf/.nan have no JSON form (stored as null, silently): refused instead."""
    text = (
        "apiVersion: ordo.dev/v1alpha1\nkind: Task\nmetadata: {name: t}\n"
        f"spec: {{agentRef: a, input: {{items: [1, {{ticketId: {value}}}]}}}}\n"
    )
    mset = _load(tmp_dir, text)
    assert not mset.objects
    assert [str(p.field) for p in mset.errors] == ["spec.input.items[1].ticketId"]
