"""docs/api.md is generated and current; docs/reasons.md explains every Task reason."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ordo.api import KINDS, REASONS, docgen

REPO = Path(__file__).resolve().parents[2]
API_MD = REPO / "docs" / "api.md"
REASONS_MD = REPO / "docs" / "reasons.md"


def _crd(plural: str) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load((REPO / "crds" / f"{plural}.ordo.dev.yaml").read_text())
    return crd


def _paths(node: dict[str, Any], path: str) -> list[str]:
    out = [path]
    for name, child in (node.get("properties") or {}).items():
        out += _paths(child, f"{path}.{name}")
    items = node.get("items")
    if isinstance(items, dict) and items.get("type") == "object":
        out += _paths(items, f"{path}[]")[1:]
    return out


def test_api_reference_is_current() -> None:
    assert API_MD.read_text() == docgen.render(), "run `python -m ordo.api.docgen`"


def test_docgen_check_detects_a_stale_file(tmp_path: Path) -> None:
    out = tmp_path / "api.md"
    assert docgen.main(["--output", str(out)]) == 0
    assert docgen.main(["--check", "--output", str(out)]) == 0
    out.write_text(out.read_text().replace("maxSteps", "maxStep"))
    assert docgen.main(["--check", "--output", str(out)]) == 1
    assert docgen.main(["--check", "--output", str(tmp_path / "missing.md")]) == 1


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_field_of_every_kind_is_documented(kind: str) -> None:
    info = KINDS[kind]
    text = API_MD.read_text()
    section = text.split(f"\n## {kind}\n", 1)[1].split("\n## ", 1)[0]
    crd = _crd(info.plural)
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    fields = (
        _paths(schema["properties"]["spec"], "spec")
        + _paths(schema["properties"]["status"], "status")[1:]
    )
    missing = [f for f in fields if f"| `{f}` |" not in section]
    assert not missing
    for col in version["additionalPrinterColumns"]:
        assert f"| {col['name']} | {col['type']} |" in section
    for short in crd["spec"]["names"]["shortNames"]:
        assert f"`{short}`" in section


def test_field_rows_carry_type_default_enum_bounds_and_description() -> None:
    text = API_MD.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `spec.limits.maxSteps` |"))
    cells = [c.strip() for c in row.strip("|").split(" | ")]
    assert cells[1:5] == ["integer", "", "`10`", "1 to 1000"]
    assert "MaxStepsExceeded" in cells[5]
    provider = next(line for line in text.splitlines() if line.startswith("| `spec.provider` |"))
    assert "one of `openai`, `anthropic`" in provider and "| yes |" in provider


def test_every_cel_rule_is_documented_with_its_message() -> None:
    text = API_MD.read_text()
    for info in KINDS.values():
        crd_text = (REPO / "crds" / f"{info.plural}.ordo.dev.yaml").read_text()
        for message in re.findall(r"- message: (.+)", crd_text):
            message = yaml.safe_load(message)
            assert message in text, message


def test_every_reason_is_explained() -> None:
    text = REASONS_MD.read_text()
    headings = re.findall(r"^## (\w+)$", text, re.MULTILINE)
    assert sorted(headings) == sorted(REASONS)
    table = re.findall(r"^\| \[`(\w+)`\]\(#(\w+)\) \|", text, re.MULTILINE)
    assert sorted(name for name, _ in table) == sorted(REASONS)
    for name, anchor in table:
        assert anchor == name.lower()
    for reason in REASONS:
        section = text.split(f"\n## {reason}\n", 1)[1].split("\n## ", 1)[0]
        assert "**Meaning:**" in section, reason
        assert "**What to do:**" in section or "**If the answer is wrong**" in section, reason


def test_docs_point_at_examples_that_exist() -> None:
    for doc in (REASONS_MD, API_MD):
        for folder in re.findall(r"examples/([a-z0-9-]+)", doc.read_text()):
            assert (REPO / "examples" / folder).is_dir(), folder
