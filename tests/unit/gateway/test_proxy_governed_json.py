"""A governed plain call on the upstream's JSON answers and records as on the models.

Pattern: the same raw JSON-RPC exchange run twice against one governed
         proxy, its JSON paths on and off (``proxy.fast_calls``), in memory
         (the SDK's handler, a handshake-era session) and as 2026-07-28 POSTs
         (the HTTP lane); the answers compared whole, and every row of the
         proxy session's stream (times, ids and hashes aside) compared too.
Role:    differential tests of ``Routing.tool_governed`` and
         ``Governance.call_raw`` (issue 26: the governed route on plain dicts).
Emits:   nothing.

Laws: P14 (the same walk: allow, deny, transform, ask, a tool error, a
hidden tool, a structured result a rule rewrites, a non-text block), P20
and R7 (the same rows in the same order), P25 (an unchanged result is the
upstream's own), P27 (structured content kept valid), S4 (an ask's tool
error; a call naming an ask in ``_meta`` stays on the models).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import msgspec
from mcp.server.mcpserver import MCPServer
from mcp.shared.memory import create_client_server_memory_streams
from mcp.types import ImageContent, TextContent

from helmlog import ToolMiddleware, allow, ask, deny
from helmlog.events import MemoryEventStore
from helmlog.gateway import McpProxy

from ...polling import until
from .http_helpers import INITIALIZE
from .proxy_lane_server import echo, explode, forbidden
from .proxy_lane_server import record as record_tool
from .test_proxy_fast import _message, _spied, _unnamed
from .test_proxy_lane_http import _call, _post, _served

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
UPSTREAM = MCPServer("governed-upstream")


# The lane's upstream tools, served here too (the same answers on both routes).
for _tool in (echo, explode, record_tool, forbidden):
    UPSTREAM.tool()(_tool)


@UPSTREAM.tool()
def picture() -> list[TextContent | ImageContent]:
    """A text block and an image block (the walk sees the blocks' JSON)."""
    return [
        TextContent(type="text", text="a cat"),
        ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
    ]


@UPSTREAM.tool()
def two() -> list[TextContent]:
    """Two text blocks (the walk sees them joined)."""
    return [TextContent(type="text", text="one"), TextContent(type="text", text="2")]


@UPSTREAM.tool()
def hidden() -> str:
    """A tool the proxy hides."""
    return "seen"


@UPSTREAM.tool()
def sensitive() -> str:
    """A tool a rule asks a person about."""
    return "done"


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("***" if k == "ssn" else v) for k, v in value.items()}
    return value


RULES = [
    ToolMiddleware(
        name="gate",
        on_tool_call=lambda c: (
            deny("not this one")
            if c.tool_name == "forbidden"
            else ask("a person decides")
            if c.tool_name == "sensitive"
            else allow()
        ),
    ),
    ToolMiddleware(
        name="mask",
        on_tool_result=lambda r: (
            allow(_masked(r.result), "masked")
            if r.tool_name == "record"
            else allow(f"{r.result}!", "loud")
            if r.tool_name == "two"
            or (r.tool_name == "echo" and r.args.get("word") == "loud")
            else allow()
        ),
    ),
]
PARAMS: list[dict[str, Any]] = [
    {"name": "echo", "arguments": {"word": "hi"}},
    {"name": "echo", "arguments": {"word": "loud"}},
    {"name": "explode", "arguments": {}},
    {"name": "record", "arguments": {"name": "ada"}},
    {"name": "picture", "arguments": {}},
    {"name": "forbidden", "arguments": {}},
    {"name": "hidden", "arguments": {}},
    {"name": "sensitive", "arguments": {}},
    {"name": "echo", "arguments": {"word": "m"}, "_meta": {"helmlog": {"a": None}}},
    {"name": "two"},
    {"name": "echo", "arguments": {"word": "x"}, "_meta": {"helmlog/ask": ""}},
]
# Not on the JSON: the call that names an ask (S4's read-back, here its
# refusal of an empty id); the hidden tool is refused there before any walk.
GOVERNED = len(PARAMS) - 1


def _proxy(store: MemoryEventStore, fast: bool) -> McpProxy:
    proxy = McpProxy(
        UPSTREAM, name="gov", governance=RULES, hidden_tools={"hidden"}, store=store
    )
    proxy.fast_calls = fast
    return proxy


async def _rows(store: MemoryEventStore) -> list[Any]:
    """Every row of every stream, its times, session ids and hashes aside."""
    out = []
    for sid in sorted(await store.sessions()):
        for record in await store.read(sid):
            row = msgspec.to_builtins(record.decode())
            for key in ("timestamp", "session_id", "prev_hash"):
                row.pop(key, None)
            out.append((record.type, json.dumps(row, sort_keys=True)))
    return sorted(out)  # streams by session id (fresh per run): compared as sets


async def _memory(fast: bool) -> tuple[dict[Any, Any], list[Any], int]:
    store = MemoryEventStore()
    proxy = _proxy(store, fast)
    answers: dict[Any, Any] = {}

    async def read(stream: Any) -> None:
        async for item in stream:
            body = item.message.model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
            answers[body["id"]] = body

    opened = _spied(proxy)
    async with (
        proxy,
        create_client_server_memory_streams() as ((c_read, c_write), server),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(proxy.run, *server)
        tg.start_soon(read, c_read)
        await c_write.send(_message({**INITIALIZE, "id": 0}))
        await until("the initialize answer", lambda: 0 in answers, 20.0)
        await c_write.send(_message(INITIALIZED))
        for n, params in enumerate(PARAMS, 1):  # one at a time: rows in order
            request = {"jsonrpc": "2.0", "id": n, "method": "tools/call"}
            await c_write.send(_message({**request, "params": params}))
            await until(f"answer {n}", lambda n=n: n in answers, 20.0)
        tg.cancel_scope.cancel()
    del answers[0]
    return answers, await _rows(store), opened[0].governed


async def test_p14_p20_a_governed_call_on_json_is_the_model_paths_in_memory() -> None:
    """P14, P20, P25, P27, S4: allow, a transform, a tool error, a structured
    rewrite, a non-text block, a denial, a hidden tool, an ask and a ``_meta``
    with nulls answer alike with the JSON path on and off, with the same rows;
    every call but the one naming an ask takes the JSON."""
    fast, fast_rows, governed = await _memory(True)
    models, model_rows, untouched = await _memory(False)
    assert _unnamed(models) == _unnamed(fast)  # error ids are fresh (H4)
    assert model_rows == fast_rows
    assert (GOVERNED, 0) == (governed, untouched)
    assert "HI" == fast[1]["result"]["content"][0]["text"]
    assert "LOUD!" == fast[2]["result"]["content"][0]["text"]
    assert fast[3]["result"]["isError"]
    assert "***" == fast[4]["result"]["structuredContent"]["ssn"]
    assert "image" == fast[5]["result"]["content"][1]["type"]
    assert "not this one" == fast[6]["result"]["content"][0]["text"]
    assert {"rejection_reason": "TOOL_HIDDEN"} == fast[7]["error"]["data"]
    assert "a person decides" in fast[8]["result"]["content"][0]["text"]
    assert "one\n2!" == fast[10]["result"]["content"][0]["text"]
    assert -32602 == fast[11]["error"]["code"]
    kinds = [kind for kind, _row in fast_rows]
    assert kinds.count("tool.dispatched") == 7  # the calls the rules let on


async def _lane(fast: bool) -> tuple[dict[int, Any], list[Any], int]:
    store = MemoryEventStore()
    proxy = _proxy(store, fast)
    out: dict[int, Any] = {}
    opened = _spied(proxy)
    async with (
        proxy,
        _served(proxy) as (url, _app),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        for n, params in enumerate(PARAMS, 1):
            sent = _call(n, params["name"], params.get("arguments"))
            sent[0]["params"]["_meta"].update(params.get("_meta", {}))
            out[n] = await _post(http, url, sent)
    return out, await _rows(store), sum(s.governed for s in opened)


async def test_p14_p20_a_governed_call_on_the_http_lane_is_the_model_paths() -> None:
    """P14, P20, P25, P27, S4 on 2026-07-28 POSTs (the HTTP lane): the same
    answers and rows with the JSON path on and off."""
    fast, fast_rows, governed = await _lane(True)
    models, model_rows, untouched = await _lane(False)
    assert _unnamed(models) == _unnamed(fast)  # error ids are fresh (H4)
    assert model_rows == fast_rows
    assert (GOVERNED, 0) == (governed, untouched)
    assert "HI" == fast[1][2]["result"]["content"][0]["text"]
    assert "***" == fast[4][2]["result"]["structuredContent"]["ssn"]
    assert "not this one" == fast[6][2]["result"]["content"][0]["text"]
