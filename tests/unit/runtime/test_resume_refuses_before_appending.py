"""R9 on resume: refuse before appending anything; of two resumes, one proceeds.

Pattern: pause a governed run, then hand an agent the checkpoint with what
         must make it refuse (a tool the agent lacks, a seq that names no
         pause, a second concurrent resume on a fresh host), and compare the
         refusal, the stored stream and what ran with what the law says.
Role:    unit tests for ``runtime/_bindings.py`` and ``runtime/_resume.py``.
Emits:   nothing.

Laws: R9 (``resume`` refuses before appending anything; ``tampered`` when a
binding disagrees with the stream; of two concurrent resumes of one checkpoint
exactly one proceeds).

Why a store whose reads yield: every networked store (Redis) gives the event
loop a turn while it reads; an in-memory store that never yields hides races
that activation on a real host runs into.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    AskPause,
    CheckpointError,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
)
from helmlog.events import MemoryEventStore, StoredEvent
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

KEY = b"audit-chain-key"
SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "integer"}},
    "required": ["order"],
}


class YieldingStore(MemoryEventStore):
    """A memory store whose reads give the event loop turns, as Redis's do.

    ``lags`` sets how many turns each next read takes (one when none is left),
    so a test can make an earlier read return after a later one.
    """

    def __init__(self, *lags: int) -> None:
        super().__init__()
        self.lags = list(lags)

    async def read(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        lag = self.lags.pop(0) if self.lags else 1
        records = await super().read(session_id, after_seq)
        for _ in range(lag):
            await asyncio.sleep(0)
        return records


class Refunds:
    """The refund tool and what it was run with."""

    def __init__(self) -> None:
        self.ran: list[int] = []
        self.tool = Tool("refund", "Refund an order.", SCHEMA, self.execute)

    async def execute(self, order: int) -> str:
        await asyncio.sleep(0)
        self.ran.append(order)
        return f"refunded {order}"


four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("approve?"))


async def yielding(c: Any) -> Any:
    await asyncio.sleep(0)
    return allow()


after = ToolMiddleware(name="after", on_tool_call=yielding)


def agent_on(store: MemoryEventStore, refunds: Refunds | None, *replies: Any) -> Agent:
    builder = (
        Agent.create(
            provider=scripted(list(replies)), model="m", ids=counter_ids(), store=store
        )
        .system("You refund.")
        .tool_middleware(four_eyes, after)
    )
    if refunds is not None:
        builder = builder.tool(refunds.tool)
    return builder.build()


async def paused_on(store: MemoryEventStore) -> AskPause:
    call = ToolCallRequest(id="c1", name="refund", args={"order": 7})
    turn = Reply(tool_calls=[call])
    out = await agent_on(store, Refunds(), turn, "unused").run("refund order 7")
    assert isinstance(out, AskPause)
    return out


async def stored(store: MemoryEventStore, session_id: str) -> list[bytes]:
    return [r.data for r in await store.read(session_id)]


async def test_r09_a_refused_resume_appends_nothing_for_a_tool_the_agent_lacks() -> (
    None
):
    """R9: "`resume` refuses before appending anything with `CheckpointError`"."""
    store = MemoryEventStore()
    pause = await paused_on(store)
    cp = pause.checkpoint
    before = await stored(store, cp.session_id)
    toolless = agent_on(store, None, "unused")
    with pytest.raises(CheckpointError) as caught:
        await toolless.resume(cp, check_in_approved(by="dana"))
    assert ("tampered", before) == (
        caught.value.reason,
        await stored(store, cp.session_id),
    )
    refunds = Refunds()
    answer = await agent_on(store, refunds, "Refunded.").resume(
        cp, check_in_approved(by="dana")
    )
    assert ("Refunded.", [7]) == (answer, refunds.ran)


@pytest.mark.parametrize("lag", range(1, 9))
async def test_r09_two_concurrent_resumes_on_a_fresh_host_exactly_one_proceeds(
    lag: int,
) -> None:
    """R9: "Of two concurrent resumes of one checkpoint exactly one proceeds"."""
    store = YieldingStore()
    pause = await paused_on(store)
    store.lags = [lag, 1]  # the first activation's read may return last
    refunds = Refunds()
    host = agent_on(store, refunds, "Refunded.", "Refunded.")
    outcomes = await asyncio.gather(
        host.resume(pause.checkpoint, check_in_approved(by="dana")),
        host.resume(pause.checkpoint, check_in_approved(by="lee")),
        return_exceptions=True,
    )
    answers = [o for o in outcomes if isinstance(o, str)]
    refusals = [o.reason for o in outcomes if isinstance(o, CheckpointError)]
    assert (["Refunded."], ["replayed"], [7]) == (answers, refusals, refunds.ran)


@pytest.mark.parametrize("chain_key", [None, KEY], ids=["no-key", "keyed"])
@pytest.mark.parametrize("delta", [-1, -3])
async def test_r09_a_seq_that_names_no_pause_is_tampered(
    chain_key: bytes | None, delta: int
) -> None:
    """R9: "`"tampered"` (a binding or the MAC disagrees with the stream)"."""
    store = MemoryEventStore(chain_key=chain_key)
    pause = await paused_on(store)
    cp = pause.checkpoint
    forged = msgspec.structs.replace(cp, seq=cp.seq + delta)
    before = await stored(store, cp.session_id)
    host = agent_on(store, Refunds(), "Refunded.")
    with pytest.raises(CheckpointError) as caught:
        await host.resume(forged, check_in_approved(by="dana"))
    assert ("tampered", before) == (
        caught.value.reason,
        await stored(store, cp.session_id),
    )
