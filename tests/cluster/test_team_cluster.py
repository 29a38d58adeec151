"""Teams in a cluster (issue 27 part 5): the operator (a subprocess) runs a Sequential and a
Parallel Team over the OpenAI wire with `--max-concurrent-tasks 1` (the Team Task waits for
its members without holding the one slot), and a SIGKILL of the operator while a member runs
ends with exactly one child Task per member."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cluster.test_operator_wire import KEY, endpoint, secret
from tests.support.openai_server import OpenAIServer
from tests.support.operator import OperatorProcess, apply, get_json, tasks, wait_for, wait_task
from tests.support.teams import MEMBERS, team_objects, team_task

from ordo.runtime.delegation import PARENT_LABEL
from ordo_devcluster import ControlPlane


def _children(cp: ControlPlane, ns: str, parent: str) -> list[dict[str, Any]]:
    return [
        t for t in tasks(cp, ns) if (t["metadata"].get("labels") or {}).get(PARENT_LABEL) == parent
    ]


def _apply_all(cp: ControlPlane, ns: str, docs: list[str]) -> None:
    apply(cp, ns, "\n---\n".join(docs))


def _setup(cp: ControlPlane, ns: str, model: OpenAIServer) -> None:
    docs = [json.dumps(d) for d in team_objects({"timeout": "120s", "maxTokens": 100000})]
    _apply_all(cp, ns, [secret(ns), endpoint("openai", model.url + "/v1"), *docs])


def _team_task(name: str, team: str, text: str) -> str:
    return json.dumps(team_task(name, team, text))


def test_sequential_and_parallel_teams_succeed_with_one_slot(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    op = OperatorProcess(control_plane, namespace, tmp_path, "--max-concurrent-tasks", "1")
    op.start()
    try:
        with OpenAIServer(None, fallback={"auto": True}, require_key=KEY) as model:
            _setup(control_plane, namespace, model)
            _apply_all(
                control_plane,
                namespace,
                [
                    _team_task("write", "article", "write about ordo"),
                    _team_task("review", "review", "adopt ordo?"),
                ],
            )
            for name, members in MEMBERS.items():
                status = wait_task(control_plane, namespace, name, timeout=120)["status"]
                assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
                children = _children(control_plane, namespace, name)
                assert len(children) == len(members)  # one child per member (and aggregator)
                by_name = {c["metadata"]["name"]: c for c in children}
                listed = status["children"]
                assert {c["name"] for c in listed} == set(by_name)
                assert all(c["phase"] == "Succeeded" for c in listed)
                tokens = sum(c["status"]["usage"]["totalTokens"] for c in children)
                assert status["usage"]["totalTokens"] == tokens > 0  # the children's, summed
                final = by_name[listed[-1]["name"]]["status"]
                assert status["output"] == final["output"]
            write = get_json(control_plane, "task", "write", "-n", namespace)["status"]
            assert write["structuredOutput"] == {"title": json.loads(write["output"])["title"]}
            assert [c.get("member") for c in write["children"]] == MEMBERS["write"]
            review = get_json(control_plane, "task", "review", "-n", namespace)["status"]
            assert [c.get("member") for c in review["children"]] == MEMBERS["review"]
            # The judge got every member's answer, by member name, as one JSON object.
            texts = [model.user_text(b) for b in model.bodies if isinstance(b, dict)]
            judged = [t for t in texts if '"against"' in t and '"for"' in t]
            assert len(judged) == 1
    finally:
        op.stop()


def test_sigkill_while_a_member_runs_ends_with_one_child_per_member(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    op = OperatorProcess(control_plane, namespace, tmp_path, "--max-concurrent-tasks", "1")
    op.start()
    script = {"kill-marker": [{"delay": 4.0, "text": "draft one"}, {"text": "draft one"}]}
    try:
        with OpenAIServer(script, fallback={"auto": True}, require_key=KEY) as model:
            _setup(control_plane, namespace, model)
            _apply_all(control_plane, namespace, [_team_task("write", "article", "kill-marker")])
            wait_for(lambda: model.count >= 1, 60, interval=0.05, what="the first member's call")
            op.kill()
            assert len(_children(control_plane, namespace, "write")) == 1
            op.start()
            status = wait_task(control_plane, namespace, "write", timeout=120)["status"]
            assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
            children = _children(control_plane, namespace, "write")
            assert len(children) == 2  # exactly one per member, across the restart
            assert all(c["status"]["phase"] == "Succeeded" for c in children)
    finally:
        op.stop()


def test_a_failed_member_fails_the_team_child_failed(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    op = OperatorProcess(control_plane, namespace, tmp_path).start()
    script = {
        "BREAK-HERE": [{"status": 400, "error": {"message": "scripted refusal"}}],
        "fail-marker": [{"text": "BREAK-HERE"}],
    }
    try:
        with OpenAIServer(script, fallback={"auto": True}, require_key=KEY) as model:
            _setup(control_plane, namespace, model)
            _apply_all(control_plane, namespace, [_team_task("write", "article", "fail-marker")])
            status = wait_task(control_plane, namespace, "write", timeout=120)["status"]
            assert (status["phase"], status["reason"]) == ("Failed", "ChildFailed"), status
            draft, edit = status["children"]
            assert (draft["member"], draft["phase"]) == ("draft", "Succeeded")
            assert (edit["member"], edit["phase"], edit["reason"]) == (
                "edit",
                "Failed",
                "ModelError",
            )
            assert "member 'edit'" in status["message"] and edit["name"] in status["message"]
            assert status["usage"]["totalTokens"] == draft["tokens"] + edit["tokens"]
    finally:
        op.stop()


def test_a_team_task_waits_for_its_team_to_appear(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    op = OperatorProcess(control_plane, namespace, tmp_path).start()
    try:
        with OpenAIServer(None, fallback={"auto": True}, require_key=KEY) as model:
            objects = team_objects()
            agents = [json.dumps(d) for d in objects if d["kind"] == "Agent"]
            _apply_all(
                control_plane,
                namespace,
                [secret(namespace), endpoint("openai", model.url + "/v1"), *agents],
            )
            early = team_task("early", "review", "adopt ordo?")
            early["metadata"]["annotations"] = {"ordo.dev/reference-grace": "90s"}
            _apply_all(control_plane, namespace, [json.dumps(early)])

            def waiting() -> dict[str, Any] | None:
                status = get_json(control_plane, "task", "early", "-n", namespace).get("status")
                ready = [c for c in (status or {}).get("conditions") or [] if c["type"] == "Ready"]
                return ready[0] if ready and ready[0]["reason"] == "WaitingForReferences" else None

            ready = wait_for(waiting, 30, what="the Team Task waiting for its Team")
            assert "Team 'review'" in ready["message"]
            assert _children(control_plane, namespace, "early") == []  # nothing started
            review = [json.dumps(d) for d in objects if d["metadata"]["name"] == "review"]
            _apply_all(control_plane, namespace, review)
            status = wait_task(control_plane, namespace, "early", timeout=90)["status"]
            assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
    finally:
        op.stop()
