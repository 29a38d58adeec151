"""The Task lifecycle: the scheduler (one job per Task), claims and leases, the runner, checkpoints and coalesced writes, the status writer, approvals, retention."""
