"""Prometheus metrics. Labels are namespaces, agent/tool/model names and outcomes: never
task names, ids or content. Every label value is bounded by objects, not by a model: the
`tool` label is the name of a tool the run offers, or `<not-offered>` (engine/events.py's
NOT_OFFERED_TOOL) for any name a model invented."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from ...api.triggers import TriggerOutcome
from ...engine.events import (
    NOT_OFFERED_TOOL,
    Event,
    GuardrailFired,
    ModelResponded,
    RunFinished,
    ToolDecided,
    ToolFinished,
    ToolRuleEvaluated,
)

SCHEDULE_OUTCOMES: tuple[TriggerOutcome, ...] = (
    "created",
    "duplicate",
    "skipped",
    "replaced",
    "missed",
    "invalid",
    "failed",
)
"""The outcomes a TaskSchedule counts in ordo_trigger_tasks_total (docs/triggers.md)."""


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # No `_created` series (process-global): they double the series and nothing reads them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.tasks = Counter(
            "ordo_tasks_total",
            "Tasks that reached a terminal phase.",
            ["namespace", "agent", "phase", "reason"],
            registry=r,
        )
        self.task_duration = Histogram(
            "ordo_task_duration_seconds",
            "Time from claim to terminal phase.",
            ["namespace", "agent"],
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
            registry=r,
        )
        self.task_steps = Histogram(
            "ordo_task_steps",
            "Model calls per Task.",
            ["namespace", "agent"],
            buckets=(1, 2, 3, 5, 8, 13, 21, 50, 100),
            registry=r,
        )
        self.model_requests = Counter(
            "ordo_model_requests_total",
            "Model calls by outcome.",
            ["provider", "model", "outcome"],
            registry=r,
        )
        self.model_duration = Histogram(
            "ordo_model_request_duration_seconds",
            "Duration of one model call (including retries).",
            ["provider", "model"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.tokens = Counter(
            "ordo_tokens_total",
            "Tokens used.",
            ["namespace", "agent", "model", "direction"],
            registry=r,
        )
        self.tool_calls = Counter(
            "ordo_tool_calls_total",
            "Tool-call decisions and outcomes.",
            ["tool", "decision", "outcome"],
            registry=r,
        )
        self.guardrail_decisions = Counter(
            "ordo_guardrail_decisions_total",
            "Guardrails that fired, by Guardrail name, point (input, toolArguments, toolResult, "
            "output) and outcome (redacted, denied); checks that allowed are not counted.",
            ["guardrail", "point", "outcome"],
            registry=r,
        )
        self.tool_rule_decisions = Counter(
            "ordo_tool_rule_decisions_total",
            "AgentPolicy toolRules evaluated on tool calls, by namespace, policy, rule, action "
            "(Deny, RequireApproval), mode (Enforce, Audit) and result (matched, notMatched, "
            "error); never argument values.",
            ["namespace", "policy", "rule", "action", "mode", "result"],
            registry=r,
        )
        self.credential_violations = Counter(
            "ordo_credential_violations_total",
            "Secret reads of Tasks that --credential-policy Enforce would refuse (counted under "
            "Warn, which still sends): kind unlabelled (no ordo.dev/credential=true) or host "
            "(not in ordo.dev/allowed-hosts). No Secret or host in the labels.",
            ["kind"],
            registry=r,
        )
        self.running = Gauge("ordo_tasks_running", "Tasks executing now.", registry=r)
        self.pending = Gauge("ordo_tasks_pending", "Tasks waiting for capacity.", registry=r)
        self.awaiting_approval = Gauge(
            "ordo_tasks_awaiting_approval",
            "Tasks waiting for a human decision on a tool call (they hold no slot).",
            registry=r,
        )
        self.awaiting_children = Gauge(
            "ordo_tasks_awaiting_children",
            "Parent Tasks waiting for their child Tasks to end (they hold no slot).",
            registry=r,
        )
        self.jobs_running = Gauge(
            "ordo_task_jobs_running",
            "Tasks executing in Job mode (a batch/v1 Job each) that this process supervises; "
            "they are also counted in ordo_tasks_running.",
            registry=r,
        )
        self.tasks_deleted = Counter(
            "ordo_tasks_deleted_total",
            "Finished Tasks the operator deleted after their TTL (ttlSecondsAfterFinished, "
            "--task-ttl).",
            ["namespace"],
            registry=r,
        )
        self.trigger_tasks = Counter(
            "ordo_trigger_tasks_total",
            "What the triggers did per occasion (docs/triggers.md): kind TaskSchedule here "
            "(the gateway counts TaskWebhook); outcome created, duplicate, skipped, replaced, "
            "missed, invalid or failed.",
            ["kind", "outcome"],
            registry=r,
        )
        for outcome in SCHEDULE_OUTCOMES:  # zero from the start: rates and alerts see them
            self.trigger_tasks.labels("TaskSchedule", outcome)
        self.kube_requests = Counter(
            "ordo_kube_api_requests_total",
            "Requests ordo's own client made to the Kubernetes API (kopf's watches excluded).",
            ["verb"],
            registry=r,
        )

        # -- the watch-fed cache (operator/kube/cache.py) --
        self.cache_synced = Gauge(
            "ordo_cache_synced",
            "1 when the operator's cache of this kind is synced in every watched namespace "
            "(Tasks wait and /readyz fails while it is 0).",
            ["kind"],
            registry=r,
        )
        self.cache_watch_restarts = Counter(
            "ordo_cache_watch_restarts_total",
            "Restarts of the cache's watches: expired (410 Gone, relisted), error (an ERROR "
            "event, relisted), failed (a list or watch request failed or broke; retried).",
            ["kind", "reason"],
            registry=r,
        )

        # -- delegation (operator/tasks/children.py): child Tasks, by what became of the ask --
        self.delegations = Counter(
            "ordo_delegations_total",
            "Calls of agent Tools (delegations to a child Task) by outcome: created (a child "
            "Task was created), found (an existing child was found again, e.g. on resume), "
            "cycle and depth (refused before any child: DelegationCycle, "
            "DelegationDepthExceeded), notOwned (a Task of the child's name not owned by the "
            "parent: ChildNotOwned), vanished (a recorded child was gone: ChildVanished).",
            ["namespace", "outcome"],
            registry=r,
        )

        # -- claims (operator/tasks/claim.py): what replicas on the same namespaces lose to each other --
        self.claims = Counter(
            "ordo_task_claims_total",
            "Claims of a Task for an execution by outcome: claimed (this process runs it), lost "
            "(another process claimed or ended it first), held (another process holds its "
            "execution lease).",
            ["outcome"],
            registry=r,
        )

        # -- worker processes (operator/workers/) and the control loop ----------------------
        self.workers = Gauge(
            "ordo_workers", "Worker processes running now (--workers).", registry=r
        )
        self.worker_restarts = Counter(
            "ordo_worker_restarts_total",
            "Worker processes replaced, by why: stalled (its loop did not answer the heartbeat "
            "for --worker-stall-seconds, killed) or exited (died by itself, or broke the "
            "pipe protocol).",
            ["reason"],
            registry=r,
        )
        self.loop_stall = Histogram(
            "ordo_event_loop_stall_seconds",
            "How late the control process's event loop ran a 0.1 s tick: the longest time "
            "the watches, leases and health checks waited for it.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )

    def listener(self, namespace: str, agent: str, provider: str, model: str) -> RunMetrics:
        return RunMetrics(self, namespace, agent, provider, model)


class RunMetrics:
    """Engine-event listener for one run."""

    def __init__(
        self, metrics: Metrics, namespace: str, agent: str, provider: str, model: str
    ) -> None:
        self.m, self.namespace, self.agent, self.provider, self.model = (
            metrics,
            namespace,
            agent,
            provider,
            model,
        )

    async def __call__(self, event: Event) -> None:
        m = self.m
        if isinstance(event, ModelResponded):
            m.model_requests.labels(self.provider, self.model, "success").inc()
            m.model_duration.labels(self.provider, self.model).observe(event.duration)
            m.tokens.labels(self.namespace, self.agent, self.model, "input").inc(
                event.usage.input_tokens
            )
            m.tokens.labels(self.namespace, self.agent, self.model, "output").inc(
                event.usage.output_tokens
            )
        elif isinstance(event, ToolDecided):
            r = event.record
            if r.decision != "allowed":
                m.tool_calls.labels(_tool_label(r.tool), r.decision, "skipped").inc()
                refused = _DELEGATION_REFUSALS.get(r.reason.partition(":")[0])
                if refused is not None:
                    m.delegations.labels(self.namespace, refused).inc()
        elif isinstance(event, ToolRuleEvaluated):  # object names and enums only
            m.tool_rule_decisions.labels(
                self.namespace, event.policy, event.rule, event.action, event.mode, event.result
            ).inc()
        elif isinstance(event, ToolFinished):
            m.tool_calls.labels(_tool_label(event.tool), "allowed", event.outcome).inc()
        elif isinstance(event, GuardrailFired):
            g = event.record  # a Guardrail object's name (resolved), a point, an action
            m.guardrail_decisions.labels(g.guardrail, g.point, g.action).inc()
        elif isinstance(event, RunFinished) and event.result.reason in (
            "ModelError",
            "ModelUnavailable",
        ):
            m.model_requests.labels(self.provider, self.model, "error").inc()


_DELEGATION_REFUSALS = {"DelegationCycle": "cycle", "DelegationDepthExceeded": "depth"}
"""A tool decision's reason (before its `:`) that refused a delegation -> its outcome label."""
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _tool_label(name: str) -> str:
    """The `tool` label of an event's tool name. Events name offered tools only (anything else
    is NOT_OFFERED_TOOL already); a name outside the tool-name alphabet is counted as not
    offered too, so no listener bug can turn model output into a series."""
    return name if name == NOT_OFFERED_TOOL or _TOOL_NAME.fullmatch(name) else NOT_OFFERED_TOOL
