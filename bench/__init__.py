"""ordo benchmarks (see bench/README.md)."""
