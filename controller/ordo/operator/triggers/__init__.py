"""The operator's triggers: TaskSchedules (decide.py decides, reconcile.py acts, schedules.py
runs one loop per schedule). TaskWebhooks are the gateway's (ordo.gateway)."""
