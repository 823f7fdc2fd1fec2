"""Golden streams: record them, load them, and compare their folds.

Pattern: recorded histories replayed in CI (Temporal-style replay tests).
Role:    test helper; ``python -m tests.replay.streams [NAME...]``
         re-records the named scenario fixtures (all without a name) under
         ``tests/fixtures/streams/``; the replay tests load them.
Emits:   files only when run as a script.

Why the stored bytes are kept as text, not as parsed JSON: the hash chain is
over the exact stored bytes (R3, R10); re-serializing them would prove
nothing about what an older writer stored.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec

from helmlog.events import Event, SessionState, StoredEvent, decode_event, event_type
from helmlog.events.lowlevel import hash_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "streams"

# The chain key of the keyed fixtures (names holding ``_keyed_``).
GOLDEN_KEY = b"golden-chain-key"
# Recorded by an older writer, and not re-recorded by ``main``: re-recording
# would lose what they show (v2_keyed_imported_pause: pauses that stored their
# MACs, before R19).
FROZEN = frozenset({"v2_keyed_imported_pause"})


def chain_key_of(name: str) -> bytes | None:
    """The chain key a fixture was recorded under (``None`` for most)."""
    return GOLDEN_KEY if "_keyed_" in name else None


class ReplayDivergenceError(AssertionError):
    """A recorded stream no longer folds to the state recorded with it."""


def load_records(path: Path) -> list[StoredEvent]:
    """Read a ``.jsonl`` fixture of stored records, as a store reads them: each
    with its type and the session id (seq 1 names it; later events may not)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    first = decode_event(rows[0]["data"].encode()) if rows else None
    session_id = first.session_id if first is not None else ""
    return [
        StoredEvent(
            seq=row["seq"],
            data=row["data"].encode(),
            hash=row["hash"],
            type=event_type(row["data"].encode()),
            session_id=session_id,
        )
        for row in rows
    ]


def dump_records(path: Path, records: list[StoredEvent]) -> None:
    """Write stored records as a ``.jsonl`` fixture."""
    lines = [
        json.dumps(
            {"seq": r.seq, "hash": r.hash, "data": r.data.decode()}, ensure_ascii=False
        )
        for r in records
    ]
    path.write_text("\n".join(lines) + "\n")


def state_json(state: SessionState) -> Any:
    """A comparable JSON form of a folded state.

    The events a state holds (window records, dispatched calls) are written
    with every field, defaults included, as recorded states always were:
    events are encoded without their defaults (``omit_defaults``) since
    decisions are stored once, which changes how they print, not what folds.
    """
    plain = msgspec.structs.replace(
        state,
        window_records=tuple(_whole(e) for e in state.window_records),  # type: ignore[misc]
        dispatched=tuple(_whole(e) for e in state.dispatched),  # type: ignore[misc]
    )
    return json.loads(msgspec.json.encode(plain, order="sorted"))


def _whole(event: Event) -> dict[str, Any]:
    return {"type": event.type, **msgspec.structs.asdict(event)}


def check_fold(name: str, state: SessionState) -> None:
    """Raise ``ReplayDivergenceError`` when ``state`` differs from the recording."""
    expected = json.loads((FIXTURES / f"{name}.state.json").read_text())
    got = state_json(state)
    if expected != got:
        diffs = sorted(
            k for k in set(expected) | set(got) if expected.get(k) != got.get(k)
        )
        raise ReplayDivergenceError(f"stream '{name}' folds differently in: {diffs}")


def raw_record(seq: int, prev: str, body: dict[str, Any]) -> StoredEvent:
    """A stored record built from a raw JSON body (for older or unknown types)."""
    body = {**body, "seq": seq, "prev_hash": prev}
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return StoredEvent(seq=seq, data=data, hash=hash_bytes(data))


async def _record_scenarios() -> dict[str, list[StoredEvent]]:
    from helmlog import (
        Agent,
        MessageMiddleware,
        ToolMiddleware,
        allow,
        ask,
        check_in_approved,
        deny,
        is_ask_pause,
        sliding_window,
        tool,
    )
    from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
    from helmlog.runtime.testing import counter_ids

    ticks = iter(range(1_700_000_000_000, 1_800_000_000_000, 7))

    def clock() -> int:
        return next(ticks)

    @tool
    def refund(order: int, amount: float) -> str:
        """Refund an order."""
        return f"refunded {amount:.2f} on order {order} for jo@example.com"

    ceiling = ToolMiddleware(
        name="refund-ceiling",
        on_tool_call=lambda c: (
            deny("over the ceiling") if c.args["amount"] > 10_000 else allow()
        ),
    )
    four_eyes = ToolMiddleware(
        name="four-eyes",
        on_tool_call=lambda c: (
            ask("Approve this refund?", c.args) if c.args["amount"] > 500 else allow()
        ),
    )
    strip = ToolMiddleware(
        name="strip-pii",
        on_tool_result=lambda r: allow(
            r.result.replace("jo@example.com", "[email]"), "masked an email"
        ),
    )
    codename = MessageMiddleware(
        name="no-codenames",
        on_message=lambda m: (
            allow(m.content.replace("BLUEBIRD", "[codename]"), "scrubbed a codename")
            if "BLUEBIRD" in m.content
            else allow()
        ),
    )
    calls = [
        ToolCallRequest(id="c1", name="refund", args={"order": 7, "amount": 900}),
        ToolCallRequest(id="c2", name="refund", args={"order": 8, "amount": 20_000}),
        ToolCallRequest(id="c3", name="nope", args={}),
        ToolCallRequest(id="c4", name="refund", args={"order": "x"}),
    ]
    model = scripted(
        [
            Reply(tool_calls=calls),
            "Done under BLUEBIRD.",
            Reply(
                tool_calls=[
                    ToolCallRequest(
                        id="c5", name="refund", args={"order": 9, "amount": 5}
                    )
                ]
            ),
            "Second done.",
        ]
    )
    agent = (
        Agent.create(provider=model, model="m", clock=clock, ids=counter_ids("golden-"))
        .system("You refund.")
        .tool(refund)
        .act(
            before_tool=[ceiling, four_eyes],
            after_tool=[strip],
            output=[codename],
            window=sliding_window(keep_recent_turns=1),
        )
        .build()
    )
    out = await agent.run("Refund order 7")
    assert is_ask_pause(out)
    await agent.resume(out.checkpoint, check_in_approved(by="dana@ops", note="ok"))
    await agent.follow_up("And order 9")
    sid = agent.session_id
    assert sid is not None
    return {"v3_refund_desk": await agent.store.read(sid)}


def imported_agent(
    store: Any,
    script: list[Any],
    ran: list[dict[str, Any]],
    *,
    clock: Any = None,
) -> Any:
    """The agent of the imported-pause fixtures: cap the amount, then ask.

    ``ran`` collects the arguments the refund tool runs with; a test resuming
    a fixture's pause builds the same agent, so its policy version matches.
    """
    from helmlog import Agent, ToolMiddleware, allow, ask, tool
    from helmlog.runtime.providers import scripted
    from helmlog.runtime.testing import counter_ids

    @tool
    def refund(order: int, amount: float) -> str:
        """Refund an order."""
        ran.append({"order": order, "amount": amount})
        return f"refunded {amount:.2f} on order {order}"

    cap = ToolMiddleware(
        name="cap",
        on_tool_call=lambda c: allow(
            {**c.args, "amount": min(c.args["amount"], 500)}, "capped"
        ),
    )
    four_eyes = ToolMiddleware(
        name="four-eyes", on_tool_call=lambda c: ask("Approve this refund?")
    )
    options: dict[str, Any] = {"ids": counter_ids("golden-"), "store": store}
    if clock is not None:
        options["clock"] = clock
    return (
        Agent.create(provider=scripted(script), model="m", **options)
        .tool(refund)
        .tool_middleware(cap, four_eyes)
        .build()
    )


async def _record_imported(
    chain_key: bytes | None = None,
) -> dict[str, list[StoredEvent]]:
    """A pause taken on one store, imported and resumed on another (R9), which
    then pauses again: ``session.imported`` first, a pending pause last.

    With ``chain_key`` (``GOLDEN_KEY``) this recorded
    ``v2_keyed_imported_pause`` before R19, when pauses stored their MACs.
    """
    from helmlog import check_in_approved
    from helmlog.events import MemoryEventStore
    from helmlog.runtime.providers import Reply, ToolCallRequest

    ticks = iter(range(1_700_000_000_000, 1_800_000_000_000, 7))

    def clock() -> int:
        return next(ticks)

    def refund_call(call_id: str, order: int) -> Reply:
        args = {"order": order, "amount": 900}
        return Reply(tool_calls=[ToolCallRequest(id=call_id, name="refund", args=args)])

    def agent(store: MemoryEventStore, script: list[Any]) -> Any:
        return imported_agent(store, script, [], clock=clock)

    first = agent(MemoryEventStore(chain_key=chain_key), [refund_call("c1", 7)])
    out = await first.run("Refund order 7")
    store = MemoryEventStore(chain_key=chain_key)
    second = agent(store, [refund_call("c2", 8)])
    again = await second.resume(
        out.checkpoint.to_json(), check_in_approved(by="dana@ops")
    )
    assert not isinstance(again, str)
    sid = second.session_id
    assert sid is not None
    name = "v3_keyed_imported_pause" if chain_key else "v3_imported_pause"
    return {name: await store.read(sid)}


async def _record_typed() -> dict[str, list[StoredEvent]]:
    """Typed output (G92): a turn whose first answer fails its type and goes
    back (``output.rejected``, a retry prompt), then a turn whose answers run
    out of retries (``error.fatal``, ``ERR_OUTPUT_INVALID``)."""
    from helmlog import Agent, OutputValidationError
    from helmlog.runtime.providers import scripted
    from helmlog.runtime.testing import counter_ids

    ticks = iter(range(1_700_000_000_000, 1_800_000_000_000, 7))
    schema = {
        "title": "Refund",
        "type": "object",
        "properties": {"order": {"type": "integer"}},
        "required": ["order"],
    }
    agent = Agent.create(
        provider=scripted([{"order": "seven"}, {"order": 7}, "no", "nope"]),
        model="m",
        clock=lambda: next(ticks),
        ids=counter_ids("golden-"),
        output_type=schema,
        max_output_retries=1,
    ).build()
    await agent.run("Refund order 7")
    failed = False
    try:
        await agent.follow_up("And order 8")
    except OutputValidationError:
        failed = True
    assert failed, "the second turn's answers run out of retries"
    sid = agent.session_id
    assert sid is not None
    return {"v3_typed_output": await agent.store.read(sid)}


async def _record_served() -> dict[str, list[StoredEvent]]:
    """A served call's ask (S4, S10): ``mcp_serve``'s pause in a session of its
    own, naming its caller's identity (``pause.request.identity``), approved
    and carried out (``pause.resume``, the call's rows, ``stream.tool_end``)."""
    from mcp.server.auth.middleware.auth_context import auth_context_var
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    from helmlog import Tool, ToolMiddleware, allow, ask, check_in_approved
    from helmlog.events import MemoryEventStore, fold
    from helmlog.gateway._serve import ServedTools

    ticks = iter(range(1_700_000_000_000, 1_800_000_000_000, 7))
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "integer"}},
        "required": ["amount"],
    }

    def four_eyes(call: Any) -> Any:
        return ask("approve a refund?") if call.args["amount"] > 100 else allow()

    served = ServedTools(
        [Tool("refund", "Refund.", schema, lambda amount: f"refunded {amount}")],
        name="desk",
        tool_middleware=[ToolMiddleware(name="four-eyes", on_tool_call=four_eyes)],
        store=MemoryEventStore(),
        clock=lambda: next(ticks),
    )
    caller = AccessToken(token="t", client_id="ops-bot", scopes=["refunds"])
    reset = auth_context_var.set(AuthenticatedUser(caller))
    try:
        await served.call("refund", {"amount": 250})
    finally:
        auth_context_var.reset(reset)
    sid = served.session_ids[-1]
    state = fold(r.decode() for r in await served.store.read(sid))
    assert state.checkpoint is not None
    await served.resume(state.checkpoint, check_in_approved("dana"))
    return {"v3_served_pause": await served.store.read(sid)}


def _old_and_unknown() -> list[StoredEvent]:
    """A stream as an older writer stored it, with one type this reader lacks."""
    bodies: list[dict[str, Any]] = [
        {"type": "agent.turn_start", "session_id": "old-1", "timestamp": 1, "turn": 1},
        {
            "type": "message.committed",
            "session_id": "old-1",
            "timestamp": 2,
            "message": {"role": "user", "content": "hi"},
        },
        {
            "type": "agent.mood_changed",
            "session_id": "old-1",
            "timestamp": 3,
            "mood": "calm",
        },
        {
            "type": "stream.llm_start",
            "session_id": "old-1",
            "timestamp": 4,
            "iteration": 1,
            "model": "m",
        },
        {
            "type": "stream.llm_end",
            "session_id": "old-1",
            "timestamp": 5,
            "iteration": 1,
            "content": "hello",
        },
        {
            "type": "message.committed",
            "session_id": "old-1",
            "timestamp": 6,
            "message": {"role": "assistant", "content": "hello"},
        },
        {
            "type": "agent.turn_end",
            "session_id": "old-1",
            "timestamp": 7,
            "turn": 1,
            "final_content": "hello",
        },
    ]
    records: list[StoredEvent] = []
    prev = ""
    for seq, body in enumerate(bodies, start=1):
        record = raw_record(seq, prev, body)
        records.append(record)
        prev = record.hash
    return records


def main(names: list[str]) -> None:
    """Re-record the named fixtures, or every one (only when the format changes
    on purpose: a re-recorded stream no longer shows what an older writer
    stored).

    The scenarios record under the name of the current format (``v3_*``: rows
    stored once, defaults left out, the session id at seq 1 only); the
    streams of older writers (``v1_refund_desk``, ``v2_imported_pause``, with
    their stored facts) are kept as they were and can no longer be made.
    """
    from helmlog.events import fold

    streams = asyncio.run(_record_scenarios())
    streams["v0_old_fields_and_unknown_type"] = _old_and_unknown()
    streams.update(asyncio.run(_record_imported()))
    streams.update(asyncio.run(_record_typed()))
    streams.update(asyncio.run(_record_served()))
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, records in streams.items():
        if (names and name not in names) or name in FROZEN:
            continue
        dump_records(FIXTURES / f"{name}.jsonl", records)
        state = fold(r.decode() for r in records)
        (FIXTURES / f"{name}.state.json").write_text(
            json.dumps(state_json(state), indent=1, sort_keys=True, ensure_ascii=False)
            + "\n"
        )
        print(f"recorded {name}: {len(records)} events")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
