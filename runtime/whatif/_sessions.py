"""What-if over stored sessions: verified records in, a report out.

Pattern: read (or take) each session's records, verify them with the chain
         key (and the head, from a store), decode once, and re-judge them
         with ``WhatIf``; ``sessions_since`` picks sessions by activity.
Role:    runtime layer, exported by ``helmlog.runtime.lowlevel``; the face
         re-exports ``whatif`` (``helmlog.whatif``); ``helmlog whatif``
         runs ``whatif_store`` over ``sessions_since``.

Laws: issue 13 (a typed error for an unknown session), R19 (every session
verified before a single decision is re-judged; nothing runs or appends).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from helmlog.events import Event, EventStore, StoredEvent, UnknownEvent, verify_records

from .._agent import Agent
from .._errors import UnknownSessionError
from ._report import WhatIfReport
from ._whatif import WhatIf

Records = Iterable[StoredEvent] | Mapping[str, Sequence[StoredEvent]]


async def whatif(
    records: Records, agent: Agent, *, key: bytes | None = None
) -> WhatIfReport:
    """Re-judge recorded sessions under ``agent``'s rules; nothing runs.

    Args:
        records: stored records (``await store.read(session_id)``) of one or
            more sessions, in order, or a mapping of session id to records.
        agent: the changed agent. Its chains, permission gate, tools'
            validation and check-ins, and window decide; its provider and
            tools' ``execute`` are never called.
        key: the chain key the records were hashed under (default: the
            agent's store's).

    Raises:
        StreamTamperedError: a session's records fail verification (R19);
            nothing of any session is re-judged.
    """
    chain_key = key if key is not None else agent.config.store.chain_key
    sessions = _grouped(records)
    verified = [(sid, _verified(sid, recs, chain_key)) for sid, recs in sessions]
    engine = WhatIf(agent.config)
    return WhatIfReport(
        sessions=tuple([await engine.session(sid, ev) for sid, ev in verified])
    )


def _verified(
    session_id: str,
    records: Sequence[StoredEvent],
    key: bytes | None,
    head: Any = None,
) -> list[Event | UnknownEvent]:
    decoded: list[Event | UnknownEvent] = []
    verify_records(session_id, records, key, head=head, decoded=decoded)
    return decoded


def _grouped(records: Records) -> list[tuple[str, list[StoredEvent]]]:
    """Records by session, in order of first appearance; seq 1 opens one."""
    if isinstance(records, Mapping):
        return [(sid, list(recs)) for sid, recs in records.items()]
    groups: dict[str, list[StoredEvent]] = {}
    current: list[StoredEvent] | None = None
    for record in records:
        sid = record.session_id
        if not sid and (record.seq == 1 or current is None):
            sid = record.decode().session_id
        if sid:
            current = groups.setdefault(sid, [])
        assert current is not None
        current.append(record)
    return list(groups.items())


async def whatif_store(
    store: EventStore,
    session_ids: Sequence[str],
    agent: Agent,
    *,
    key: bytes | None = None,
    where: str = "",
    advance: Callable[[], None] | None = None,
) -> WhatIfReport:
    """Re-judge sessions read from ``store``, each verified with its head.

    Raises:
        UnknownSessionError: the store holds no such session.
        StreamTamperedError: a stream fails verification (R19).
    """
    chain_key = key if key is not None else store.chain_key
    engine = WhatIf(agent.config)
    judged = []
    for sid in session_ids:
        head = await store.read_head(sid)
        records = await store.read(sid)
        if not records and head is None:
            raise UnknownSessionError(session_id=sid, store=where)
        judged.append(
            await engine.session(sid, _verified(sid, records, chain_key, head))
        )
        if advance is not None:
            advance()
    return WhatIfReport(sessions=tuple(judged))


async def sessions_since(store: EventStore, since_ms: int | None) -> list[str]:
    """Every session of the store (``--all``), or those active since a time:
    whose last event's timestamp is at or after ``since_ms``."""
    ids = sorted(await store.sessions())
    if since_ms is None:
        return ids
    kept = []
    for sid in ids:
        tail = await store.read(sid)
        if tail and (tail[-1].decode().timestamp or 0) >= since_ms:
            kept.append(sid)
    return kept
