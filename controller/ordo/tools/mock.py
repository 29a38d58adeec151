"""`type: mock` tools: a canned result, no network (offline examples and tests)."""

from __future__ import annotations

import json
from typing import Any

from ..api.tool import MockToolResult
from ..engine.tooling import ToolFailure, ToolOutput


class MockToolExecutor:
    def __init__(self, spec: MockToolResult | None) -> None:
        self._spec = spec or MockToolResult()
        self.calls = 0

    async def __call__(self, arguments: dict[str, Any]) -> ToolOutput:
        self.calls += 1
        if self._spec.error is not None:
            raise ToolFailure(self._spec.error)
        result = self._spec.result
        if result is None:
            return ToolOutput(json.dumps(arguments, sort_keys=True))
        return ToolOutput(result if isinstance(result, str) else json.dumps(result, sort_keys=True))
