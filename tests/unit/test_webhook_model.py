"""The TaskWebhook model (api/taskwebhook.py): what `ordo validate` refuses beyond the CRD (a
template `input`, which CEL cannot name), and the defaults the gateway reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from ordo.api import manifests
from ordo.api.taskwebhook import TaskWebhook
from ordo.cli import main as cli


def hook(**spec: Any) -> dict[str, Any]:
    auth = {"profile": "GitHub", "secretRef": {"name": "s", "key": "k"}}
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "TaskWebhook",
        "metadata": {"name": "w"},
        "spec": {"auth": auth, "taskTemplate": {"spec": {"agentRef": "a"}}, **spec},
    }


def test_a_template_input_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = hook(taskTemplate={"spec": {"agentRef": "a", "input": "fixed"}})
    with pytest.raises(ValidationError, match=r"spec\.taskTemplate\.spec\.input is set from each"):
        TaskWebhook.model_validate(body)
    path = tmp_path / "hook.yaml"
    path.write_text(yaml.safe_dump(body))
    assert [p.field for p in manifests.load([str(path)]).problems] == ["spec.taskTemplate"]
    assert cli.main(["validate", "-f", str(path)]) == 1
    assert "remove it" in capsys.readouterr().err


def test_defaults() -> None:
    github = TaskWebhook.model_validate(hook()).spec
    assert github.dedupe_header == "X-GitHub-Delivery"
    assert (github.body_limit, github.depth_limit) == (65536, 20)
    hmac = TaskWebhook.model_validate(
        hook(auth={"profile": "HMAC", "secretRef": {"name": "s", "key": "k"}})
    ).spec
    assert hmac.dedupe_header is None  # keyed by its signature
    custom = TaskWebhook.model_validate(hook(dedupe={"header": "X-Request-Id"})).spec
    assert custom.dedupe_header == "X-Request-Id"


def test_a_template_that_names_no_agent_or_team_is_refused() -> None:
    with pytest.raises(ValidationError):
        TaskWebhook.model_validate(hook(taskTemplate={"spec": {}}))
