"""What the shipped contract suite's tests build on: ids, rows, batches, waits.

Pattern: test-data builders and a polling wait, shared by the contract
         modules of ``helmlog.events.testing`` and by this repository's own
         store tests.
Role:    events layer, test support; imported by tests only (it needs pytest).
Emits:   nothing.

Laws: R2/R3 (``stamped`` seals batches the way ``seal`` does), R4
(``decision`` is a row with the stored fact of an older writer; ``filed`` a
row alone, as streams are written now).

Why ``eventually`` and not a sleep: a remote store publishes facts in the round
trip after their append (R4); a test waits for what it needs, with a deadline.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import pytest

from helmlog.events import (
    DecisionFiled,
    Event,
    EventStore,
    LlmStarted,
    Message,
    MessageCommitted,
    MiddlewareDecision,
    StoredEvent,
    TurnEnded,
    TurnStarted,
)
from helmlog.events.lowlevel import fact_for, hash_bytes

StoreFactory = Callable[..., EventStore]
"""Opens a fresh store of the adapter under test: ``make(*, chain_key=None)``."""


# Invariant: tests and async fixtures share one loop, so a client opened in a
# fixture is used and closed on the loop it connected on.
pytestmark = pytest.mark.asyncio(loop_scope="session")


KEY = b"chain-key-for-tests"


_ids = itertools.count(1)


def new_session() -> str:
    """A session id no other test or example uses."""
    return f"s-{next(_ids)}"


def row(n: int, *, outcome: str = "allow") -> MiddlewareDecision:
    return MiddlewareDecision(
        middleware="guard",
        moment="before-tool",
        at="tool",
        iteration=1,
        outcome=outcome,
        changed=False,
        tool_name="search",
        tool_call_id=f"call-{n}",
    )


def decision(n: int) -> list[Event]:
    """A decision row and its stored fact: the batch walkers filed before facts
    were projections (R4: such a batch still publishes one fact per row)."""
    r = row(n)
    return [DecisionFiled(row=r), fact_for(r)]


SECRET = "4111-1111-1111-1111"


def filed(n: int) -> list[Event]:
    """A decision row, stored once: the batch a walker files (R4)."""
    r = msgspec.structs.replace(
        row(n), changed=True, why="masked", before=SECRET, after="[card]"
    )
    return [DecisionFiled(row=r)]


def turn(n: int) -> list[Event]:
    """A small turn with no decisions."""
    return [
        TurnStarted(turn=n),
        MessageCommitted(message=Message(role="user", content=f"question {n}")),
        LlmStarted(iteration=1, model="scripted"),
        MessageCommitted(message=Message(role="assistant", content=f"answer {n}")),
        TurnEnded(turn=n, final_content=f"answer {n}"),
    ]


def stamped(
    events: Sequence[Event], records: Sequence[StoredEvent], session_id: str
) -> list[Event]:
    """``events`` as a store stamps them, given the records it kept."""
    out: list[Event] = []
    prev = records[0].decode().prev_hash if records else ""
    for ev, rec in zip(events, records, strict=True):
        out.append(
            msgspec.structs.replace(
                ev, session_id=session_id, seq=rec.seq, prev_hash=prev, replayed=False
            )
        )
        prev = rec.hash
    return out


async def eventually(
    probe: Callable[[], Awaitable[Any]],
    until: Callable[[Any], bool],
    *,
    timeout: float = 5.0,
) -> Any:
    """Poll ``probe`` until ``until(result)`` holds, or fail at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await probe()
        if until(result):
            return result
        if loop.time() > deadline:
            raise AssertionError(f"condition not met in {timeout}s; last: {result!r}")
        await asyncio.sleep(0.01)


def unknown_record(
    session_id: str, seq: int, prev_hash: str, key: bytes | None
) -> StoredEvent:
    """A record of a type this reader lacks, sealed as a newer writer would."""
    data = msgspec.json.encode(
        {
            "type": "future.thing_happened",
            "session_id": session_id,
            "seq": seq,
            "timestamp": 1_700_000_000_000,
            "prev_hash": prev_hash,
            "replayed": False,
            "novelty": {"nested": [1, 2, 3]},
        }
    )
    return StoredEvent(
        seq=seq,
        data=data,
        hash=hash_bytes(data, key),
        type="future.thing_happened",
        session_id=session_id,
    )
