"""Execution mode `Job`: which mode a Task runs in, the batch/v1 Job built for it, its supervision and failure verdicts, and the pod-side runner (`ordo run-task`)."""
