"""The HTTP proxy in a process with a tracer provider: the spans of one call.

Pattern: a script module (``python -m`` this ``UPSTREAM_URL``): sets a real
         OpenTelemetry SDK tracer provider (in-memory exporter), then posts
         one plain 2026-07-28 ``tools/call`` to an ``McpProxy`` served on
         uvicorn, lane on, then lane off; prints one JSON line each: how many
         calls the lane answered, the answer's text, and the SERVER spans
         (name, kind, attributes).
Role:    started by ``test_proxy_lane_http.py`` (a tracer provider is set
         once per process, so not in the test process).
Emits:   nothing beyond its output.

Laws: none itself; P25 (the SDK's span kept on the lane) is tested with it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx2
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind

from helmlog.gateway import McpProxy
from helmlog.gateway._uvicorn import Server, server_config, serving

EXPORTER = InMemorySpanExporter()
VERSION = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
}
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": VERSION,
    "mcp-method": "tools/call",
    "mcp-name": "echo",
}


async def _one(upstream: str, fast: bool) -> dict[str, Any]:
    EXPORTER.clear()
    proxy = McpProxy(upstream)
    proxy.fast_calls = fast
    params = {"name": "echo", "arguments": {"word": "hi"}, "_meta": ENVELOPE}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    async with proxy:
        app = proxy.http_app()
        server = Server(server_config(app, host="127.0.0.1", port=0))
        async with (
            serving(server, name="the traced proxy") as port,
            httpx2.AsyncClient(timeout=30) as http,
        ):
            answer = await http.post(
                f"http://127.0.0.1:{port}/mcp", json=body, headers=HEADERS
            )
    spans = [
        [s.name, str(s.kind), dict(s.attributes or {})]
        for s in EXPORTER.get_finished_spans()
        if s.kind == SpanKind.SERVER
    ]
    text = answer.json()["result"]["content"][0]["text"]
    return {"answered": app.lane.answered, "text": text, "spans": spans}


async def main(upstream: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)
    for fast in (True, False):
        print(json.dumps(await _one(upstream, fast)), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
