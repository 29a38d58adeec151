"""The ordo operator: kopf handlers, Task scheduling, status, Events, metrics and health."""
