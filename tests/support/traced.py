"""The manifest set of the tracing tests: a ModelEndpoint (given), a mock Tool `lookup`, an
Agent `researcher` and a Task `traced` with an `ordo.dev/traceparent` annotation, with a
canary in the prompt, the input and the tool result (the model's script adds arguments and
answer)."""

from __future__ import annotations

AGENT_AND_TASK = """
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: lookup}}
spec:
  type: mock
  description: Looks things up.
  inputSchema:
    type: object
    properties: {{query: {{type: string}}}}
  mock:
    result: {{found: "{canary}-result"}}
  idempotent: true
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: researcher}}
spec:
  modelRef: model
  prompt: "{canary}-prompt"
  tools: [lookup]
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata:
  name: traced
  annotations:
    ordo.dev/traceparent: 00-{trace_id}-{parent}-01
spec:
  agentRef: researcher
  input: "{canary}-input"
"""


def traced_set(endpoint: str, *, canary: str, trace_id: str, parent: str) -> str:
    """`endpoint` (a ModelEndpoint named `model`, YAML) plus the rest of the set."""
    rest = AGENT_AND_TASK.format(canary=canary, trace_id=trace_id, parent=parent)
    return endpoint.strip() + "\n---" + rest
