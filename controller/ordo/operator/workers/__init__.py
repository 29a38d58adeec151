"""Runs in worker processes, apart from the control process (issue 25)."""
