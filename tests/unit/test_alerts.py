"""The chart's PrometheusRule, judged by Prometheus' own promtool.

The rule groups are rendered with helm (charts/ordo, `prometheusRule.enabled=true`), taken out
of the PrometheusRule object into a plain Prometheus rule file, and then:

- `promtool check rules` parses every expression and template;
- `promtool test rules` runs one unit-test file per alert (tests/alerts/<Alert>.yaml): input
  series in, the expected alerts (labels and rendered annotations) out, with cases where the
  alert fires and cases where it must not.

The unit-test files are written for the defaults: release `ordo` in namespace `ordo-system`,
`taskFailureRatio` 0.25, `modelErrorRatio` 0.1, `pendingFor` 15m. Each names `rules.yaml`,
the rendered file written next to a copy of it.

promtool comes from Debian's `prometheus` package (scripts/prometheus-deps); helm from
scripts/build-helm. Without them these tests fail in CI and are skipped elsewhere. They carry
the `services` marker, so `scripts/test --quick` (which builds neither) leaves them out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.packaging import ROOT, helm_template, in_ci, one

pytestmark = pytest.mark.services

ALERT_TESTS = ROOT / "tests" / "alerts"
ALERTS = (
    "OrdoTaskFailureRatioHigh",
    "OrdoModelErrorRatioHigh",
    "OrdoTasksPendingTooLong",
    "OrdoCheckpointUntrusted",
    "OrdoOperatorDown",
)


def promtool() -> str:
    path = os.environ.get("ORDO_PROMTOOL") or shutil.which("promtool")
    if not path:
        how = "run scripts/prometheus-deps (Debian's prometheus package)"
        if in_ci():
            pytest.fail(f"promtool is required in CI: {how}", pytrace=False)
        pytest.skip(f"promtool not available ({how})")
    return path


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def rendered_groups(tmp: Path, **values: Any) -> list[dict[str, Any]]:
    rule = {"enabled": True, **values}
    docs = helm_template(tmp, values={"prometheusRule": rule})
    groups = one(docs, "PrometheusRule")["spec"]["groups"]
    assert isinstance(groups, list)
    return groups


def write_rules(tmp: Path, groups: list[dict[str, Any]]) -> Path:
    path = tmp / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


@pytest.fixture
def default_rules(tmp_path: Path) -> Path:
    promtool()
    return write_rules(tmp_path, rendered_groups(tmp_path))


def test_promtool_check_rules_accepts_the_chart_rules(default_rules: Path) -> None:
    result = run_promtool("check", "rules", default_rules.name, cwd=default_rules.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout, result.stdout


def test_every_alert_has_a_unit_test_file(default_rules: Path) -> None:
    groups = yaml.safe_load(default_rules.read_text())["groups"]
    alerts = [r["alert"] for g in groups for r in g["rules"] if "alert" in r]
    assert alerts == list(ALERTS)
    files = sorted(p.stem for p in ALERT_TESTS.glob("*.yaml"))
    assert files == sorted(ALERTS)
    for name in ALERTS:
        spec = yaml.safe_load((ALERT_TESTS / f"{name}.yaml").read_text())
        assert spec["rule_files"] == ["rules.yaml"]
        cases = [c for t in spec["tests"] for c in t.get("alert_rule_test", [])]
        assert {c["alertname"] for c in cases} == {name}, f"{name}.yaml tests other alerts"
        # Each file has a case where the alert fires and one where it must not.
        assert any(c.get("exp_alerts") for c in cases), f"{name}.yaml never expects it to fire"
        assert any(not c.get("exp_alerts") for c in cases), f"{name}.yaml never expects silence"


@pytest.mark.parametrize("alert", ALERTS)
def test_promtool_unit_tests(alert: str, default_rules: Path) -> None:
    test_file = default_rules.parent / f"{alert}.yaml"
    shutil.copyfile(ALERT_TESTS / f"{alert}.yaml", test_file)
    result = run_promtool("test", "rules", test_file.name, cwd=default_rules.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stdout


def test_changed_values_reach_the_rules(tmp_path: Path) -> None:
    promtool()
    extra = {
        "alert": "OrdoTokensBurning",
        "expr": "sum(rate(ordo_tokens_total[5m])) > 1000",
        "labels": {"severity": "info"},
    }
    groups = rendered_groups(
        tmp_path,
        taskFailureRatio=0.5,
        modelErrorRatio=0.2,
        pendingFor="5m",
        alertLabels={"team": "platform"},
        extraRules=[extra],
    )
    rules = write_rules(tmp_path, groups)
    result = run_promtool("check", "rules", rules.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    by_name = {r["alert"]: r for g in groups for r in g["rules"]}
    assert list(by_name) == [*ALERTS, "OrdoTokensBurning"]
    assert by_name["OrdoTokensBurning"] == extra
    for name in ALERTS:
        assert by_name[name]["labels"]["team"] == "platform", name
    assert ") > 0.5\n" in by_name["OrdoTaskFailureRatioHigh"]["expr"]
    assert ") > 0.2\n" in by_name["OrdoModelErrorRatioHigh"]["expr"]
    assert by_name["OrdoTasksPendingTooLong"]["for"] == "5m"


def test_operator_down_names_the_release(tmp_path: Path) -> None:
    promtool()
    docs = helm_template(
        tmp_path, release="ai", namespace="agents", values={"prometheusRule": {"enabled": True}}
    )
    rules = one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
    expr = next(r["expr"] for r in rules if r["alert"] == "OrdoOperatorDown")
    # The job of a ServiceMonitor target is the Service's name: <fullname>-metrics.
    assert 'up{job="ai-ordo-metrics", namespace="agents"}' in expr
    assert 'absent(up{job="ai-ordo-metrics", namespace="agents"})' in expr
