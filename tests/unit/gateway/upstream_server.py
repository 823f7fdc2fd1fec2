"""A real upstream MCP server (the SDK's MCPServer) for the proxy's tests.

Pattern: a script module: one MCPServer (v1's FastMCP) with ordinary,
         destructive, failing and slow tools, public and secret resources,
         and a prompt.
Role:    the proxy's upstream in ``test_proxy_*.py``: in process (``UPSTREAM``
         itself), as a stdio subprocess (``python -m`` this) and over
         Streamable HTTP (``python -m`` this ``--http PORT``; with
         ``--resumable``, a server that cuts its own reply stream; with
         ``--json``, one that answers with JSON bodies; with
         ``--subscribing``, ``subscribing()``).
Emits:   nothing.

Laws: none itself; it is the server the P laws are tested against.

Why the SDK's server and not a helmlog one: the proxy must stand in front of
servers it did not write (issue 10), and FastMCP is what most of them use.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any
from urllib.parse import urlparse

import anyio
import mcp.types as types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

UPSTREAM = MCPServer("upstream")
CALLS: list[str] = []
CANCELLED: list[str] = []
GATES: list[anyio.Event] = []  # a test puts one here; ``gated`` waits on it


@UPSTREAM.tool()
def echo(word: str) -> str:
    """Echo a word in capitals."""
    CALLS.append("echo")
    return word.upper()


@UPSTREAM.tool()
def delete_everything() -> str:
    """A destructive tool the proxy hides."""
    CALLS.append("delete_everything")
    return "deleted"


@UPSTREAM.tool()
def lookup_customer(name: str) -> str:
    """Returns a record with an SSN in it."""
    CALLS.append("lookup_customer")
    return f"{name}: ssn 123-45-6789"


@UPSTREAM.tool()
def refund(amount: float) -> str:
    """Refund an amount."""
    CALLS.append("refund")
    return f"refunded {amount}"


@UPSTREAM.tool()
def explode() -> str:
    """Always raises."""
    CALLS.append("explode")
    raise RuntimeError("boom")


@UPSTREAM.tool()
async def slow(steps: int, ctx: Context[Any, Any]) -> str:
    """Reports progress, then answers."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    return f"done {steps}"


@UPSTREAM.tool()
async def sleepy(seconds: float) -> str:
    """Sleeps (to be cancelled)."""
    await anyio.sleep(seconds)  # not a wait: a tool that hangs on purpose
    return "woke"


@UPSTREAM.tool()
async def sleepy_noted(seconds: float) -> str:
    """Sleeps; notes in ``CANCELLED`` that it was cancelled, if it is."""
    CALLS.append("sleepy_noted")
    try:
        await anyio.sleep(seconds)  # not a wait: a tool that hangs on purpose
    except anyio.get_cancelled_exc_class():
        CANCELLED.append("sleepy_noted")
        raise
    return "woke"


@UPSTREAM.tool()
async def sleepy_marked(seconds: float, mark: str) -> str:
    """Sleeps; writes ``cancelled`` to the file ``mark`` if it is cancelled."""
    try:
        await anyio.sleep(seconds)  # not a wait: a tool that hangs on purpose
    except anyio.get_cancelled_exc_class():
        with open(mark, "w") as out:  # seen by a test in another process
            out.write("cancelled")
        raise
    return "woke"


@UPSTREAM.tool()
async def sleepy_started(seconds: float, mark: str) -> str:
    """Writes ``started`` to the file ``mark``, then sleeps (to be cut off)."""
    with open(mark, "w") as out:  # seen by a test in another process
        out.write("started")
    await anyio.sleep(seconds)  # not a wait: a tool that hangs on purpose
    return "woke"


@UPSTREAM.tool()
def tally(mark: str) -> str:
    """Appends a line to the file ``mark``; answers how many it holds (a test
    in another process counts how often the tool ran)."""
    with open(mark, "a") as out:
        out.write("ran\n")
    with open(mark) as done:
        return str(len(done.readlines()))


@UPSTREAM.tool()
async def gated(ctx: Context[Any, Any]) -> str:
    """Reports progress, waits for the test's gate, reports again, answers."""
    await ctx.report_progress(1, 2, "before the gate")
    await GATES[-1].wait()
    await ctx.report_progress(2, 2, "after the gate")
    return "released"


@UPSTREAM.tool()
async def announce(ctx: Context[Any, Any]) -> str:
    """Tells the client the tool list changed."""
    await ctx.session.send_tool_list_changed()
    return "announced"


@UPSTREAM.tool()
async def announce_changed(ctx: Context[Any, Any]) -> str:
    """Publishes a tools list change (reaches ``subscriptions/listen`` only)."""
    await ctx.notify_tools_changed()
    return "published"


@UPSTREAM.tool()
def regional(
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
) -> str:
    """Answers its region; at 2026-07-28 it needs an ``Mcp-Param-Region`` header."""
    return region


@UPSTREAM.tool()
def era_seen(ctx: Context[Any, Any]) -> str:
    """The protocol version the request came in."""
    return str(ctx.protocol_version)


@UPSTREAM.tool()
def meta_seen(ctx: Context[Any, Any]) -> str:
    """What ``_meta`` the request carried, as JSON."""
    meta = ctx.request_context.meta
    return json.dumps(dict(meta) if meta else None)


@UPSTREAM.tool()
def die() -> str:
    """Kills the server process mid-call."""
    import os

    os._exit(3)


@UPSTREAM.resource("data://public")
def public() -> str:
    """A readable resource."""
    return "public data"


@UPSTREAM.resource("data://secret")
def secret() -> str:
    """A resource the proxy hides."""
    return "secret data"


@UPSTREAM.prompt()
def greet(name: str) -> str:
    """A prompt the proxy passes unchanged."""
    return f"Hello {name}"


def subscribing() -> MCPServer:
    """An MCPServer serving ``resources/subscribe`` and ``unsubscribe`` (the
    handshake era's), each noted as a line in the file its ``file://`` URI
    names (a test in another process reads them), and a ``touch`` tool that
    tells its caller's session that a URI changed."""
    server = MCPServer("subscribing")

    @server.resource("data://public")
    def readable() -> str:
        """A readable resource."""
        return "public data"

    def noted(uri: Any, what: str) -> types.EmptyResult:
        if str(uri).startswith("file://"):
            with open(urlparse(str(uri)).path, "a") as out:
                out.write(f"{what}\n")
        return types.EmptyResult()

    async def on_subscribe(ctx: Any, params: types.SubscribeRequestParams) -> Any:
        return noted(params.uri, "subscribe")

    async def on_unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> Any:
        return noted(params.uri, "unsubscribe")

    low = server._lowlevel_server
    low.add_request_handler(
        "resources/subscribe", types.SubscribeRequestParams, on_subscribe
    )
    low.add_request_handler(
        "resources/unsubscribe", types.UnsubscribeRequestParams, on_unsubscribe
    )

    @server.tool()
    async def touch(uri: str, ctx: Context[Any, Any]) -> str:
        """Tells its caller's session that ``uri`` changed."""
        await ctx.session.send_resource_updated(uri)
        return "touched"

    return server


def resumable() -> MCPServer:
    """An MCPServer whose ``cut`` tool drops its stream (run with an event store)."""
    server = MCPServer("resumable")

    @server.tool()
    async def cut(ctx: Context[Any, Any]) -> str:
        """Reports progress, closes its own SSE stream, reports again, answers."""
        await ctx.report_progress(1, 2, "before the cut")
        await ctx.close_sse_stream()
        await anyio.sleep(0.3)  # the reply comes after the client has lost it
        await ctx.report_progress(2, 2, "after the cut")
        return "answered after the cut"

    return server


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 3 and args[0::2] == ["--http", "--resumable"]:
        from helmlog.gateway.proxy._resume import SessionEventStore

        resumable().run(
            "streamable-http",
            port=int(args[1]),
            event_store=SessionEventStore(),
            retry_interval=50,
        )
    elif len(args) == 3 and args[0::2] == ["--http", "--subscribing"]:
        subscribing().run("streamable-http", port=int(args[1]))
    elif len(args) == 3 and args[0::2] == ["--http", "--json"]:
        # answers as JSON bodies, not SSE
        UPSTREAM.run("streamable-http", port=int(args[1]), json_response=True)
    elif len(args) == 2 and args[0] == "--http":
        UPSTREAM.run("streamable-http", port=int(args[1]))
    else:
        UPSTREAM.run("stdio")
