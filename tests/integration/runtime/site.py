"""A store with an operator's (or attacker's) hands on its keys, and a refund desk.

Role:    shared by the runtime's tamper and deletion tests
         (test_verify_before_acting.py, test_deleted_keys.py); the ``site``
         fixture is in this folder's conftest.py.

Laws: R19, R25, R26 (what these helpers let a test delete or rewrite).

Why raw hands: the attacks these tests measure act on the stored keys
(``DEL``, ``XADD``), below any helmlog API, on memory, Redis and a Cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog import Agent, AskPause, Tool, ToolMiddleware, allow, ask
from helmlog.events import (
    EventStore,
    MemoryEventStore,
    RedisEventStore,
    StoredEvent,
    open_event_store,
)
from helmlog.events.redis import head_key, stream_key
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

KEY = b"operator-secret-key"
SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "integer"}, "amount": {"type": "number"}},
    "required": ["order", "amount"],
}
KINDS = [
    "memory",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("cluster", marks=pytest.mark.redis),
]


class Site:
    """A store URL, stores opened on it, and raw access to its keys."""

    def __init__(self, url: str, memory: MemoryEventStore | None) -> None:
        self.url = url
        self.memory = memory
        self.raw: EventStore = memory if memory is not None else open_event_store(url)
        self.opened: list[EventStore] = [self.raw]

    def store(self, key: bytes | None = None) -> EventStore:
        """A store on this site under ``key`` (the memory site has one store)."""
        if self.memory is not None:
            self.memory.chain_key = key
            return self.memory
        store = open_event_store(self.url, chain_key=key)
        self.opened.append(store)
        return store

    async def records(self, sid: str) -> list[StoredEvent]:
        """The stored records, read raw (no verification)."""
        return await self.raw.read(sid)

    async def delete(self, sid: str, *, stream: bool = True, head: bool = True) -> None:
        """``DEL`` the session's stream and/or head record."""
        if self.memory is not None:
            if stream:
                self.memory._streams.pop(sid, None)
            if head:
                self.memory._heads.pop(sid, None)
            return
        keys = ([stream_key(sid)] if stream else []) + ([head_key(sid)] if head else [])
        for key in keys:
            await self.routes().one(key, "DEL", key)

    async def rewrite(self, sid: str, records: list[StoredEvent]) -> None:
        """Replace the session's stream with ``records``, leaving its head."""
        if self.memory is not None:
            self.memory._streams[sid] = list(records)
            return
        await self.delete(sid, head=False)
        key = stream_key(sid)
        for r in records:
            await self.routes().one(
                key, "XADD", key, f"0-{r.seq}",
                "seq", r.seq, "data", r.data, "hash", r.hash,
            )  # fmt: skip

    async def raw_bytes(self, sid: str) -> bytes:
        """Every byte stored under the session's keys (stream and head)."""
        routes = self.routes()
        key = stream_key(sid)
        entries = await routes.one(key, "XRANGE", key, "-", "+")
        head = await routes.one(head_key(sid), "GET", head_key(sid))
        out = [bytes(head or b"")]
        for entry_id, fields in entries:
            out.append(bytes(entry_id))
            out.extend(bytes(f) for f in fields)
        return b"\n".join(out)

    def routes(self) -> Any:
        """The raw store's routes (it learnt the cluster's slots when opened)."""
        assert isinstance(self.raw, RedisEventStore)
        return self.raw._routes

    async def open(self) -> Site:
        if isinstance(self.raw, RedisEventStore):
            await self.raw._routes.prepare()
        return self

    async def close(self) -> None:
        for store in self.opened:
            await store.close()


def proposal(n: int) -> Reply:
    """The model proposing refund ``c<n>`` of order ``6 + n``, 900 (asks)."""
    args = {"order": 6 + n, "amount": 900}
    return Reply(tool_calls=[ToolCallRequest(id=f"c{n}", name="refund", args=args)])


class Desk:
    """A refund agent (not idempotent) whose tool and model record every call."""

    def __init__(self, store: EventStore, script: list[Any] | None = None) -> None:
        self.ran: list[dict[str, Any]] = []
        self.model = scripted([proposal(1), "Refunded."] if script is None else script)
        four_eyes = ToolMiddleware(
            name="four-eyes",
            on_tool_call=lambda c: (
                ask("Approve this refund?") if c.args["amount"] > 500 else allow()
            ),
        )
        self.agent = (
            Agent.create(provider=self.model, model="m", ids=counter_ids(), store=store)
            .system("You refund.")
            .tool(Tool("refund", "Refund an order.", SCHEMA, self._refund))
            .tool_middleware(four_eyes)
            .build()
        )

    def _refund(self, order: int, amount: float) -> str:
        self.ran.append({"order": order, "amount": amount})
        return f"refunded {amount} on {order}"

    async def pause(self, message: str = "Refund order 7") -> AskPause:
        out = await self.agent.run(message)
        assert isinstance(out, AskPause)
        return out

    def nothing_ran(self) -> tuple[list[Any], int]:
        """What the tool ran and how many model calls were made."""
        return self.ran, len(self.model.requests)
