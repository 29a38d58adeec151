"""The operator's settings table (operator/settings.py) against everything that repeats it:
`ordo operator`'s parser, the settings objects' defaults, the chart (values.yaml,
values.schema.json, the Deployment template; rendered with helm where it is built) and the
flags table of docs/operations.md."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.packaging import CHART, KUSTOMIZE_BASE, ROOT, container, helm_template, one

from ordo.cli.main import build_parser
from ordo.operator import settingsdoc
from ordo.operator.flags import Setting, parse_quantities
from ordo.operator.handlers import OperatorConfig
from ordo.operator.main import add_arguments, add_run_task_arguments
from ordo.operator.settings import SETTINGS, JobSettings, SchedulerSettings

VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
TEMPLATE = (CHART / "templates" / "deployment.yaml").read_text().splitlines()
OPERATIONS_MD = ROOT / "docs" / "operations.md"

FLAGS = [s for s in SETTINGS if s.flag is not None]
CHARTED = [s for s in FLAGS if s.chart and s.chart_renders is None]
"""Settings whose chart value passes the table's default as it is."""


def _id(setting: Setting[Any]) -> str:
    return setting.name


def _expected(setting: Setting[Any]) -> Any:
    """The table's default as the parser (and the chart) give it."""
    if isinstance(setting.default, tuple):
        return list(setting.default)
    return setting.default


def _value(path: str) -> Any:
    node: Any = VALUES
    for key in path.split("."):
        node = node[key]
    return node


def _schema_node(path: str) -> dict[str, Any]:
    node: dict[str, Any] = SCHEMA
    for key in path.split("."):
        while "$ref" in node:
            node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[-1]]
        node = node["properties"][key]
    return node


def _chart_default(setting: Setting[Any]) -> Any:
    """What the chart passes by default: the first non-empty of its values (helm `default`),
    in the flag's form."""
    value: Any = next((_value(p) for p in setting.chart if _value(p) not in ("", None)), "")
    if setting.unit == "quantities":
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return value


def test_the_parser_is_the_table() -> None:
    args = build_parser().parse_args(["operator"])
    for setting in FLAGS:
        assert getattr(args, setting.name) == _expected(setting), setting.name
    run_task = argparse.ArgumentParser()
    add_run_task_arguments(run_task)
    parsed = run_task.parse_args(["-n", "ns", "--name", "t", "--execution-id", "e"])
    for setting in (s for s in FLAGS if s.name in ("lease_seconds", "log_format", "log_level")):
        assert getattr(parsed, setting.name) == _expected(setting), setting.name


def test_help_shows_each_default_of_the_table() -> None:
    parser = argparse.ArgumentParser(prog="ordo operator")
    add_arguments(parser)
    text = " ".join(parser.format_help().split())
    for setting in FLAGS:
        assert str(setting.flag) in text
        if shown := setting.default_text():
            assert f"(default {shown})" in text, setting.flag


def test_settings_objects_take_their_defaults_from_the_table() -> None:
    by_name = {s.name: s.default for s in SETTINGS}
    config, scheduler, job = OperatorConfig(), SchedulerSettings(), JobSettings()
    assert (config.lease_seconds, scheduler.lease_seconds, job.lease_seconds) == (
        by_name["lease_seconds"],
    ) * 3
    assert config.job_poll_seconds == scheduler.job_poll_seconds == by_name["job_poll_seconds"]
    assert config.reference_grace_seconds == scheduler.reference_grace_seconds
    assert scheduler.reference_grace_seconds == by_name["reference_grace"]
    assert config.approval_timeout_seconds == scheduler.approval_timeout
    assert scheduler.approval_timeout == by_name["approval_timeout"]
    assert config.job_cancel_grace_seconds == scheduler.job_cancel_grace_seconds
    assert scheduler.job_cancel_grace_seconds == by_name["job_cancel_grace_seconds"]
    assert config.max_concurrent_tasks == scheduler.max_concurrent_tasks
    assert scheduler.max_concurrent_tasks == by_name["max_concurrent_tasks"]
    assert config.resync_seconds == by_name["resync_seconds"]
    assert (config.metrics_port, config.health_port) == (8080, 8081)
    assert job.requests == parse_quantities(by_name["job_requests"])
    assert job.limits == parse_quantities(by_name["job_limits"])
    assert (job.service_account, job.image_pull_policy, job.backoff_limit) == (
        by_name["job_service_account"],
        by_name["job_image_pull_policy"],
        by_name["job_backoff_limit"],
    )
    assert job.ttl_seconds_after_finished == by_name["job_ttl_seconds"]
    assert job.deadline_grace_seconds == by_name["job_deadline_grace_seconds"]
    assert job.image_pull_grace_seconds == by_name["job_image_pull_grace_seconds"]
    assert (job.log_format, job.log_level) == (by_name["log_format"], by_name["log_level"])


@pytest.mark.parametrize("setting", CHARTED, ids=_id)
def test_chart_values_hold_the_table_default(setting: Setting[Any]) -> None:
    assert _chart_default(setting) == _expected(setting)
    for path in setting.chart:
        assert _schema_node(path), path


@pytest.mark.parametrize("setting", [s for s in FLAGS if s.chart], ids=_id)
def test_the_deployment_passes_each_chart_value_as_its_flag(setting: Setting[Any]) -> None:
    assert setting.flag is not None
    flag = re.compile(rf"(?<![\w-]){re.escape(setting.flag)}(?![\w-])")
    lines = [
        i for i, line in enumerate(TEMPLATE) if line.strip().startswith("- ") and flag.search(line)
    ]
    assert lines, f"the Deployment template never passes {setting.flag}"
    if setting.chart_renders is not None:
        return
    # The value is read on the flag's line or on the `if`/`range` line just above it.
    window = " ".join(TEMPLATE[i - 1] + TEMPLATE[i] for i in lines)
    for path in setting.chart:
        assert f"$.Values.{path}" in window, (setting.flag, path)


def test_flags_without_a_chart_value_are_the_extra_args() -> None:
    without = {s.flag for s in FLAGS if not s.chart}
    passed = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", "\n".join(TEMPLATE)))
    assert without == {s.flag for s in FLAGS} - passed
    pattern = _schema_node("operator.extraArgs")["items"]["pattern"]
    assert set(re.findall(r"[a-z][a-z0-9-]+", pattern.split("(", 1)[1].split(")")[0])) == {
        str(flag).removeprefix("--") for flag in without
    }


def test_kustomize_base_passes_the_table_defaults() -> None:
    """manifests/base is the chart's defaults, written out: each flag it passes that the chart
    passes from its values has the table's default."""
    docs = yaml.safe_load_all((KUSTOMIZE_BASE / "deployment.yaml").read_text())
    args = container(one(docs, "Deployment"))["args"]
    parsed = build_parser().parse_args(["operator", *args])
    passed = {str(arg).split("=", 1)[0] for arg in args}
    checked = [s for s in CHARTED if s.flag in passed]
    assert len(checked) >= 10, [s.flag for s in checked]
    for setting in checked:
        assert getattr(parsed, setting.name) == _expected(setting), setting.flag


@pytest.mark.services
def test_rendered_chart_passes_the_table_defaults(tmp_path: Path) -> None:
    args = container(one(helm_template(tmp_path), "Deployment"))["args"]
    parsed = build_parser().parse_args(["operator", *args])
    for setting in CHARTED:
        assert getattr(parsed, setting.name) == _expected(setting), setting.flag


def test_operations_doc_flags_table_is_current() -> None:
    assert settingsdoc.main(["--check", "--file", str(OPERATIONS_MD)]) == 0, (
        "run `python -m ordo.operator.settingsdoc`"
    )
    block = settingsdoc.render()
    for setting in FLAGS:
        row = next(line for line in block.splitlines() if f"`{setting.flag}" in line)
        if shown := setting.default_text():
            assert f"`{shown}`" in row, setting.flag


def test_settingsdoc_check_detects_a_stale_table(tmp_path: Path) -> None:
    doc = tmp_path / "operations.md"
    stale = settingsdoc.render().replace("`30`", "`31`")
    doc.write_text(f"# Operations\n\n{stale}\nmore\n")
    assert settingsdoc.main(["--check", "--file", str(doc)]) == 1
    assert settingsdoc.main(["--file", str(doc)]) == 0
    assert doc.read_text() == f"# Operations\n\n{settingsdoc.render()}\nmore\n"
    assert settingsdoc.main(["--check", "--file", str(doc)]) == 0
    doc.write_text("no block\n")
    with pytest.raises(ValueError):
        settingsdoc.main(["--check", "--file", str(doc)])
