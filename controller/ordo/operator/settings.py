"""The operator's settings: what `ordo operator` flags set, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..api.agent import ExecutionMode
from .jobmode.spec import JobSettings
from .tasks.references import DEFAULT_GRACE_SECONDS


@dataclass
class SchedulerSettings:
    max_concurrent_tasks: int = 10
    """Tasks executing at once in this process; the rest wait Pending."""
    keep_checkpoints: bool = False
    """Keep the checkpoint ConfigMap after a Task ends (for debugging / replay)."""
    lease_seconds: float = 30.0
    """Execution lease duration: how long after a crash another process may resume a Task."""
    default_execution_mode: ExecutionMode = "InProcess"
    """Where Tasks run whose Agent names no `spec.execution.mode`."""
    job: JobSettings = field(default_factory=JobSettings)
    """How Job-mode pods are built (image, ServiceAccount, resources, deadlines)."""
    job_poll_seconds: float = 5.0
    """How often a supervised Job is re-read when no watch event arrives."""
    job_cancel_grace_seconds: float = 30.0
    """How long a cancelled Job-mode run may take to stop by itself before its Job is deleted."""
    reference_grace_seconds: float = DEFAULT_GRACE_SECONDS
    """How long a Task whose references are missing waits Pending before it fails."""
    approval_timeout: float | None = None
    """Seconds a tool call waits for a human decision (None: 24h; `--approval-timeout`)."""
