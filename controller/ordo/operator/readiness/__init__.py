"""`Ready` conditions of the configuration kinds: the reconciler, the verdict of each kind, and a suspended Agent."""
