"""Structured content through the proxy: transformed consistently or refused.

Pattern: a real FastMCP 4 upstream (``fastmcp_upstream.py``: a tool that
         returns a pydantic model) as a stdio and a Streamable HTTP
         subprocess; the proxy in this process with governance links or a
         layer; real clients in front: the ``mcp`` 2.x ``Client`` (its
         default era and the handshake) and FastMCP 4's ``Client``, which
         both check a result against the advertised ``outputSchema``.
Role:    tests of ``gateway/proxy/_outputs.py`` and ``_governance.py``'s
         structured view (issue 26 item 3).
Emits:   nothing.

Laws: P27 (a result never breaks the advertised schema: a transform
rewrites ``structuredContent`` or the call is refused, ``OUTPUT_SCHEMA``
recorded in the audit), P14, S9 (the same rule as ``mcp_serve``'s), G43.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import fastmcp
import mcp.types as types
import pytest
from mcp import Client

from helmlog.events import MemoryEventStore, ProxyCallFinished
from helmlog.gateway import McpProxy, ProxyAudit

from .fastmcp_upstream import AS_TEXT, SCRUB
from .http_helpers import free_port

STDIO = [sys.executable, "-m", "tests.unit.gateway.fastmcp_upstream"]
MASKED = {"name": "Ann", "ssn": "***-**-****", "tier": "gold"}


@contextlib.contextmanager
def _http_upstream() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [*STDIO, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the FastMCP 4 upstream did not start") from None
                time.sleep(0.05)  # a port poll, bounded by the deadline
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def _upstream(kind: str) -> Iterator[Any]:
    if kind == "stdio":
        yield STDIO
    else:
        with _http_upstream() as url:
            yield url


@asynccontextmanager
async def _served(
    kind: str, **options: Any
) -> AsyncIterator[tuple[str, list[Any], McpProxy]]:
    """The proxy in front of the FastMCP 4 upstream over ``kind``, on HTTP."""
    events: list[Any] = []
    store = MemoryEventStore()
    with _upstream(kind) as target:
        proxy = McpProxy(
            target,
            audit=ProxyAudit(b"secret", "k1", store),
            on_event=events.append,
            **options,
        )
        async with proxy, proxy.http_server() as url:
            yield url, events, proxy


def _finished(events: list[Any]) -> list[tuple[str, str, str | None]]:
    return [
        (e.tool, e.outcome, e.rejection_reason)
        for e in events
        if isinstance(e, ProxyCallFinished)
    ]


CLIENTS = ["mcp", "mcp-legacy", "fastmcp"]


async def _call(client: str, url: str, name: str, args: dict[str, Any]) -> Any:
    """``(is_error, structured_content, text)`` as the real client reads it."""
    if client == "fastmcp":
        async with fastmcp.Client(url) as fc:
            out = await fc.call_tool(name, args, raise_on_error=False)
    else:
        mode = "legacy" if client == "mcp-legacy" else "auto"
        async with Client(url, mode=mode) as mc:  # type: ignore[arg-type]
            out = await mc.call_tool(name, args)
    text = "\n".join(b.text for b in out.content if isinstance(b, types.TextContent))
    return out.is_error, out.structured_content, text


@pytest.mark.parametrize("kind", ["stdio", "http"])
@pytest.mark.parametrize("client", CLIENTS)
async def test_p27_a_transform_rewrites_structured_content_consistently(
    kind: str, client: str
) -> None:
    """P27, P14: a PII scrub sees the model's object and returns the new one;
    every client gets structured content valid for the schema, masked, and
    the same value as the text (its compact JSON)."""
    async with _served(kind, governance=[SCRUB]) as (url, events, _):
        failed, structured, text = await _call(client, url, "customer", {"name": "Ann"})
        _, greeting, greet_text = await _call(client, url, "greet", {"name": "Bo"})
    assert (False, MASKED) == (failed, structured)
    assert '{"name":"Ann","ssn":"***-**-****","tier":"gold"}' == text
    assert {"result": "hello Bo, ssn ***-**-****"} == greeting
    assert "hello Bo, ssn ***-**-****" == greet_text
    assert [("customer", "success", None), ("greet", "success", None)] == _finished(
        events
    )


@pytest.mark.parametrize("kind", ["stdio", "http"])
@pytest.mark.parametrize("client", CLIENTS)
async def test_p27_a_transform_that_breaks_the_schema_is_refused_on_the_record(
    kind: str, client: str
) -> None:
    """P27, G43: a link that turns the model into text would break the
    advertised schema: the client gets a tool error naming the schema's
    expectation (no value), and the audit records OUTPUT_SCHEMA."""
    async with _served(kind, governance=[AS_TEXT]) as (url, events, _):
        failed, structured, text = await _call(client, url, "customer", {"name": "Ann"})
    assert (True, None) == (failed, structured)
    assert text.startswith(
        "The result of tool 'customer' was withheld: as changed by middleware"
        " 'as-text', it does not match the tool's output schema (at the root,"
    )
    assert "123-45-6789" not in text and "Ann" not in text
    assert [("customer", "rejected", "OUTPUT_SCHEMA")] == _finished(events)


async def _drop_structured(req: Any, next: Any, ctx: Any) -> Any:
    """A layer as the issue found them: it rewrites the text, drops the rest."""
    out = await next(req)
    text = "\n".join(b.text for b in out.content if isinstance(b, types.TextContent))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


@pytest.mark.parametrize("client", CLIENTS)
async def test_p27_a_layer_that_drops_structured_content_is_refused_not_relayed(
    client: str,
) -> None:
    """P27 (the reported failure): a layer that drops ``structuredContent`` of
    a tool with an ``outputSchema`` no longer reaches the client as a result
    it rejects ("... did not return structured content"): it is refused."""
    async with _served("http", tool_middleware=[_drop_structured]) as (url, events, _):
        failed, structured, text = await _call(client, url, "customer", {"name": "Ann"})
    assert (True, None) == (failed, structured)
    assert "does not match the tool's output schema" in text
    assert [("customer", "rejected", "OUTPUT_SCHEMA")] == _finished(events)


async def test_p27_an_untouched_structured_result_passes_on_every_path() -> None:
    """P27, P25: with no rule, the model's structured content reaches the
    client as the upstream sent it, on the JSON path and the model path."""
    async with _served("http") as (url, events, proxy):
        for fast in (True, False):
            proxy.fast_calls = fast
            async with Client(url) as mc:
                out = await mc.call_tool("customer", {"name": "Ann"})
            assert {"name": "Ann", "ssn": "123-45-6789", "tier": "gold"} == (
                out.structured_content
            )
    assert [("customer", "success", None)] * 2 == _finished(events)
