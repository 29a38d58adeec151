"""The first two items of a run's history: the system prompt and the user message."""

from __future__ import annotations

from ..api import Task
from ..engine import output as output_mod
from .snapshot import Snapshot


def system_prompt(snapshot: Snapshot) -> str:
    """Agent prompt, then the skill's instructions, then the output-schema instruction."""
    parts = [snapshot.agent.spec.prompt or "You are a helpful agent."]
    if snapshot.skill is not None and snapshot.skill.instructions:
        parts.append(snapshot.skill.instructions)
    if snapshot.output_schema is not None:
        parts.append(output_mod.instruction(snapshot.output_schema))
    return "\n\n".join(parts)


def user_message(task: Task) -> str:
    """The Task's input, then its instructions."""
    text = task.input_text()
    if task.spec.instructions:
        text = f"{text}\n\n{task.spec.instructions}" if text else task.spec.instructions
    return text
