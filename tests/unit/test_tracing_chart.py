"""The chart points the operator (and its Job-mode pods) at an OTLP collector with the
standard OpenTelemetry environment when `tracing.otlpEndpoint` is set, and sets nothing
otherwise. Runs helm (scripts/build-helm): fails in CI, skipped elsewhere without it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.packaging import container, container_env, helm_template, one

from ordo.runtime.tracing import settings_from_env

pytestmark = pytest.mark.services


def test_tracing_values_set_the_otel_environment(tmp_path: Path) -> None:
    values = {"tracing": {"otlpEndpoint": "http://collector.obs:4318", "serviceName": "ordo-x"}}
    deployment = one(helm_template(tmp_path, values=values), "Deployment")
    env = container_env(deployment)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector.obs:4318"
    assert env["OTEL_SERVICE_NAME"] == "ordo-x"
    assert (
        "--job-env=OTEL_EXPORTER_OTLP_ENDPOINT=http://collector.obs:4318"
        in container(deployment)["args"]
    )
    # What the operator makes of that environment: OTLP/HTTP to the collector's traces path.
    settings = settings_from_env(env, service_name="ordo-operator")
    assert (settings.exporter, settings.endpoint, settings.service_name) == (
        "otlp",
        "http://collector.obs:4318/v1/traces",
        "ordo-x",
    )


def test_no_tracing_values_no_otel_environment(tmp_path: Path) -> None:
    deployment = one(helm_template(tmp_path), "Deployment")
    assert not [k for k in container_env(deployment) if k.startswith("OTEL_")]
    assert not [a for a in container(deployment)["args"] if "OTEL_" in a]
    assert settings_from_env(container_env(deployment), service_name="o").exporter == "none"
