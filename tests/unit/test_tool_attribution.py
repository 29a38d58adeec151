"""The audit trail tells a Tool object's call from a built-in's (issue 26 §3): every
`status.toolCalls[]` record names the Tool object the model's name was bound to
(`toolObject`), or is marked `builtin`, whatever the decision."""

from __future__ import annotations

from ordo.api.task import TaskStatus, ToolCallRecord
from ordo.engine.governance import Governance
from ordo.engine.loop import run_agent
from ordo.runtime.status import record_model
from support.engine_fakes import (
    ScriptedModel,
    Toolbox,
    answer,
    call,
    run_config,
    tools_turn,
)


async def test_every_record_names_the_tool_object_or_the_builtin() -> None:
    box = (
        Toolbox()
        .add("web_search", object_name="web.search")
        .add("fetch", object_name="fetch")
        .add("memory_write", builtin=True)
    )
    gov = Governance(
        candidate_tools=frozenset({"web.search", "fetch"}),
        blocked_by={"fetch": "no-fetch"},
        memory="notes",
        memory_operations=frozenset({"write"}),
    )
    model = ScriptedModel(
        [
            tools_turn(
                call("web_search", "c1", q="x"),
                call("memory_write", "c2", key="k", value="v"),
                call("fetch", "c3"),  # bound, denied by a policy
                call("memory_read", "c4", key="k"),  # a built-in's name this run did not bind
                call("invented", "c5"),
            ),
            answer("done"),
        ]
    )
    result = await run_agent(run_config(gov, on_tool_denied="ReturnError"), model, box.bindings)
    assert result.phase == "Succeeded"
    seen = {r.call_id: (r.tool, r.decision, r.tool_object, r.builtin) for r in result.tool_calls}
    assert seen == {
        "c1": ("web_search", "allowed", "web.search", False),
        "c2": ("memory_write", "allowed", None, True),
        "c3": ("fetch", "denied", "fetch", False),
        "c4": ("memory_read", "denied", None, True),
        "c5": ("invented", "denied", None, False),
    }


def test_status_and_checkpoint_show_the_attribution() -> None:
    tool = ToolCallRecord(
        1, "web_search", "allowed", "NoPermissionRequired", "succeeded", "c1", None, "web.search"
    )
    builtin = ToolCallRecord(1, "memory_write", "allowed", "", "succeeded", "c2", builtin=True)
    status = TaskStatus(tool_calls=[record_model(tool), record_model(builtin)])
    shown = status.model_dump(by_alias=True, exclude_none=True, mode="json")["toolCalls"]
    assert shown[0]["toolObject"] == "web.search" and "builtin" not in shown[0]
    assert shown[1]["builtin"] is True and "toolObject" not in shown[1]
    assert TaskStatus.model_validate({"toolCalls": shown}).tool_calls == [tool, builtin]
    for record in (tool, builtin):  # the checkpoint form keeps them too
        assert ToolCallRecord.from_dict(record.to_dict()) == record
    old = {"step": 1, "tool": "x", "decision": "allowed", "reason": ""}  # before the fields
    assert ToolCallRecord.from_dict(old) == ToolCallRecord(1, "x", "allowed", "")
