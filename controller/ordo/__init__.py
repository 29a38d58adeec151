"""ordo: run governed LLM agents declared as Kubernetes custom resources."""

__version__ = "0.1.0"
