"""The `ordo` command line: `ordo run` (local), `ordo invoke`, approvals, and the entry points of the operator and the Job pod."""
