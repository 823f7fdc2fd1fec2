"""A governed MCP server on stdio, for the subprocess test (``python -m`` this).

Pattern: a script module: build one ``mcp_serve`` result, serve it on stdio.
Role:    started by ``test_stdio.py`` as ``sys.executable -m
         tests.unit.gateway.stdio_server``.
Emits:   nothing beyond the server's own stream (in this process's memory).

Laws: S1, S2 (the stamp link writes the serving ``tool_call_id`` and
``tool_source`` into the result the client reads), S4 (the refusal link).

Why a module and not a string of code: ``-m`` keeps the server importable and
linted like any other file.
"""

from __future__ import annotations

import asyncio
from typing import Any

from helmlog import Tool, ToolMiddleware, allow, deny
from helmlog.gateway import mcp_serve


def _stamp(r: Any) -> Any:
    return allow(f"{r.result} [{r.tool_call_id} from {r.tool_source}]", "stamp")


def _no_zero(c: Any) -> Any:
    return deny("zero is not a word") if c.args.get("word") == "zero" else allow()


ECHO = Tool(
    "echo",
    "Echo a word.",
    {
        "type": "object",
        "properties": {"word": {"type": "string"}},
        "required": ["word"],
    },
    lambda word: word.upper(),
    "upstream",
)

SERVED = mcp_serve(
    [ECHO],
    name="echoes",
    tool_middleware=[
        ToolMiddleware(name="no-zero", on_tool_call=_no_zero),
        ToolMiddleware(name="stamp", on_tool_result=_stamp),
    ],
)

if __name__ == "__main__":
    asyncio.run(SERVED.serve_stdio())
