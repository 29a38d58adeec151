"""What the operator adds to a Team Task's run (runtime/team.py): no model, and no state to
resume (its children are its state: a resumed run asks for the same children again and finds
them); a `KubeDelegator` that creates the members' child Tasks, and the operator's depth
limit. A resumed run takes over the checkpoint its parking wrote (runner.py writes one when a
run stops `AwaitingChildren`; taking it over fences any earlier execution's writes, and the
next parking writes it again) without reading anything from it, and clears its
`AwaitingChildren` condition, as an Agent's run does."""

from __future__ import annotations

from typing import Any

from ...runtime import Prepared
from ...runtime.team import TeamRun
from ..telemetry.metrics import Metrics
from . import childwait, taskstatus
from .checkpoint import CheckpointStore
from .children import KubeDelegator
from .claim import Claim
from .writer import TaskWriter


async def prepared(
    team: TeamRun,
    claim: Claim,
    body: dict[str, Any],
    writer: TaskWriter,
    metrics: Metrics,
    max_depth: int | None,
    checkpoints: CheckpointStore,
) -> Prepared:
    task, execution_id = team.task, claim.execution_id
    if claim.resuming:
        await checkpoints.load()
    if claim.resuming and childwait.awaiting_children(body):
        fields = childwait.resumed_fields(body["status"].get("conditions"))
        await taskstatus.fenced(writer.client, task.namespace, task.name, execution_id, fields)
        body["status"].update(fields)
    spec = team.team.spec
    await writer.recorder.post(
        body,
        "Resumed" if claim.resuming else "Started",
        f"execution {execution_id} {'resumed' if claim.resuming else 'started'} "
        f"(team {team.team.name}, {spec.strategy}, {len(spec.members)} member(s))",
    )
    return Prepared(
        delegator=KubeDelegator(writer.client, body, team.lineage, metrics, writer.recorder),
        max_delegation_depth=max_depth,
    )
