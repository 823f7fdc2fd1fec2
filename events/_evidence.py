"""Evidence from a store: a session's bundle and the log's signed checkpoint.

Pattern: read-only views over a store that implements ``HeadsLog``, beside
         ``verify_session``: read the session's verified stream, find its
         latest signed head, make sure its leaf is in the log (repair appends
         it), sign a checkpoint of the log, and gather the proofs.
Role:    events layer; ``helmlog evidence SESSION`` and ``helmlog evidence
         checkpoint`` print what these return; a program may call them too.

Laws: R19 (the stream is verified before anything is built from it), issue
30 items 3–5 (inclusion of the latest head; consistency from sizes an
auditor holds). Why the checkpoint is signed here: a checkpoint is the log's
size and root now; whoever holds the key signs the one they hand out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ._chain import StoredEvent, type_of
from ._errors import StoreError
from ._evidence_events import HeadSigned
from ._headlog import HeadsLog
from ._signed_heads import note_leaf
from ._store import EventStore, read_verified

if TYPE_CHECKING:
    from helmlog_evidence import Bundle, SigningKey


def default_origin(key: SigningKey) -> str:
    """The log's origin line when none is given: ``helmlog/heads/<key name>``."""
    return f"helmlog/heads/{key.name}"


def _log_of(store: EventStore) -> HeadsLog:
    if not isinstance(store, HeadsLog):
        raise StoreError(f"the store {store.url} keeps no log of signed heads")
    return store


async def log_checkpoint(
    store: EventStore, key: SigningKey, origin: str | None = None
) -> str:
    """The log's current checkpoint, signed (a C2SP tlog-checkpoint note)."""
    return _signed(await _log_of(store).log_leaves(), key, origin)


def _signed(leaves: list[bytes], key: SigningKey, origin: str | None) -> str:
    from helmlog_evidence import Checkpoint, root_hash

    body = Checkpoint(
        origin=origin or default_origin(key), size=len(leaves), root=root_hash(leaves)
    )
    return key.sign(body.text())


def _latest_head(records: list[StoredEvent]) -> StoredEvent | None:
    for record in reversed(records):
        if type_of(record) == HeadSigned.type:
            return record
    return None


async def session_bundle(
    store: EventStore,
    session_id: str,
    key: SigningKey,
    *,
    origin: str | None = None,
    since_sizes: Iterable[int] = (),
) -> Bundle:
    """One session's evidence: its records up to its latest signed head, the
    head, a fresh signed checkpoint of the log and the head's proofs.

    Raises:
        StreamTamperedError: the stream fails verification (R19).
        StoreError: no store log, or the session has no signed head.
    """
    from helmlog_evidence import SessionHead, make_bundle

    log = _log_of(store)
    records = await read_verified(store, session_id)
    signed = _latest_head(records)
    event = signed.decode() if signed is not None else None
    if not isinstance(event, HeadSigned):
        raise StoreError(
            f"session {session_id} has no signed head: was it recorded with a "
            "signing key (HELMLOG_SIGNING_KEY, Agent.create(signer=...))?"
        )
    leaf = note_leaf(event.note)
    index = await log.log_index(leaf) if leaf is not None else None
    if index is None:
        await log.repair_log(session_id)  # a head whose leaf has not landed yet
        index = await log.log_index(leaf) if leaf is not None else None
    if index is None:
        raise StoreError(f"the signed head of session {session_id} is not in the log")
    text = event.note.rpartition("\n\n")[0] + "\n"
    head = SessionHead.parse(text)
    leaves = await log.log_leaves()
    kept = [(r.seq, r.data, r.hash) for r in records[: head.seq]]
    return make_bundle(
        session_id,
        kept,
        event.note,
        _signed(leaves, key, origin),
        index,
        leaves,
        since_sizes,
    )
