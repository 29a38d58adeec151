"""Generate the API reference (docs/api.md) from the CRDs that `ordo crds` generates.

    python -m ordo.api.docgen            write docs/api.md
    python -m ordo.api.docgen --check    exit 1 if docs/api.md is not current
    python -m ordo.api.docgen --stdout   print it

The CRD schema is what the API server enforces, so the reference is built from it: every field
of every kind with its type, whether it is required, its default, enum values, bounds and
patterns, its description (the model docstring), the CEL rules with their messages, the
printer columns and short names.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import API_VERSION, KINDS, KindInfo, crdgen
from .base import DNS1123_LABEL, DNS1123_SUBDOMAIN, DURATION_PATTERN, PERMISSION_PATTERN

DEFAULT_OUTPUT = Path("docs/api.md")

_PATTERN_NAMES = {
    DNS1123_SUBDOMAIN: "DNS-1123 name",
    DNS1123_LABEL: "DNS-1123 label",
    DURATION_PATTERN: "duration, e.g. `30s`, `5m`, `1h30m`",
    PERMISSION_PATTERN: "permission `<kind>:<name>:<verb>`",
}

_KIND_SUMMARY = {
    "Agent": "A model, a prompt, the tools it may call, its roles, memory and limits.",
    "ModelEndpoint": "Where and how to call a model (provider, model, credentials, retries).",
    "Tool": "An HTTP endpoint, a tool on an MCP server, or a canned mock result.",
    "AgentRole": "A named set of permissions an Agent can hold.",
    "ToolPermission": "The permissions an Agent needs to invoke a Tool.",
    "AgentPolicy": "Guard rails over the Agents it selects: models, blocked tools, budgets.",
    "Memory": "A key/value and search store the agent reaches through built-in tools.",
    "Task": "One agent run: its input, and its status contract.",
    "TaskSchedule": "A Task per scheduled time (cron), shaped like a batch/v1 CronJob.",
    "Team": "Agents that run one Task together, in sequence or in parallel with an aggregator.",
    "TaskWebhook": "A Task per signed HTTP delivery, served by `ordo gateway` at /hooks.",
}


_KIND_NOTES = {
    "Task": [
        "`spec.input` is immutable too, but no CEL rule can compare it (a string-or-object "
        "field has no schema type): the operator runs with the input it read when it claimed "
        "the Task, and ignores later edits. Only `spec.cancel` may change after creation.",
        "",
    ],
}


@dataclass(frozen=True)
class FieldDoc:
    """One row of a field table."""

    path: str
    type: str
    required: bool
    default: str
    validation: str
    description: str


@dataclass(frozen=True)
class RuleDoc:
    """One CEL rule and where it is attached."""

    path: str
    rule: str
    message: str
    field_path: str | None

    @property
    def on_update_only(self) -> bool:
        return "oldSelf" in self.rule


def _code(text: str, *, table: bool = True) -> str:
    """Inline code; in a table cell `|` is escaped so it does not end the cell."""
    if table:
        text = text.replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)) and not value:
        return "{}" if isinstance(value, dict) else "[]"
    return str(value)


def type_name(node: dict[str, Any]) -> str:
    """A short type for a schema node: `string`, `[]string`, `[]object`, `map[string]string`."""
    kind = node.get("type")
    if kind is None:
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return "string or object"
        return "any"
    if kind == "array":
        return "[]" + type_name(node.get("items", {}))
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return "map[string]" + type_name(extra)
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return "object (any JSON)"
    return str(kind)


def validation(node: dict[str, Any]) -> str:
    """Enum values, bounds, lengths, patterns and list semantics of a node (and its items when
    the items are scalars)."""
    parts: list[str] = []
    items = node.get("items")
    if node.get("type") == "array" and isinstance(items, dict) and items.get("type") != "object":
        inner = validation(items)
        if inner:
            parts.append(f"each: {inner}")
    if "enum" in node:
        parts.append("one of " + ", ".join(_code(_scalar(v)) for v in node["enum"]))
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and high is not None:
        parts.append(f"{low} to {high}")
    elif low is not None:
        parts.append(f"at least {low}")
    elif high is not None:
        parts.append(f"at most {high}")
    for lo_key, hi_key, unit in (
        ("minLength", "maxLength", "chars"),
        ("minItems", "maxItems", "items"),
        ("minProperties", "maxProperties", "entries"),
    ):
        lo, hi = node.get(lo_key), node.get(hi_key)
        if lo is not None and hi is not None:
            parts.append(f"{lo} to {hi} {unit}")
        elif hi is not None:
            parts.append(f"at most {hi} {unit}")
        elif lo is not None:
            parts.append(f"at least {lo} {unit}")
    if "pattern" in node:
        pattern = node["pattern"]
        parts.append(_PATTERN_NAMES.get(pattern) or f"pattern {_code(pattern)}")
    list_type = node.get("x-kubernetes-list-type")
    if list_type == "set":
        parts.append("unique items")
    elif list_type == "map":
        keys = ", ".join(node.get("x-kubernetes-list-map-keys", []))
        parts.append(f"unique by {keys}")
    return "; ".join(parts)


def walk_fields(node: dict[str, Any], path: str, required: bool) -> Iterator[FieldDoc]:
    """One FieldDoc for `node` and, depth first, for every field below it. Items of arrays of
    objects appear as `path[].field`, values of maps of objects as `path.*.field`."""
    default = node.get("default")
    yield FieldDoc(
        path=path,
        type=type_name(node),
        required=required,
        default="" if default is None else _scalar(default),
        validation=validation(node),
        description=node.get("description", ""),
    )
    yield from _children(node, path)


def _children(node: dict[str, Any], path: str) -> Iterator[FieldDoc]:
    needed = set(node.get("required", []))
    for name, child in (node.get("properties") or {}).items():
        yield from walk_fields(child, f"{path}.{name}", name in needed)
    items = node.get("items")
    if isinstance(items, dict) and items.get("type") == "object":
        yield from _children(items, f"{path}[]")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and extra.get("type") == "object":
        yield from _children(extra, f"{path}.*")


def walk_rules(node: dict[str, Any], path: str) -> Iterator[RuleDoc]:
    """Every x-kubernetes-validations rule at or below `node`."""
    for rule in node.get("x-kubernetes-validations", []):
        yield RuleDoc(path, rule["rule"], rule["message"], rule.get("fieldPath"))
    for name, child in (node.get("properties") or {}).items():
        yield from walk_rules(child, f"{path}.{name}")
    for key, suffix in (("items", "[]"), ("additionalProperties", ".*")):
        child = node.get(key)
        if isinstance(child, dict):
            yield from walk_rules(child, path + suffix)


def _field_table(rows: Sequence[FieldDoc]) -> list[str]:
    out = [
        "| Field | Type | Required | Default | Validation | Description |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        out.append(
            f"| {_code(row.path)} | {_cell(row.type)} | {'yes' if row.required else ''} "
            f"| {_code(row.default) if row.default else ''} | {row.validation} "
            f"| {_cell(row.description)} |"
        )
    return out


def _anchor(kind: str) -> str:
    return kind.lower()


def render_kind(info: KindInfo) -> list[str]:
    crd = crdgen.crd(info)
    version = crd["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    names = crd["spec"]["names"]
    out = [f"## {info.kind}", "", (info.model.__doc__ or "").strip(), ""]
    out += [
        "| | |",
        "|---|---|",
        f"| apiVersion | `{API_VERSION}` |",
        f"| resource | `{names['plural']}` (`kubectl get {names['plural']}`), scope Namespaced |",
        f"| short names | {', '.join(_code(n) for n in names['shortNames'])} |",
        f"| categories | {', '.join(_code(c) for c in names['categories'])} |",
        f"| CRD | `crds/{crd['metadata']['name']}.yaml` |",
        "",
        "Printer columns (`kubectl get`):",
        "",
        "| Column | Type | JSONPath |",
        "|---|---|---|",
    ]
    for col in version["additionalPrinterColumns"]:
        out.append(f"| {col['name']} | {col['type']} | {_code(col['jsonPath'])} |")
    out.append("")

    name_rules = any(
        r.get("fieldPath") == ".metadata.name" for r in schema.get("x-kubernetes-validations", [])
    )
    meta_rows = [
        FieldDoc(
            "metadata.name",
            "string",
            True,
            "",
            "DNS-1123 name, at most 253 chars" + ("; see rules" if name_rules else ""),
            "Unique among objects of this kind in the namespace; other objects refer to it.",
        ),
        FieldDoc(
            "metadata.namespace",
            "string",
            False,
            "",
            "DNS-1123 label",
            "References resolve in this namespace only: a namespace is a tenant.",
        ),
    ]
    spec = schema["properties"]["spec"]
    out += [f"### {info.kind} spec", ""]
    out += _field_table([*meta_rows, *walk_fields(spec, "spec", True)])
    out.append("")

    rules = [*walk_rules(schema, ""), *walk_rules(spec, "spec")]
    # walk_rules(schema) also reaches spec; keep each (path, rule) once.
    unique: dict[tuple[str, str], RuleDoc] = {}
    for rule in rules:
        path = rule.path.lstrip(".") or "(object)"
        unique.setdefault(
            (path, rule.rule), RuleDoc(path, rule.rule, rule.message, rule.field_path)
        )
    if unique:
        out += [f"### {info.kind} rules", ""]
        out.append(
            "Cross-field rules (CEL, `x-kubernetes-validations`): the API server rejects an "
            "object that breaks one, and `ordo validate` checks the same rules offline."
        )
        out.append("")
        for rule in unique.values():
            at = rule.field_path.lstrip(".") if rule.field_path else rule.path
            when = " (on update)" if rule.on_update_only else ""
            out.append(f"- at `{at}`{when}: {rule.message}")
            if len(rule.rule) <= 100:
                out.append(f"  - rule: {_code(rule.rule, table=False)}")
            else:
                lines = rule.rule.replace(" && ", "\n  && ").splitlines()
                out += ["", "  ```", *(f"  {line}" for line in lines), "  ```"]
        out.append("")
        out += _KIND_NOTES.get(info.kind, [])

    status = schema["properties"]["status"]
    out += [f"### {info.kind} status", ""]
    out.append("Written by the operator (status subresource); never set it yourself.")
    out.append("")
    out += _field_table(list(_children(status, "status")))
    out.append("")
    return out


def render() -> str:
    """The whole of docs/api.md."""
    out = [
        "<!-- Generated by `python -m ordo.api.docgen` from controller/ordo/api. Do not edit. -->",
        "",
        f"# API reference: `{API_VERSION}`",
        "",
        "Every kind is namespaced; references name objects in the same namespace. Fields are "
        "camelCase; unknown fields are rejected (`kubectl apply` validates strictly by "
        "default, and so does `ordo validate`). Defaults are filled in by the API server. "
        "Task reasons are explained in [reasons.md](reasons.md). In the tables, *Required* "
        "means required whenever the enclosing object is present; `[]` marks the items of a "
        "list and `*` the values of a map.",
        "",
        "Conventions:",
        "",
        "- names: DNS-1123 (lowercase letters, digits, `-`, `.`), at most 253 characters; a Tool "
        "name is also the function name the model sees (`.` becomes `_`), so at most 64;",
        "- durations: a number and a unit, repeated: `500ms`, `30s`, `5m`, `1h30m`;",
        "- permissions: `<kind>:<object-name>:<verb>`, e.g. `tool:web-search:invoke`; `*` "
        "matches any name or verb in a granted permission;",
        "- secrets: always a `secretRef` (`name`, `key`) to a Secret in the same namespace; "
        "ordo never writes a secret value anywhere.",
        "",
        "| Kind | Short name | What it is |",
        "|---|---|---|",
    ]
    for info in KINDS.values():
        out.append(
            f"| [{info.kind}](#{_anchor(info.kind)}) | {', '.join(_code(n) for n in info.short_names)} "
            f"| {_KIND_SUMMARY.get(info.kind, (info.model.__doc__ or '').strip())} |"
        )
    out += ["", "`kubectl get ordo` lists objects of every kind.", ""]
    for info in KINDS.values():
        out += render_kind(info)
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ordo.api.docgen", description="Generate the API reference."
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="default: docs/api.md")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not current")
    parser.add_argument("--stdout", action="store_true", help="print instead of writing")
    args = parser.parse_args(argv)
    text = render()
    output: Path = args.output
    if args.stdout:
        sys.stdout.write(text)
        return 0
    if args.check:
        if not output.exists() or output.read_text() != text:
            print(f"{output}: not current; run `python -m ordo.api.docgen`", file=sys.stderr)
            return 1
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
