"""The proxy's governed call files its before-tool rows with its dispatch.

Pattern: end to end with the real SDK client through ``McpProxy`` to a
         FastMCP upstream in process; a ``MemoryEventStore`` that notes the
         batch each ``append_sealed`` receives (then stores it as its own).
Role:    unit tests for ``gateway/proxy/_audit.py``'s ``_Recorder`` (issue 26).
Emits:   nothing.

Laws: R7 (rows and ``tool.dispatched`` durable before execute, one batch),
P14 (the same rows, in the same order), S3/S4 (a call validation refuses
after an allowing walk still has its rows).
"""

from __future__ import annotations

from collections.abc import Sequence

from helmlog import ToolMiddleware, allow
from helmlog.events import MemoryEventStore, StoredEvent
from helmlog.gateway import McpProxy

from .proxy_helpers import proxied, text_of
from .upstream_server import CALLS, UPSTREAM


class _Batches(MemoryEventStore):
    """The real memory store, noting each appended batch's event types."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        self.batches.append([r.type for r in records])
        return await super().append_sealed(session_id, records, expected_seq)


async def _types(store: MemoryEventStore) -> list[str]:
    (sid,) = await store.sessions()
    return [r.type for r in await store.read(sid)]


async def test_r7_an_allowed_calls_rows_and_dispatch_are_one_append() -> None:
    """R7, P14 (issue 26): rows then tool.dispatched, one batch, before execute."""
    CALLS.clear()
    store = _Batches()
    one = ToolMiddleware(name="one", on_tool_call=lambda c: allow())
    two = ToolMiddleware(name="two", on_tool_call=lambda c: allow())
    proxy = McpProxy(UPSTREAM, governance=[one, two], store=store)
    async with proxied(proxy) as client:
        out = await client.call_tool("refund", {"amount": 5})
    assert (False, 1) == (out.is_error, len(CALLS))
    assert [["decision.filed", "decision.filed", "tool.dispatched"]] == [
        b for b in store.batches if "tool.dispatched" in b
    ]
    assert ["decision.filed", "decision.filed", "tool.dispatched"] == (
        await _types(store)
    )


async def test_s3_rows_of_a_call_validation_refuses_are_still_recorded() -> None:
    """S3, S4, P14 (issue 26): the walk allowed with arguments that are not an
    object; validation refuses, the tool never runs, the row is on record."""
    CALLS.clear()
    store = _Batches()
    listy = ToolMiddleware(name="listy", on_tool_call=lambda c: allow([1, 2], "a list"))
    proxy = McpProxy(UPSTREAM, governance=[listy], store=store)
    async with proxied(proxy) as client:
        out = await client.call_tool("refund", {"amount": 5})
    assert out.is_error and [] == CALLS
    assert text_of(out).startswith("Invalid arguments for tool 'refund'")
    assert ["decision.filed"] == await _types(store)
