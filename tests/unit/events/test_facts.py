"""R4 — the facts projection: ``fact_of``, ``watched`` and the stores' rule.

Pattern: law-named unit tests on sealed streams built from events, in the
         new form (rows only), the old form (each row followed by its stored
         fact) and a mix of both.
Role:    unit tests for events/_facts.py.
Emits:   nothing.

Laws: R4 (a fact is a projection of its row, with the row's envelope; one
fact per row, whichever writer stored the stream), G49 (no value), R12 (the
stored encoding: no defaults, the session id at seq 1 only).
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from helmlog.events import (
    DecisionFiled,
    Event,
    EventDecodeError,
    MiddlewareDecision,
    MiddlewareDecisionEvent,
    StoredEvent,
    TurnStarted,
    decode_event,
    fact_of,
    verify_chain,
    watched,
)
from helmlog.events._facts import fact_records
from helmlog.events.lowlevel import fact_for, seal, stored_encoding
from helmlog.events.memory import MemoryEventStore


def row(n: int, *, valued: bool = False) -> MiddlewareDecision:
    extra: dict[str, Any] = {}
    if valued:
        extra = {"changed": True, "why": "masked", "before": "secret", "after": "x"}
    return MiddlewareDecision(
        middleware=f"link-{n}",
        moment="after-tool",
        at="tool",
        iteration=1,
        outcome="allow",
        changed=extra.pop("changed", False),
        tool_name="t",
        tool_call_id=f"c{n}",
        **extra,
    )


def sealed(events: list[Event]) -> list[StoredEvent]:
    _, records = seal("s-1", events, after_seq=0, prev_hash="")
    return records


def facts_seen(records: list[StoredEvent]) -> list[MiddlewareDecisionEvent]:
    return [
        e
        for e in watched(r.decode() for r in records)
        if isinstance(e, MiddlewareDecisionEvent)
    ]


def test_r4_fact_of_carries_the_rows_envelope_and_no_value() -> None:
    """R4/G49: the fact has the row's session, seq, timestamp and prev_hash."""
    (record,) = sealed([TurnStarted(turn=1)])
    filed = DecisionFiled(
        row=row(1, valued=True),
        session_id="s-1",
        seq=2,
        timestamp=17,
        prev_hash=record.hash,
    )
    fact = fact_of(filed)
    assert ("s-1", 2, 17, record.hash, False) == (
        fact.session_id,
        fact.seq,
        fact.timestamp,
        fact.prev_hash,
        fact.replayed,
    )
    assert msgspec.structs.replace(fact_for(filed.row), **_envelope(fact)) == fact
    assert b"secret" not in msgspec.json.encode(fact)


def _envelope(fact: MiddlewareDecisionEvent) -> dict[str, Any]:
    return {
        "session_id": fact.session_id,
        "seq": fact.seq,
        "timestamp": fact.timestamp,
        "prev_hash": fact.prev_hash,
    }


def test_r4_watched_gives_one_fact_per_row_in_either_form() -> None:
    """R4: new rows become their facts; an old row's stored fact is kept; a
    mixed stream (old, then new) still has one fact per row."""
    old = [DecisionFiled(row=row(1)), fact_for(row(1))]
    new = [DecisionFiled(row=row(2)), TurnStarted(turn=2), DecisionFiled(row=row(3))]
    records = sealed([TurnStarted(turn=1), *old, *new])
    facts = facts_seen(records)
    assert [3, 4, 6] == [f.seq for f in facts]
    assert ["link-1", "link-2", "link-3"] == [f.middleware for f in facts]
    seen = list(watched(r.decode() for r in records))
    assert "decision.filed" not in {e.type for e in seen}
    assert [1, 3, 4, 5, 6] == [e.seq for e in seen]


def _events(kinds: list[str]) -> list[Event]:
    """A turn start per ``"turn"``, a row per ``"row"``, a row and its stored
    fact (an older writer's form) per ``"old-row"``."""
    events: list[Event] = []
    for n, kind in enumerate(kinds):
        if kind == "turn":
            events.append(TurnStarted(turn=n))
        else:
            events.append(DecisionFiled(row=row(n, valued=True)))
            if kind == "old-row":
                events.append(fact_for(row(n, valued=True)))
    return events


@given(
    st.lists(
        st.sampled_from(["row", "old-row", "turn"]),
        max_size=12,
    )
)
def test_r4_stores_and_watchers_apply_the_same_rule(kinds: list[str]) -> None:
    """R4: the facts a store publishes are the facts watchers see, by seq and
    bytes, for any mix of old and new rows."""
    records = sealed(_events(kinds))
    published = fact_records("s-1", records)
    seen = facts_seen(records)
    assert [f.seq for f in seen] == [seq for seq, _ in published]
    assert seen == [decode_event(data) for _seq, data in published]
    assert len([k for k in kinds if k != "turn"]) == len(published)
    assert [] == [data for _seq, data in published if b"secret" in data]


@given(
    st.lists(st.sampled_from(["row", "old-row", "turn"]), max_size=12),
    st.integers(min_value=0, max_value=50),
)
def test_r4_projecting_from_sealed_events_equals_decoding_the_records(
    kinds: list[str], after: int
) -> None:
    """R4: a writer that hands ``fact_records`` the events ``seal`` stamped
    publishes byte for byte what decoding the records would (the Redis append
    path skips the decode)."""
    events: list[Event] = []
    for n, kind in enumerate(kinds):
        if kind == "turn":
            events.append(TurnStarted(turn=n))
        else:
            events.append(DecisionFiled(row=row(n, valued=True), timestamp=n))
            if kind == "old-row":
                events.append(fact_for(row(n, valued=True)))
    stamped, records = seal("s-1", events, after_seq=after, prev_hash="p")
    assert fact_records("s-1", records) == fact_records("s-1", records, stamped)


def test_r4_the_store_rule_restores_the_session_of_a_bare_record() -> None:
    """R4: a row stored without its session id publishes a fact naming it."""
    records = sealed([TurnStarted(turn=1), DecisionFiled(row=row(1))])
    bare = msgspec.structs.replace(records[1], session_id="")
    ((seq, data),) = fact_records("s-1", [bare])
    fact = decode_event(data)
    assert (2, "s-1") == (seq, fact.session_id)


def test_r3_stored_encoding_is_what_seal_hashes() -> None:
    """R3/R12: decoded events re-encode to their stored bytes: no defaults,
    the session id at seq 1 only, ``replayed`` never."""
    records = sealed([TurnStarted(turn=1), DecisionFiled(row=row(1))])
    events = [r.decode() for r in records]
    assert [r.data for r in records] == [
        stored_encoding(msgspec.structs.replace(e, replayed=True))
        for e in events
        if isinstance(e, Event)
    ]
    assert b'"replayed"' not in b"".join(r.data for r in records)
    assert None is verify_chain([e for e in events if isinstance(e, Event)])


def _filed_strategy() -> st.SearchStrategy[Any]:
    import msgspec.inspect as mi

    from .test_codec_properties import _strategy

    return _strategy(mi.type_info(DecisionFiled))


@given(
    _filed_strategy(),
    st.integers(min_value=1, max_value=9),
    st.one_of(st.none(), st.integers(min_value=0, max_value=400)),
    st.binary(max_size=3),
)
def test_r4_a_rows_fact_read_from_its_bytes_is_the_decoded_rows_fact(
    filed: DecisionFiled, seq: int, cut: int | None, splice: bytes
) -> None:
    """R4, G49, issue 29 item 3: a store that holds only records publishes,
    for any row and for damaged bytes too, what decoding the record and
    projecting the row gives: the same fact bytes, or no fact where the
    decoder refuses the record. The session id is put back only where the
    bytes lack it: damaged bytes that name another session publish the name
    they decode to, as every reader of them sees it (``_decoded``)."""
    _, (record,) = seal("s-1", [filed], after_seq=seq - 1, prev_hash="p")
    if cut is not None:  # damaged bytes: a store must not publish them either
        data = record.data[:cut] + splice + record.data[cut:]
        record = StoredEvent(seq=seq, data=data, hash="h", type=record.type)
    try:
        decoded = decode_event(record.data)
        if not decoded.session_id:  # put back only where the bytes lack it
            decoded = msgspec.structs.replace(decoded, session_id="s-1")
        expected = (
            [(seq, msgspec.json.encode(fact_of(decoded)))]
            if isinstance(decoded, DecisionFiled)
            else []
        )
    except EventDecodeError:  # the decoder's refusal: no fact
        expected = []
    assert expected == fact_records("s-1", [record])


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["s-1", "s-2"]),
            st.lists(st.sampled_from(["row", "old-row", "turn"]), max_size=5),
        ),
        max_size=6,
    ),
    st.integers(min_value=0, max_value=6),
)
async def test_r4_a_memory_stores_facts_read_later_are_each_appends_projection_in_order(
    batches: list[tuple[str, list[str]]], group_at: int
) -> None:
    """R4 (issue 29 item 3): the memory store projects its facts when the log
    is read; what a reader gets, and where a group created meanwhile starts,
    is what publishing each append's ``fact_records`` at once gave, in
    append order, with the same ids."""
    store = MemoryEventStore()
    expected: list[tuple[str, str, int, bytes]] = []
    heads: dict[str, tuple[int, str]] = {}
    group_start = 0
    for i, (sid, kinds) in enumerate(batches):
        if i == group_at:
            await store.create_facts_group("late", from_start=False)
            group_start = len(expected)
        events = _events(kinds)
        after, prev = heads.get(sid, (0, ""))
        _, records = seal(sid, events, after_seq=after, prev_hash=prev)
        await store.append_sealed(sid, records, after)
        if records:
            heads[sid] = (records[-1].seq, records[-1].hash)
        for seq, data in fact_records(sid, records):
            expected.append((str(len(expected) + 1), sid, seq, data))
    assert 0 == await store.publish_facts("s-1")  # the cursor is at the head
    got = [(f.id, f.session_id, f.seq, f.data) for f in await store.read_facts()]
    assert expected == got
    if group_at < len(batches):
        taken = await store.read_facts_group("late", "c", count=1_000)
        assert expected[group_start:] == [
            (d.fact.id, d.fact.session_id, d.fact.seq, d.fact.data) for d in taken
        ]
