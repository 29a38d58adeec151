"""What the operator shows its operators: /healthz, /readyz and /metrics, Prometheus metrics, JSON logs."""
