"""Verifying a stored session: its chain, its head, and the upgrade to heads.

Pattern: read-only views over a store that return data (a ``SessionVerdict``,
         ``(session, ok, line)`` rows), beside ``verify_records``,
         ``read_verified`` and ``refuse_headless``.
Role:    events layer; ``helmlog verify`` and ``helmlog upgrade-heads`` print
         what these return; an auditor may call them from a program.

Laws: R18 (intact, or the first broken seq named), R3, R4, R19 (a cut tail or
a deleted stream is named), R25, R26 (a stream without its head on a store
that writes heads is broken; ``upgrade_heads`` is explicit).
"""

from __future__ import annotations

import msgspec

from ._chain import StoredEvent, StreamHead, verify_records
from ._errors import StreamTamperedError
from ._store import EventStore, refuse_headless


class SessionVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """What ``verify_session`` found: how many events, the head, the first break."""

    count: int
    head: StreamHead | None
    broken: int | None = None
    reason: str | None = None
    hint: str | None = None

    def text(self, session_id: str) -> str:
        """The verdict as one line (what ``helmlog verify`` prints)."""
        if self.broken is None:
            chain = "" if self.head is not None else " (no head record: chain only)"
            return f"intact: session {session_id} — {self.count} events verify{chain}"
        said = self.head.seq if self.head is not None else "?"
        if self.reason == "truncated":
            what = f"truncated after seq {self.count} (head says {said})"
        elif self.reason == "deleted" and self.head is None:
            what = "deleted: its stream and head record are gone (R25)"
        elif self.reason == "deleted":
            what = f"deleted: its stream is gone (head says {said})"
        elif self.reason == "head":
            what = f"its head record does not verify (head says {said})"
        elif self.reason == "no-head":
            what = f"its head record is missing ({self.count} events, no head)"
        else:
            what = f"the chain breaks at seq {self.broken} ({self.reason})"
        hint = f"; {self.hint}" if self.hint else ""
        return f"broken: session {session_id} — {what}{hint}"


async def verify_session(
    store: EventStore, session_id: str, key: bytes | None
) -> SessionVerdict:
    """The chain and the head record of one session, checked (R3, R19)."""
    head: StreamHead | None = None
    try:
        head = await store.read_head(session_id)
    except StreamTamperedError as exc:  # a head no append wrote
        records = await store.read(session_id)
        return SessionVerdict(
            count=len(records), head=None, broken=exc.seq, reason="head"
        )
    records = await store.read(session_id)
    if not records and head is None and await store.remembers(session_id):
        # R25: the store created it, and its stream and head are gone.
        return SessionVerdict(count=0, head=None, broken=1, reason="deleted")
    try:
        verify_records(session_id, records, key, head=head)
        await refuse_headless(store, session_id, records, head)
    except StreamTamperedError as exc:
        hint = _key_hint(session_id, records, key) if exc.seq == 1 else None
        if exc.reason == "no-head":
            hint = (
                "this store writes head records, so a stream without one lost it; "
                "`helmlog upgrade-heads` is only for streams written before heads"
            )
        return SessionVerdict(
            count=len(records), head=head, broken=exc.seq, reason=exc.reason, hint=hint
        )
    return SessionVerdict(count=len(records), head=head)


async def upgrade_heads(
    store: EventStore, sessions: list[str] | None = None
) -> list[tuple[str, bool, str]]:
    """Give streams written before head records their heads (R26).

    The explicit upgrade: each session (every one the store holds when
    ``sessions`` is ``None``) is verified by its chain under the store's
    chain key and given the head of its last record; a session with its head
    is only remembered (R25). Returns ``(session, ok, line)`` per session;
    a stream that fails its chain is not upgraded (``ok`` false).
    """
    out: list[tuple[str, bool, str]] = []
    for session_id in sessions if sessions is not None else await store.sessions():
        try:
            head = await store.upgrade_head(session_id)
        except StreamTamperedError as exc:
            why = f"the chain breaks at seq {exc.seq} ({exc.reason})"
            line = f"broken: session {session_id} — {why}; not upgraded"
            out.append((session_id, False, line))
            continue
        if head is not None:
            line = f"upgraded: session {session_id} — head at seq {head.seq}"
        else:
            line = f"kept: session {session_id} — it has its head record"
        out.append((session_id, True, line))
    return out


def _key_hint(
    session_id: str, records: list[StoredEvent], key: bytes | None
) -> str | None:
    """Why the very first hash may fail: the chain key, not an edit.

    A first record that fails on its hash fails for one edit as for a key
    the writer did not use; the hint says which key would verify it, when
    that is knowable: none (the stream was written without one), or some
    other (a wrong ``$HELMLOG_CHAIN_KEY``, or none set for a keyed stream).
    """
    if not records:
        return None
    if key is not None:
        try:
            verify_records(session_id, records[:1], None)
        except StreamTamperedError:
            return "the chain key may be wrong ($HELMLOG_CHAIN_KEY)"
        return "the stream was written without a chain key: unset $HELMLOG_CHAIN_KEY"
    return "the stream may be keyed: set $HELMLOG_CHAIN_KEY to its chain key"
