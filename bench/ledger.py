"""Benchmark the ledger: Redis appends and reads against raw redis-py, and fold.

Pattern: one script, one run, its own ``redis-server`` on a free port; a human
         summary, then exactly one JSON line for machines.
Role:    bench; ``uv run python bench/ledger.py`` (``--quick``). Measures
         ``RedisEventStore.append``, ``store.read`` + decode and ``fold``.
Emits:   the summary, ending with ``{"bench": "ledger", ...}``.

Laws: R2 (appends go through the atomic script), R4, R1, R19 (the cost of
verification and the head record).

Targets (issue 7, appends raised by issue 29 item 4): appends >= 75 % of raw
pipelined ``XADD``, fold >= 300k events/s, read + decode >= 80 % of raw
``XRANGE``; issue 8: <= 4,000 bytes
per governed one-tool turn. Units, baselines and method: docs/design.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from helmlog.events import (
    DecisionFiled,
    Event,
    Folder,
    LlmEnded,
    LlmStarted,
    Message,
    MessageCommitted,
    MiddlewareDecision,
    StoredEvent,
    ToolCallRequest,
    ToolDispatched,
    ToolEnded,
    ToolStarted,
    TurnEnded,
    TurnStarted,
    UnknownEvent,
    decode_event,
    encode_event,
    fact_of,
    fold,
)
from helmlog.events._chain import encode_head, head_of
from helmlog.events._index import DEFAULT_SHARDS
from helmlog.events.lowlevel import seal
from helmlog.events.redis import (
    RedisEventStore,
    head_key,
    shard_keys,
    stream_key,
)
from helmlog.events.redis.scripts import APPEND_LUA
from helmlog.runtime.lowlevel import Journal, Listeners

# The append script without its head-record write, to price that write alone.
_HEAD_SET = b"  redis.call('SET', KEYS[2], ARGV[4])\n"
assert _HEAD_SET in APPEND_LUA
APPEND_LUA_NO_HEAD = APPEND_LUA.replace(_HEAD_SET, b"")

TARGETS = {"append": 0.75, "fold": 300_000.0, "read": 0.80}
BYTES_PER_TURN_TARGET = 4_000
# Measured on 2026-12-01, before issue 8 (21 events: each decision stored
# twice, every default and the session id in every event).
BYTES_PER_TURN_BEFORE = 6_721
EVENTS_PER_TURN_BEFORE = 21


def decision_row(n: int) -> MiddlewareDecision:
    """A tool row like a permission link files for every call."""
    return MiddlewareDecision(
        middleware="permission-gate",
        moment="before-tool",
        at="tool",
        iteration=1 + n % 5,
        outcome="allow",
        changed=False,
        tool_name="search_documents",
        tool_call_id=f"call_{n:08d}",
        why="the caller may search",
    )


def decision_batch(n: int) -> list[Event]:
    """One ledger row: the batch a walker appends per decision (its fact is a
    projection the store publishes, R4)."""
    return [DecisionFiled(row=decision_row(n), timestamp=1_700_000_000_000 + n)]


def realistic_turn(t: int) -> list[Event]:
    """One governed turn: a question, a tool call with its decision, an answer."""
    call = f"call_{t:08d}"
    ts = 1_700_000_000_000 + t * 1_000
    row = decision_row(t)
    return [
        TurnStarted(turn=t, timestamp=ts),
        MessageCommitted(
            message=Message(role="user", content=f"What changed in release {t}?"),
            timestamp=ts,
        ),
        LlmStarted(iteration=1, model="gpt-4o-mini", timestamp=ts),
        LlmEnded(
            iteration=1,
            content="",
            tool_call_count=1,
            usage={"prompt_tokens": 812, "completion_tokens": 41},
            stop_reason="tool_calls",
            duration_ms=420,
            timestamp=ts,
        ),
        MessageCommitted(
            message=Message(
                role="assistant",
                tool_calls=(
                    ToolCallRequest(
                        id=call, name="search_documents", args={"query": f"release {t}"}
                    ),
                ),
            ),
            timestamp=ts,
        ),
        ToolStarted(
            tool_name="search_documents",
            tool_call_id=call,
            iteration=1,
            args={"query": f"release {t}"},
            timestamp=ts,
        ),
        DecisionFiled(row=row, timestamp=ts),
        ToolDispatched(
            tool_name="search_documents",
            tool_call_id=call,
            args={"query": f"release {t}"},
            timestamp=ts,
        ),
        ToolEnded(
            tool_name="search_documents",
            tool_call_id=call,
            result={"hits": [f"notes/{t}.md", f"changelog/{t}.md"]},
            duration_ms=35,
            timestamp=ts,
        ),
        MessageCommitted(
            message=Message(
                role="tool",
                content='{"hits": ["notes.md", "changelog.md"]}',
                tool_call_id=call,
                tool_name="search_documents",
            ),
            timestamp=ts,
        ),
        LlmStarted(iteration=2, model="gpt-4o-mini", timestamp=ts),
        LlmEnded(
            iteration=2,
            content=f"Release {t} fixed the importer and added retries.",
            usage={"prompt_tokens": 930, "completion_tokens": 58},
            stop_reason="stop",
            duration_ms=610,
            timestamp=ts,
        ),
        MessageCommitted(
            message=Message(
                role="assistant",
                content=f"Release {t} fixed the importer and added retries.",
            ),
            timestamp=ts,
        ),
        TurnEnded(
            turn=t,
            final_content=f"Release {t} fixed the importer and added retries.",
            timestamp=ts,
        ),
    ]


def best_of(runs: list[float]) -> float:
    """The best rate of a few runs: the machine's noise only ever slows a run."""
    return max(runs)


async def timed(n: int, body: Callable[[], Awaitable[Any]]) -> float:
    """``n`` units over the seconds ``body`` takes: units per second."""
    gc.collect()
    start = time.perf_counter()
    await body()
    return n / (time.perf_counter() - start)


# -- appends -------------------------------------------------------------


async def bench_store_append(
    url: str, sessions: int, rows: int, tag: str
) -> tuple[float, RedisEventStore]:
    store = RedisEventStore.from_url(url)
    batches = [decision_batch(n) for n in range(rows)]

    async def one_session(s: int) -> None:
        sid = f"{tag}-{s}"
        seq = 0
        for batch in batches:
            seq = await store.append(sid, batch, seq)

    async def body() -> None:
        await asyncio.gather(*(one_session(s) for s in range(sessions)))

    rate = await timed(sessions * rows, body)
    return rate, store


async def bench_raw_xadd(
    client: aioredis.Redis, sessions: int, rows: int, tag: str, pipeline: int
) -> float:
    # The same payloads the store writes: the row's entry (bytes and hash) to
    # the session's stream, and its fact to a facts stream.
    stamped, (record,) = seal("bench", decision_batch(0), after_seq=0, prev_hash="")
    (filed,) = stamped
    assert isinstance(filed, DecisionFiled)
    row = {"seq": record.seq, "data": record.data, "hash": record.hash}
    fact = {
        "session_id": "bench",
        "seq": record.seq,
        "data": encode_event(fact_of(filed)),
    }
    facts_key = f"raw:facts:{{{tag}}}"
    total = sessions * rows * 2

    async def body() -> None:
        pipe = client.pipeline(transaction=False)
        queued = 0
        for _row in range(rows):
            for s in range(sessions):
                key = f"raw:{{{tag}-{s}}}:events"
                for k, f in ((key, row), (facts_key, fact)):
                    pipe.xadd(k, f)  # type: ignore[arg-type]
                    queued += 1
                    if queued == pipeline:
                        await pipe.execute()
                        pipe = client.pipeline(transaction=False)
                        queued = 0
        if queued:
            await pipe.execute()

    return await timed(total, body) / 2


async def bench_redispy_append(
    client: aioredis.Redis,
    sessions: int,
    rows: int,
    tag: str,
    *,
    lua: bytes = APPEND_LUA,
) -> float:
    """The store's append work on redis-py's primitives, ideally group-committed.

    Every session's next append (the script with its seq check and head
    record, then the ``XADD`` of the row's projected fact) goes into one
    ``pipeline(transaction=False)`` per round, the best batching a group
    commit can reach. ``lua`` is the script (``APPEND_LUA_NO_HEAD`` prices
    the head write).
    """
    script = client.register_script(lua)
    batches = [decision_batch(n) for n in range(rows)]
    heads = {s: (0, "") for s in range(sessions)}
    facts = shard_keys(0)[0] + tag

    async def body() -> None:
        for batch in batches:
            pipe = client.pipeline(transaction=False)
            sealed = {}
            for s in range(sessions):
                sid = f"{tag}-{s}"
                seq, prev = heads[s]
                stamped, records = seal(sid, batch, after_seq=seq, prev_hash=prev)
                sealed[s] = records
                head = encode_head(head_of(sid, records[-1].seq, records[-1].hash))
                args: list[Any] = [seq, prev, f"bench:{seq}", head]
                for r in records:
                    args += [r.data, r.hash]
                keys = [stream_key(sid), head_key(sid)]
                await script(keys=keys, args=args, client=pipe)
                row = stamped[-1]
                assert isinstance(row, DecisionFiled)
                pipe.xadd(
                    facts,
                    {
                        "session_id": sid,
                        "seq": records[-1].seq,
                        "data": encode_event(fact_of(row)),
                    },
                    maxlen=1_000_000,
                    approximate=True,
                )
            replies = await pipe.execute()
            for s in range(sessions):
                ok, last = replies[2 * s]
                assert ok == 1, replies[2 * s]
                heads[s] = (last, sealed[s][-1].hash)

    return await timed(sessions * rows, body)


# -- reads ---------------------------------------------------------------


async def bench_store_read(store: RedisEventStore, sid: str, n: int) -> float:
    async def body() -> None:
        records = await store.read(sid)
        events = [decode_event(r.data) for r in records]
        assert len(events) == n, len(events)

    return await timed(n, body)


async def bench_raw_xrange(
    client: aioredis.Redis, key: str, n: int, page: int, *, keep: bool = True
) -> float:
    """Raw paged ``XRANGE`` on redis-py. With ``keep`` (the read target's
    yardstick) it keeps what it reads, as ``store.read`` does — it returns
    the whole stream; without, it drops each page, so it pays no garbage
    collection for holding the stream (the yardstick before issue 7)."""

    async def body() -> None:
        got: list[Any] = []
        count = 0
        start = "-"
        while True:
            entries: Any = await client.xrange(key, start, "+", count=page)
            count += len(entries)
            if keep:
                got.extend(entries)
            if len(entries) < page:
                break
            start = "(" + entries[-1][0].decode()
        assert count == n, count

    return await timed(n, body)


async def bench_redispy_read(client: aioredis.Redis, key: str, n: int) -> float:
    """``store.read`` + decode on redis-py's ``xrange`` instead of ``Wire``."""

    async def body() -> None:
        records: list[StoredEvent] = []
        start = "0-1"
        while True:
            page: Any = await client.xrange(key, start, "+", count=2_000)
            for _id, f in page:
                records.append(
                    StoredEvent(
                        seq=int(f[b"seq"]), data=f[b"data"], hash=f[b"hash"].decode()
                    )
                )
            if len(page) < 2_000:
                break
            start = f"0-{records[-1].seq + 1}"
        events = [decode_event(r.data) for r in records]
        assert len(events) == n, len(events)

    return await timed(n, body)


# -- activation (R19) -------------------------------------------------------


async def bench_activation(store: RedisEventStore, sid: str, n: int) -> float:
    """A first activation as a host makes it: head, read, verify, fold."""

    async def body() -> None:
        journal = Journal(store, sid, Listeners(), lambda: 0)
        await journal.activate()
        assert journal.flushed_seq == n, journal.flushed_seq

    return await timed(n, body)


async def bench_unverified_activation(
    store: RedisEventStore, sid: str, n: int
) -> float:
    """The same read and fold, verifying nothing (activation before R19)."""

    async def body() -> None:
        folder = Folder(sid)
        for record in await store.read(sid):
            folder.apply(record.decode())
        assert folder.last_seq == n, folder.last_seq

    return await timed(n, body)


# -- fold ----------------------------------------------------------------


def fold_events(n: int) -> list[Event | UnknownEvent]:
    events: list[Event] = []
    t = 0
    while len(events) < n:
        t += 1
        events.extend(realistic_turn(t))
    _, records = seal("bench-fold", events[:n], after_seq=0, prev_hash="")
    return [decode_event(r.data) for r in records]


def bench_fold(events: list[Event | UnknownEvent], repeat: int) -> float:
    rates = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        state = fold(events)
        rates.append(len(events) / (time.perf_counter() - start))
        assert state.last_seq == len(events)
    return best_of(rates)


# -- bytes per turn --------------------------------------------------------


async def bytes_per_turn() -> tuple[int, int]:
    """``(stored data bytes, events)`` of one governed one-tool turn.

    The turn of ``bench/turns.py``: three ``allow()`` links at before-tool and
    one ``allow(value, why)`` transform at after-tool, on a memory store.
    """
    from bench.turns import AnswerModel, governed_links, lookup
    from helmlog import Agent
    from helmlog.events import MemoryEventStore

    store = MemoryEventStore()
    agent = (
        Agent.create(provider=AnswerModel(1), model="bench", store=store)
        .system("Look up.")
        .tool(lookup)
        .tool_middleware(*governed_links())
        .build()
    )
    await agent.run("Look my orders up.")
    (sid,) = await store.sessions()
    records = await store.read(sid)
    return sum(len(r.data) for r in records), len(records)


# -- main ----------------------------------------------------------------


async def run(quick: bool) -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from tests.fixtures_redis import RedisServer

    sessions = 16 if quick else 64
    rows = 50 if quick else 300
    read_n = 5_000 if quick else 50_000
    fold_n = 20_000 if quick else 200_000
    repeat = 1 if quick else 3

    with RedisServer() as server:
        client = aioredis.Redis.from_url(server.url)
        try:
            append_runs, raw_runs, single_runs, redispy_runs = [], [], [], []
            no_head_runs: list[float] = []
            # Appends are the noisiest figure on a shared machine (the raw
            # baseline swings most): more interleaved rounds, best of each.
            append_rounds = 1 if quick else 2 * repeat
            for r in range(append_rounds):
                rate, store = await bench_store_append(
                    server.url, sessions, rows, f"a{r}"
                )
                await store.close()
                append_runs.append(rate)
                raw_runs.append(
                    await bench_raw_xadd(
                        client, sessions, rows, f"x{r}", pipeline=1_000
                    )
                )
                redispy_runs.append(
                    await bench_redispy_append(client, sessions, rows, f"p{r}")
                )
                no_head_runs.append(
                    await bench_redispy_append(
                        client, sessions, rows, f"h{r}", lua=APPEND_LUA_NO_HEAD
                    )
                )
                rate, store = await bench_store_append(
                    server.url, 1, rows * 4, f"one{r}"
                )
                await store.close()
                single_runs.append(rate)
            facts = sum(
                [await client.xlen(shard_keys(n)[0]) for n in range(DEFAULT_SHARDS)]
            )
            expected_facts = append_rounds * (sessions * rows + rows * 4)
            assert facts == expected_facts, (facts, expected_facts)

            store = RedisEventStore.from_url(server.url)
            sid = "read-bench"
            seq = 0
            t = 0
            while seq < read_n:
                t += 1
                batch = realistic_turn(t)[: read_n - seq]
                seq = await store.append(sid, batch, seq)
            key = f"helmlog:{{{sid}}}:events"
            read_runs, xrange_runs, redispy_read_runs = [], [], []
            paged_runs: list[float] = []
            # Reads take a fraction of a second each: more runs, less noise.
            for _ in range(repeat * 4):
                read_runs.append(await bench_store_read(store, sid, read_n))
                xrange_runs.append(await bench_raw_xrange(client, key, read_n, 2_000))
                paged_runs.append(
                    await bench_raw_xrange(client, key, read_n, 2_000, keep=False)
                )
                redispy_read_runs.append(await bench_redispy_read(client, key, read_n))
            await store.close()

            # R19: a keyed stream's first activation, verified and not.
            keyed = RedisEventStore.from_url(server.url, chain_key=b"bench-chain-key")
            sid = "activation-bench"
            seq = t = 0
            while seq < read_n:
                t += 1
                seq = await keyed.append(sid, realistic_turn(t)[: read_n - seq], seq)
            verified_runs, unverified_runs = [], []
            for _ in range(repeat * 4):
                verified_runs.append(await bench_activation(keyed, sid, read_n))
                unverified_runs.append(
                    await bench_unverified_activation(keyed, sid, read_n)
                )
            await keyed.close()
        finally:
            await client.aclose()

    fold_rate = bench_fold(fold_events(fold_n), repeat)
    turn_bytes, turn_events = await bytes_per_turn()
    append_rate, raw_rate = best_of(append_runs), best_of(raw_runs)
    read_rate, xrange_rate = best_of(read_runs), best_of(xrange_runs)
    return {
        "sessions": sessions,
        "rows_per_session": rows,
        "single_session_rows_per_s": best_of(single_runs),
        "append_runs": append_runs,
        "raw_runs": raw_runs,
        "read_runs": read_runs,
        "xrange_runs": xrange_runs,
        "append_rows_per_s": append_rate,
        "redispy_append_rows_per_s": best_of(redispy_runs),
        "no_head_append_rows_per_s": best_of(no_head_runs),
        "activation_events_per_s": best_of(verified_runs),
        "unverified_activation_events_per_s": best_of(unverified_runs),
        "redispy_read_rows_per_s": best_of(redispy_read_runs),
        "raw_xadd_per_s": raw_rate,
        "fold_events_per_s": fold_rate,
        "read_rows_per_s": read_rate,
        "raw_xrange_per_s": xrange_rate,
        "paged_xrange_per_s": best_of(paged_runs),
        "fold_events": fold_n,
        "read_rows": read_n,
        "bytes_per_turn": turn_bytes,
        "events_per_turn": turn_events,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    args = parser.parse_args()
    r = asyncio.run(run(args.quick))

    append_ratio = r["append_rows_per_s"] / r["raw_xadd_per_s"]
    read_ratio = r["read_rows_per_s"] / r["raw_xrange_per_s"]
    paged_ratio = r["read_rows_per_s"] / r["paged_xrange_per_s"]
    ok = {
        "append": append_ratio >= TARGETS["append"],
        "fold": r["fold_events_per_s"] >= TARGETS["fold"],
        "read": read_ratio >= TARGETS["read"],
        "bytes": r["bytes_per_turn"] <= BYTES_PER_TURN_TARGET,
    }

    wire_append = r["append_rows_per_s"] / r["redispy_append_rows_per_s"]
    head_ratio = r["redispy_append_rows_per_s"] / r["no_head_append_rows_per_s"]
    # Time with verification over time without (rates are inverse times).
    verify_cost = r["unverified_activation_events_per_s"] / r["activation_events_per_s"]
    wire_read = r["read_rows_per_s"] / r["redispy_read_rows_per_s"]

    def mark(name: str) -> str:
        return "ok  " if ok[name] else "MISS"

    print("helmlog ledger benchmark (best of runs; a row = one decision.filed entry)")
    print(
        f"  [{mark('append')}] append   {r['append_rows_per_s']:>11,.0f} rows/s  "
        f"({r['sessions']} sessions x {r['rows_per_session']} rows, group-committed)"
    )
    print(
        f"         raw xadd {r['raw_xadd_per_s']:>11,.0f} rows/s  "
        f"(pipelined XADD of the same entries) -> {append_ratio:.0%} "
        f"(target ≥ {TARGETS['append']:.0%})"
    )
    print(
        f"         one session alone {r['single_session_rows_per_s']:,.0f} rows/s "
        "(one round trip per batch)"
    )
    print(
        f"  [{mark('read')}] read     {r['read_rows_per_s']:>11,.0f} rows/s  "
        f"(store.read + decode, {r['read_rows']:,} events)"
    )
    print(
        f"         raw xrange {r['raw_xrange_per_s']:>9,.0f} rows/s  "
        f"(keeping what it reads) -> {read_ratio:.0%} "
        f"(target ≥ {TARGETS['read']:.0%})"
    )
    print(
        f"         raw xrange {r['paged_xrange_per_s']:>9,.0f} rows/s  "
        f"(dropping each page) -> {paged_ratio:.0%}"
    )
    print(
        f"         redis-py primitives: append {r['redispy_append_rows_per_s']:,.0f}"
        f" rows/s, read {r['redispy_read_rows_per_s']:,.0f} rows/s "
        f"(Wire x{wire_append:.2f} / x{wire_read:.2f})"
    )
    print(
        f"         head record: the append script with it {head_ratio:.0%} of the "
        f"rate without (redis-py, {r['no_head_append_rows_per_s']:,.0f} rows/s "
        "without)"
    )
    print(
        f"         activation {r['activation_events_per_s']:>9,.0f} events/s  "
        f"(head, read, HMAC chain verified, fold; {r['read_rows']:,} events) vs "
        f"{r['unverified_activation_events_per_s']:,.0f} unverified -> "
        f"verify_cost x{verify_cost:.2f}"
    )
    print(
        f"  [{mark('fold')}] fold     {r['fold_events_per_s']:>11,.0f} events/s "
        f"({r['fold_events']:,} decoded events; target ≥ {TARGETS['fold']:,.0f})"
    )
    print(
        f"  [{mark('bytes')}] bytes    {r['bytes_per_turn']:>11,} per governed "
        f"one-tool turn ({r['events_per_turn']} events; before "
        f"{BYTES_PER_TURN_BEFORE:,} in {EVENTS_PER_TURN_BEFORE}; "
        f"target ≤ {BYTES_PER_TURN_TARGET:,})"
    )
    line = {
        "bench": "ledger",
        "append_rows_per_s": round(r["append_rows_per_s"]),
        "raw_xadd_per_s": round(r["raw_xadd_per_s"]),
        "append_ratio": round(append_ratio, 3),
        "single_session_rows_per_s": round(r["single_session_rows_per_s"]),
        "fold_events_per_s": round(r["fold_events_per_s"]),
        "read_rows_per_s": round(r["read_rows_per_s"]),
        "raw_xrange_per_s": round(r["raw_xrange_per_s"]),
        "read_ratio": round(read_ratio, 3),
        "paged_xrange_per_s": round(r["paged_xrange_per_s"]),
        "read_ratio_vs_paged_xrange": round(paged_ratio, 3),
        "wire_vs_redispy_append": round(wire_append, 3),
        "wire_vs_redispy_read": round(wire_read, 3),
        "bytes_per_turn": r["bytes_per_turn"],
        "bytes_per_turn_before": BYTES_PER_TURN_BEFORE,
        "bytes_per_turn_target": BYTES_PER_TURN_TARGET,
        "events_per_turn": r["events_per_turn"],
        "head_write_ratio": round(head_ratio, 3),
        "activation_events_per_s": round(r["activation_events_per_s"]),
        "unverified_activation_events_per_s": round(
            r["unverified_activation_events_per_s"]
        ),
        "verify_cost": round(verify_cost, 3),
        "targets_met": all(ok.values()),
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
