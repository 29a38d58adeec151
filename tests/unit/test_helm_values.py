"""The chart's values that the schema used to get wrong or let through:

- `image.tag` (and `jobs.image.tag`) may be a whole number: `--set image.tag=1` gives helm an
  int64, a values file's `tag: 20240101` a float64; both render as the tag's digits.
- `operator.resyncSeconds` is at least 1, and helm says so ("minimum: got 0, want 1"), not
  "exclusiveMinimum: got 0, want 0".
- `resources` and `jobs.resources` are requests/limits maps of Kubernetes quantities: cpu,
  memory and ephemeral-storage for the operator container; cpu and memory for Job pods (all
  that the operator's --job-requests/--job-limits accept).
- `operator.extraArgs` items are `--flag=value` (or `--flag` for a switch) of an `ordo operator`
  flag that the chart sets no value for. The allowed flags are read from the operator's
  argparse parser and the chart's Deployment template, so the schema stays in step with both.

The schema cases run with jsonschema (draft 7) and need nothing else. The cases that run helm
(scripts/build-helm) fail in CI and are skipped elsewhere without it; like tests/unit/
test_alerts.py they carry the `services` marker, so `scripts/test --quick` (which does not
build helm) leaves them out.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from tests.support.packaging import CHART, ROOT, container, helm, helm_template, one

from ordo.cli.main import build_parser
from ordo.operator.main import add_arguments, parse_quantities

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
DEPLOYMENT_TEMPLATE = CHART / "templates" / "deployment.yaml"

helm_needed = pytest.mark.services


def _validate(path: tuple[str, ...], value: object) -> None:
    """Validate the chart defaults with `value` at `path` (raises ValidationError)."""
    values = copy.deepcopy(DEFAULTS)
    target = values
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    jsonschema.validate(values, SCHEMA, cls=jsonschema.Draft7Validator)


def _accepts(path: tuple[str, ...], value: object) -> bool:
    try:
        _validate(path, value)
    except jsonschema.ValidationError:
        return False
    return True


# -- image.tag -------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [("image", "tag"), ("jobs", "image", "tag")])
def test_image_tag_may_be_a_whole_number(key: tuple[str, ...]) -> None:
    for tag in ("", "0.1.0", "dev", 1, 20240101, 1.0):
        assert _accepts(key, tag), tag
    # YAML reads an unquoted 1.10 as 1.1: refused rather than rendered as the wrong tag.
    for tag in (1.1, -1, True, None):
        assert not _accepts(key, tag), tag


@helm_needed
def test_numeric_image_tag_renders_as_its_digits(tmp_path: Path) -> None:
    # --set parses 1 as an int64.
    result = helm(tmp_path, "template", "ordo", str(CHART), "--set", "image.tag=1")
    ctr = container(one(yaml.safe_load_all(result.stdout), "Deployment"))
    assert ctr["image"] == "ordo:1"
    assert "--job-image=ordo:1" in ctr["args"]
    # A values file gives float64s, which printf would write as 2.0240101e+07.
    docs = helm_template(
        tmp_path,
        values={"image": {"tag": 20240101}, "jobs": {"image": {"repository": "reg/r", "tag": 7}}},
    )
    ctr = container(one(docs, "Deployment"))
    assert ctr["image"] == "ordo:20240101"
    assert "--job-image=reg/r:7" in ctr["args"]
    # The default is still the chart's appVersion, and a string tag is kept as it is.
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    ctr = container(one(helm_template(tmp_path), "Deployment"))
    assert ctr["image"] == f"ordo:{app_version}"
    assert f"--job-image=ordo:{app_version}" in ctr["args"]
    ctr = container(one(helm_template(tmp_path, values={"image": {"tag": "1.10"}}), "Deployment"))
    assert ctr["image"] == "ordo:1.10"


# -- operator.resyncSeconds ------------------------------------------------------------------


def test_resync_seconds_is_at_least_one() -> None:
    assert _accepts(("operator", "resyncSeconds"), 1)
    assert _accepts(("operator", "resyncSeconds"), 2.5)
    for bad in (0, 0.5, -1, "60"):
        assert not _accepts(("operator", "resyncSeconds"), bad), bad


def test_no_exclusive_minimum_left_in_the_schema() -> None:
    # helm (santhosh-tekuri/jsonschema) reports exclusiveMinimum 0 as "got 0, want 0".
    assert "exclusiveMinimum" not in json.dumps(SCHEMA)


@helm_needed
@pytest.mark.parametrize("command", ["lint", "template"])
def test_helm_explains_a_bad_resync_interval(tmp_path: Path, command: str) -> None:
    args = ["lint", "--strict"] if command == "lint" else ["template", "ordo"]
    result = helm(tmp_path, *args, str(CHART), "--set", "operator.resyncSeconds=0", check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "at '/operator/resyncSeconds': minimum: got 0, want 1" in output, output


# -- resources and jobs.resources ------------------------------------------------------------

QUANTITIES_OK: list[object] = [
    "100m", "0.5", "1", "1.", ".5", "256Mi", "1Gi", "5Ki", "2Ti", "1Pi", "1Ei",
    "1k", "1M", "1G", "1T", "1P", "1E", "2n", "3u", "1e3", "1E3", "1e+09", "1e-3",
    0, 1, 2, 0.5, 1e9,
]  # fmt: skip
QUANTITIES_BAD: list[object] = [
    "", "abc", "Mi", "1mM", "1.2.3", "-1", "+1", "1K", "1gi", "1KiB", "1 Gi", " 1",
    "1Gi ", -1, -0.5, True, None, [], {},
]  # fmt: skip


@pytest.mark.parametrize("section", [("resources",), ("jobs", "resources")])
@pytest.mark.parametrize("kind", ["requests", "limits"])
def test_resources_are_kubernetes_quantities(section: tuple[str, ...], kind: str) -> None:
    for quantity in QUANTITIES_OK:
        for resource in ("cpu", "memory"):
            assert _accepts((*section, kind), {resource: quantity}), (resource, quantity)
    for quantity in QUANTITIES_BAD:
        assert not _accepts((*section, kind), {"cpu": quantity}), quantity
    assert _accepts((*section, kind), {})
    assert not _accepts((*section, kind), "100m")


def test_resources_keys() -> None:
    # The operator container: cpu, memory and ephemeral-storage requests and limits.
    assert _accepts(("resources",), {})
    assert _accepts(("resources",), {"limits": {"ephemeral-storage": "1Gi", "memory": "1Gi"}})
    for bad in (
        {"requests": {"nvidia.com/gpu": 1}},
        {"requests": {"hugepages-2Mi": "1Mi"}},
        {"claims": [{"name": "x"}]},
        {"request": {"cpu": "1"}},
        "100m",
        [],
    ):
        assert not _accepts(("resources",), bad), bad
    # Job pods: cpu and memory only, what --job-requests/--job-limits accept.
    assert not _accepts(("jobs", "resources"), {"limits": {"ephemeral-storage": "1Gi"}})


def test_job_resources_keys_are_what_the_operator_parses() -> None:
    allowed = SCHEMA["definitions"]["jobQuantities"]["properties"]
    for key in allowed:
        assert parse_quantities(f"{key}=1") == {key: "1"}
    for key in SCHEMA["definitions"]["containerQuantities"]["properties"].keys() - allowed:
        with pytest.raises(ValueError):
            parse_quantities(f"{key}=1")


def test_default_resources_parse_as_the_operator_flags() -> None:
    jobs = DEFAULTS["jobs"]["resources"]
    for kind in ("requests", "limits"):
        text = ",".join(f"{k}={v}" for k, v in jobs[kind].items())
        assert parse_quantities(text) == {k: str(v) for k, v in jobs[kind].items()}


@helm_needed
def test_helm_refuses_bad_resources(tmp_path: Path) -> None:
    cases = {
        "resources.requests.cpu=abc": "at '/resources/requests/cpu': 'abc' does not match",
        "resources.requests.gpu=1": "additional properties 'gpu' not allowed",
        "jobs.resources.limits.ephemeral-storage=1Gi": "at '/jobs/resources/limits': "
        "additional properties 'ephemeral-storage' not allowed",
        "jobs.resources.requests.cpu=-1": "at '/jobs/resources/requests/cpu': minimum",
    }
    for setting, message in cases.items():
        result = helm(tmp_path, "template", "ordo", str(CHART), "--set", setting, check=False)
        assert result.returncode != 0 and message in result.stderr, (setting, result.stderr)
    docs = helm_template(
        tmp_path,
        values={"resources": {"requests": {"cpu": 1}, "limits": {"ephemeral-storage": "1Gi"}}},
    )
    assert container(one(docs, "Deployment"))["resources"] == {
        "requests": {"cpu": 1, "memory": "256Mi"},
        "limits": {"memory": "512Mi", "ephemeral-storage": "1Gi"},
    }


# -- operator.extraArgs ----------------------------------------------------------------------


def _operator_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ordo operator")
    add_arguments(parser)
    return parser


def _long_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every `--flag` of the parser (not --help), with its action."""
    return {
        option: action
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
        if option.startswith("--")
    }


def _chart_flags() -> set[str]:
    """The flags the chart's Deployment sets from its own values (every `--flag` in it)."""
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", DEPLOYMENT_TEMPLATE.read_text()))


def _sample(action: argparse.Action) -> str:
    """A value the flag's type accepts."""
    if action.choices:
        return str(next(iter(action.choices)))
    if action.type is int or action.type is float:
        return "5"
    if action.type is None:
        return "x"
    return "5s"  # a duration (--reference-grace, --task-ttl)


def _extra_flags() -> dict[str, argparse.Action]:
    chart = _chart_flags()
    return {f: a for f, a in _long_flags(_operator_parser()).items() if f not in chart}


def test_chart_sets_only_real_operator_flags() -> None:
    chart = _chart_flags()
    assert {"--all-namespaces", "--namespace", "--resync-seconds", "--job-image"} <= chart
    assert chart <= set(_long_flags(_operator_parser())), chart - set(
        _long_flags(_operator_parser())
    )


def test_extra_args_schema_allows_exactly_the_flags_the_chart_leaves_unset() -> None:
    """The schema's pattern equals the operator's parser minus the chart's own flags: a flag
    added to `ordo operator` (or to the Deployment template) fails here until the schema
    (and docs/operations.md) follow."""
    extra = _extra_flags()
    assert extra, "every flag is set by the chart: extraArgs would accept nothing"
    key = ("operator", "extraArgs")
    for flag, action in extra.items():
        takes_value = action.nargs != 0
        good = f"{flag}={_sample(action)}" if takes_value else flag
        bad = flag if takes_value else f"{flag}=x"
        assert _accepts(key, [good]), f"values.schema.json should allow {good}"
        assert not _accepts(key, [bad]), f"values.schema.json should refuse {bad}"
        # What the schema accepts, the operator parses.
        build_parser().parse_args(["operator", good])
    for flag, action in _long_flags(_operator_parser()).items():
        if flag in extra:
            continue
        sample = f"{flag}={_sample(action)}" if action.nargs != 0 else flag
        assert not _accepts(key, [sample]), f"{flag} has a chart value; extraArgs should refuse it"
    for bad in ("--unknown-flag=1", "-A", "reference-grace=1s", "--reference-grace 5s", "", 5):
        assert not _accepts(key, [bad]), bad
    assert _accepts(key, [])
    assert not _accepts(key, "--reference-grace=5s")


def test_extra_args_flags_are_documented() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `operator.extraArgs`"))
    assert sorted(re.findall(r"`(--[a-z0-9-]+)`", row)) == sorted(_extra_flags())


def test_help_lists_the_parser_flags() -> None:
    """`ordo operator --help`, the installed command a user reads, shows exactly the flags
    this test derives from add_arguments."""
    ordo = Path(sys.executable).parent / "ordo"
    result = subprocess.run(
        [str(ordo), "operator", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", result.stdout)) - {"--help"}
    assert shown == set(_long_flags(_operator_parser()))


@helm_needed
def test_helm_refuses_unknown_extra_args_and_renders_good_ones(tmp_path: Path) -> None:
    for bad in ("--foo", "--log-level=DEBUG", "--reference-grace"):
        result = helm(
            tmp_path,
            "template",
            "ordo",
            str(CHART),
            "--set",
            f"operator.extraArgs={{{bad}}}",
            check=False,
        )
        assert result.returncode != 0, bad
        assert f"at '/operator/extraArgs/0': '{bad}' does not match pattern" in result.stderr
    docs = helm_template(
        tmp_path,
        values={
            "operator": {"extraArgs": ["--reference-grace=5m", "--job-cancel-grace-seconds=10"]}
        },
    )
    args = container(one(docs, "Deployment"))["args"]
    assert args[-2:] == ["--reference-grace=5m", "--job-cancel-grace-seconds=10"]
    parsed = build_parser().parse_args(["operator", *args])
    assert (parsed.reference_grace, parsed.job_cancel_grace_seconds) == (300.0, 10.0)
