"""Tool executors: http, mcp, mock, and the built-in memory tools."""

from __future__ import annotations

from ..api import parse_duration
from ..engine.tooling import ResolvedTool, ToolBinding, ToolExecutor


def build_executor(resolved: ResolvedTool) -> ToolExecutor:
    """The executor of one resolved Tool."""
    spec = resolved.tool.spec
    if spec.type == "mock":
        from .mock import MockToolExecutor

        return MockToolExecutor(spec.mock)
    if spec.type == "http":
        from .http import HttpToolExecutor

        return HttpToolExecutor(resolved)
    if spec.type == "mcp":
        from .mcp import McpToolExecutor

        return McpToolExecutor(resolved)
    raise ValueError(f"unknown tool type {spec.type!r}")


async def binding(resolved: ResolvedTool, executor: ToolExecutor | None = None) -> ToolBinding:
    """The loop's view of one resolved Tool. An executor with an async `describe()` (mcp)
    supplies the description and schema the Tool does not set."""
    spec = resolved.tool.spec
    executor = executor or build_executor(resolved)
    description = spec.description or ""
    parameters = spec.input_schema
    describe = getattr(executor, "describe", None)
    if describe is not None and (parameters is None or not description):
        remote_description, remote_schema = await describe()
        description = description or remote_description
        parameters = parameters if parameters is not None else remote_schema
    return ToolBinding(
        name=resolved.model_name,
        object_name=resolved.tool.name,
        description=description,
        parameters=parameters or {"type": "object", "properties": {}},
        executor=executor,
        idempotent=spec.idempotent,
        timeout=parse_duration(spec.timeout),
    )
