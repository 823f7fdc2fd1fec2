"""The MCP proxy on real stdio pipes, lane on or off, for the lane's differential tests.

Pattern: a script module (``python -m`` this): an ``McpProxy`` in front of an
         in-process MCPServer (plain, failing, structured and slow tools),
         with or without one governance rule (a refusal and a rewrite),
         served by ``serve_stdio``; ``--no-lane`` serves the same session
         without the serving lane (the SDK's dispatcher answers every call);
         ``--kernel`` pins the lane to the SDK's kernel (``serve_one`` /
         ``ServerRunner``) instead of its own run of the kernel's steps;
         ``--traced`` sets a tracer provider first (the SERVER spans too).
Role:    started by ``test_proxy_lane.py``; ``--out PATH`` writes, at exit,
         how many calls the lane answered, the audit rows and the spans.
Emits:   nothing beyond the proxy's own records (in this process's memory).

Laws: none itself; P25 and P20 are tested with it.

Why a module and not a string of code: ``-m`` keeps it importable and linted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

from helmlog import ToolMiddleware, allow, deny
from helmlog.events import ProxyCallFinished
from helmlog.gateway import McpProxy, ProxyAudit

UPSTREAM = MCPServer("lane-upstream")


class Record(BaseModel):
    """A structured answer (the tool declares an ``outputSchema``)."""

    name: str
    ssn: str


@UPSTREAM.tool()
def echo(word: str) -> str:
    """Echo a word in capitals."""
    return word.upper()


@UPSTREAM.tool()
def explode() -> str:
    """Always raises (a tool error)."""
    raise RuntimeError("boom")


@UPSTREAM.tool()
def record(name: str) -> Record:
    """A structured record holding an SSN (the rule masks it)."""
    return Record(name=name, ssn="123-45-6789")


@UPSTREAM.tool()
def forbidden() -> str:
    """A tool the rule refuses."""
    return "ran"


@UPSTREAM.tool()
def hidden() -> str:
    """A tool the proxy hides."""
    return "seen"


@UPSTREAM.tool()
async def sleepy(seconds: float) -> str:
    """Sleeps (to be cancelled)."""
    await anyio.sleep(seconds)  # not a wait: a tool that hangs on purpose
    return "woke"


def _refuse(call: Any) -> Any:
    return deny("not this one") if call.tool_name == "forbidden" else allow()


def _mask(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("123-45-6789", "***-**-****")
    if isinstance(value, dict):
        return {k: _mask(v) for k, v in value.items()}
    return value


def _masked(result: Any) -> Any:
    value = _mask(result.result)
    return allow() if value == result.result else allow(value, "an SSN masked")


RULE = ToolMiddleware(name="lane-rule", on_tool_call=_refuse, on_tool_result=_masked)


def _row(e: ProxyCallFinished) -> list[Any]:
    return [
        e.tool,
        e.route,
        e.forwarded_tool,
        e.outcome,
        e.rejection_reason,
        e.input_digest,
        e.output_digest,
        json.dumps(e.output_raw, sort_keys=True),
    ]


def _traced() -> Any:
    """A real tracer provider with an in-memory exporter, set for the process."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def _spans(exporter: Any) -> list[Any]:
    from opentelemetry.trace import SpanKind

    spans = exporter.get_finished_spans()
    return sorted(
        [s.name, str(s.kind), json.dumps(dict(s.attributes or {}), sort_keys=True)]
        for s in spans
        if s.kind == SpanKind.SERVER
    )


async def main(
    lane: bool, rule: bool, out: str, kernel: bool = False, traced: bool = False
) -> None:
    exporter = _traced() if traced else None
    events: list[Any] = []
    options: dict[str, Any] = {
        "hidden_tools": {"hidden"},
        "audit": ProxyAudit(b"the secret", "k1"),
        "sensitivity": lambda tool, identity, args: "low",
        "on_event": events.append,
    }
    if rule:
        options["governance"] = [RULE]
    proxy = McpProxy(UPSTREAM, **options)
    lanes: list[Any] = []
    run = proxy.run

    async def served(read: Any, write: Any, *, lane: Any = None) -> None:
        if lane is not None:
            lanes.append(lane)
            if kernel:
                lane.kernel = True
        await run(read, write, lane=lane if lane_on else None)

    lane_on = lane
    proxy.run = served  # type: ignore[method-assign]
    async with proxy:
        await proxy.serve_stdio()
    answered = sum(x.answered for x in lanes) if lane_on else 0
    rows = sorted(_row(e) for e in events if isinstance(e, ProxyCallFinished))
    spans = [] if exporter is None else _spans(exporter)
    Path(out).write_text(
        json.dumps({"answered": answered, "rows": rows, "spans": spans})
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-lane", action="store_true")
    parser.add_argument("--rule", action="store_true")
    parser.add_argument("--kernel", action="store_true")
    parser.add_argument("--traced", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    asyncio.run(main(not args.no_lane, args.rule, args.out, args.kernel, args.traced))
