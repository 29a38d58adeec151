"""Generate CustomResourceDefinitions from the pydantic models (`ordo crds`).

Pydantic emits JSON Schema 2020-12 with `$ref`s and `anyOf` for optionals; a CRD needs a
structural OpenAPI v3 schema. This module inlines references, drops nullability (an unset
field is simply absent), and keeps only the keywords the API server accepts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from . import GROUP, KINDS, VERSION, KindInfo

_KEEP = {
    "type",
    "description",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "format",
    "default",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-int-or-string",
}


class SchemaError(Exception):
    """The model cannot be expressed as a structural schema."""


_BLOCK_STARTS = ("- ", "* ", "| ", "```")


def flow(text: str) -> str:
    """A docstring as a CRD description: the lines of a paragraph joined into one (kubectl
    explain and editors wrap text themselves, so a hard break shows as a ragged line),
    paragraphs kept apart by a blank line, list items and table rows kept on their own line."""
    paragraphs = []
    for block in text.strip().split("\n\n"):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        out: list[str] = []
        for line in lines:
            if out and not line.startswith(_BLOCK_STARTS):
                out[-1] += " " + line
            else:
                out.append(line)
        if out:
            paragraphs.append("\n".join(out))
    return "\n\n".join(paragraphs)


def _with_default(description: str, default: Any) -> str:
    """The description ending with the default, as `kubectl explain` users look for it."""
    if isinstance(default, bool):
        shown = "true" if default else "false"
    elif isinstance(default, int | float | str) and str(default) != "":
        shown = str(default)
    else:
        return description
    if "default:" in description.lower() or "(default" in description.lower():
        return description  # the text already says it
    sep = " " if description.endswith((".", ")")) or not description else ". "
    return f"{description}{sep}Default: {shown}.".strip()


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = dict(target)
        for key, value in node.items():
            if key != "$ref":
                merged[key] = value
        return _resolve(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise SchemaError(f"cannot express a union of {len(options)} types: {node}")
        merged = dict(_resolve(options[0], defs))
        for key, value in node.items():
            if key != "anyOf":
                merged[key] = value
        return merged
    return node


def structural(
    node: dict[str, Any], defs: dict[str, Any], *, in_status: bool = False
) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a structural OpenAPI v3 schema node."""
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    if "const" in node:
        out["type"] = "string"
        out["enum"] = [node["const"]]
    for key, value in node.items():
        if key not in _KEEP:
            continue
        if key == "default" and (value is None or in_status):
            continue
        out[key] = flow(value) if key == "description" and isinstance(value, str) else value
    if "default" in out:
        out["description"] = _with_default(out.get("description", ""), out["default"])
    if "properties" in node:
        out["type"] = "object"
        out["properties"] = {
            name: structural(child, defs, in_status=in_status)
            for name, child in node["properties"].items()
        }
        if not out.get("required"):
            out.pop("required", None)
    elif isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = structural(
            node["additionalProperties"], defs, in_status=in_status
        )
    if "items" in node:
        out["items"] = structural(node["items"], defs, in_status=in_status)
    if "type" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        raise SchemaError(f"schema node without a type: {node}")
    return out


def openapi_schema(info: KindInfo) -> dict[str, Any]:
    """The openAPIV3Schema of one kind."""
    schema = info.model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})
    props = schema["properties"]
    spec = structural(props["spec"], defs)
    for rule in info.spec_rules:
        spec.setdefault("x-kubernetes-validations", []).append(
            {"rule": rule.rule, "message": rule.message}
        )
    root_rules = schema.get("x-kubernetes-validations", [])
    metadata: dict[str, Any] = {"type": "object"}
    # A rule's fieldPath must exist in the schema: declare the metadata fields rules name
    # (the API server allows only name and generateName here).
    named = sorted({r["fieldPath"].split(".")[2] for r in root_rules if "fieldPath" in r})
    if named:
        metadata["properties"] = {name: {"type": "string"} for name in named}
    root: dict[str, Any] = {
        "type": "object",
        "description": flow(info.model.__doc__ or ""),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "ordo.dev/v1alpha1"},
            "kind": {"type": "string", "description": info.kind},
            "metadata": metadata,
            "spec": spec,
            "status": structural(props["status"], defs, in_status=True),
        },
    }
    if root_rules:
        root["x-kubernetes-validations"] = root_rules
    return root


def crd(info: KindInfo) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{info.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "ordo"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": list(info.short_names),
                "categories": ["ordo"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {k: (int(v) if k == "priority" else v) for k, v in col.items()}
                        for col in info.columns
                    ],
                    "schema": {"openAPIV3Schema": openapi_schema(info)},
                }
            ],
        },
    }


def render_all() -> dict[str, str]:
    """File name → YAML text for every kind."""
    header = "# Generated by `ordo crds` from controller/ordo/api. Do not edit.\n"
    return {
        f"{info.plural}.{GROUP}.yaml": header
        + yaml.safe_dump(crd(info), sort_keys=False, width=100, allow_unicode=True)
        for info in KINDS.values()
    }


def write_all(output_dir: Path) -> list[Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_all().items():
        path = output_dir / name
        path.write_text(text)
        written.append(path)
    return written
