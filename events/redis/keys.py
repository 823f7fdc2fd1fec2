"""The Redis store's keys, shard operations and reply parsing.

Pattern: pure functions: each key (a session's keys carry its ``{session_id}``
         hash tag; keys spanning sessions are sharded, tagged ``{<n>}``), the
         shard operations records turn into, raw replies into typed records.
Role:    events layer, ``events/redis``; one contract with ``scripts.py``, so
         every reader and writer of the layout stays in step.

Laws: R11 (the hash tags), R12 (a record read carries its ``type`` and session
id), R4 (``fact_ops``: a fact is its row's projection, never its values), R3
(a damaged entry still yields a record, so verification names its seq).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .._chain import StoredEvent
from .._codec import event_type
from .._facts import fact_records
from .._index import delta_of, encode_ask
from .._store import FactRecord

# Keys (docs/design.md, "Keys and indexes on Redis and Redis Cluster")::
#
#     helmlog:{<session_id>}:events   stream; id 0-<seq>; fields seq, data, hash
#     helmlog:{<session_id>}:head     string: the head record (R19), JSON
#                                     {seq, hash, mac}, set by the append script
#     helmlog:{<session_id>}:known    string "1": the session was created here
#                                     (R25), set by its first append's script
#     helmlog:sessions:{<n>}          set: every session created here (R25),
#                                     added after a session's first append
#     helmlog:format                  string "heads": this store writes head
#                                     records (R26), set before an instance's
#                                     first append
#     helmlog:facts:{<n>}             stream (MAXLEN ~ facts_maxlen); fields
#                                     session_id, seq, data
#     helmlog:facts-at:{<n>}          hash: session id -> facts cursor (every
#                                     fact up to this seq is published)
#     helmlog:open:{<n>}              hash: session id -> seq of its open turn
#     helmlog:asks:{<n>}              hash: session id -> "<seq>:<PendingAsk json>"
#     helmlog:lease:{<name>}          string: a lease's owner, expiring (PX) (R27)
#     helmlog:{evidence}:log          list: the log of signed heads, leaf hashes
#                                     (32 bytes) in log order (issue 30)
#     helmlog:{evidence}:leaves       hash: leaf hash -> its index in the log
#
#     n = sha256(session_id)[:8] (big-endian) mod shards   (``shard_of``)

FIELDS: Final = (b"seq", b"data", b"hash")
KEY_PREFIX: Final = "helmlog:{"
KEY_SUFFIX: Final = "}:events"
HEAD_SUFFIX: Final = "}:head"
KNOWN_SUFFIX: Final = "}:known"
# R26: the store-wide mark that this store writes head records.
FORMAT_KEY: Final = "helmlog:format"
FORMAT_HEADS: Final = b"heads"
CURSOR_PREFIX: Final = "f1:"
# The log of signed heads: one slot (one hash tag), store-wide (issue 30).
HEADLOG_KEY: Final = "helmlog:{evidence}:log"
HEADLOG_AT_KEY: Final = "helmlog:{evidence}:leaves"
# Invariant: a blocking read waits at most this long per command, so the
# client's socket timeout (5 s by default) never cuts a healthy BLOCK short.
BLOCK_SLICE_MS: Final = 1_000
# A cluster cannot XREAD keys of several slots in one command; it polls.
CLUSTER_POLL_S: Final = 0.05

# One shard operation: code, session id, a, b, value (see SHARD_LUA; F is
# a fact's plain XADD, S a new session's registry SADD (R25), B notes locally
# that a batch (b, a] is out, never sent).
Op = tuple[str, str, int, int, bytes]
# An operation staged for a round trip: its index shard, then the operation's
# fields (flat: one tuple per operation while it waits, not two, issue 29).
Staged = tuple[int, str, str, int, int, bytes]


def stream_key(session_id: str) -> str:
    """The stream of one session; ``{session_id}`` is its cluster hash tag.

    An id holding a brace moves where Redis Cluster reads the tag, but every
    key of the session starts the same way, so they still share one slot.
    """
    return f"{KEY_PREFIX}{session_id}{KEY_SUFFIX}"


def head_key(session_id: str) -> str:
    """The head record of one session (R19), in its stream's slot."""
    return f"{KEY_PREFIX}{session_id}{HEAD_SUFFIX}"


def known_key(session_id: str) -> str:
    """The session's marker (R25), in its stream's slot: set by the append
    script on the session's first append, so it survives a deleted stream
    and head record."""
    return f"{KEY_PREFIX}{session_id}{KNOWN_SUFFIX}"


def registry_key(n: int) -> str:
    """Shard ``n`` of the store-wide set of sessions ever created (R25).

    Outside the sessions' slots, so deleting every key a session's hash tag
    names leaves it; written after a session's first append.
    """
    return f"helmlog:sessions:{{{n}}}"


def append_keys(session_id: str, expected_seq: int) -> tuple[int | str, ...]:
    """The append script's key count and keys: the stream and its head, and
    on the session's first append (``expected_seq`` 0) its marker (R25)."""
    if expected_seq == 0:
        return 3, stream_key(session_id), head_key(session_id), known_key(session_id)
    return 2, stream_key(session_id), head_key(session_id)


def shard_keys(n: int) -> tuple[str, str, str, str]:
    """The keys of index shard ``n``: facts, open turns, asks, facts-at.

    They share the hash tag ``{<n>}``, so one script updates a shard.
    """
    tag = f"{{{n}}}"
    return (
        f"helmlog:facts:{tag}",
        f"helmlog:open:{tag}",
        f"helmlog:asks:{tag}",
        f"helmlog:facts-at:{tag}",
    )


def fact_ops(
    session_id: str,
    records: Sequence[StoredEvent],
    events: Sequence[object] | None = None,
) -> list[Op]:
    """The fact operations ``records`` publish, in seq order (R4).

    Every place that turns stored records into facts goes through here: the
    append path, ``publish_facts`` and ``reindex``. Each fact is its row's
    projection (``fact_records``: the published ``data`` is the encoded fact,
    never the row, so it holds no value), with the row's seq; a stored fact of
    an older stream is published as stored. ``events``: the stamped events of
    ``records``, when the caller sealed them (no decode).
    """
    return [
        ("F", session_id, seq, 0, data)
        for seq, data in fact_records(session_id, records, events)
    ]


def staged_fact_ops(
    n: int,
    session_id: str,
    records: Sequence[StoredEvent],
    events: Sequence[object] | None = None,
) -> list[Staged]:
    """``fact_ops`` staged on index shard ``n`` (the append path's form)."""
    return [
        (n, "F", session_id, seq, 0, data)
        for seq, data in fact_records(session_id, records, events)
    ]


def unstaged(op: Staged) -> Op:
    """The operation of a staged one, without its shard."""
    return (op[1], op[2], op[3], op[4], op[5])


def scripted(op: Op) -> Op:
    """A fact's ``F`` as the shard script's ``P`` (published after the cursor)."""
    return ("P", *op[1:]) if op[0] == "F" else op


def index_op(session_id: str, records: Sequence[StoredEvent], last: int) -> Op:
    """The ``X`` operation that sets a session's index entries from its stream."""
    delta = delta_of(session_id, records)
    mark = 0
    entry = b""
    if delta is not None:
        if delta.ask is not None:
            entry = encode_ask(delta.ask)
        if delta.open_at and (not delta.close_at or delta.ask is not None):
            mark = delta.open_at
    return ("X", session_id, last, mark, entry)


def id_seq(entry_id: Any) -> int:
    """The seq of a session stream entry id ``0-<seq>``."""
    return int(bytes(entry_id).rsplit(b"-", 1)[-1])


def records_into(
    out: list[StoredEvent], entries: Any, session_id: str
) -> list[StoredEvent]:
    """Append the records of raw ``XRANGE`` entries of ``session_id`` to ``out``.

    Each carries its type (the codec's ``event_type``) and the session id.
    """
    push = out.append
    for _id, fields in entries:
        # Invariant: the script writes seq, data, hash in this order (and a
        # batch's last entry then its append token, w).
        if len(fields) >= 6 and (fields[0], fields[2], fields[4]) == FIELDS:
            data = fields[3]
            push(
                StoredEvent(
                    seq=int(fields[1]),
                    data=data,
                    hash=fields[5].decode(),
                    type=event_type(data),
                    session_id=session_id,
                )
            )
        else:
            # A damaged entry still yields a record, so verification names
            # its seq (the stream id is the seq) instead of crashing.
            named = dict(zip(fields[::2], fields[1::2], strict=False))
            id_seq = int(bytes(_id).rsplit(b"-", 1)[-1])
            try:
                seq = int(named.get(b"seq", id_seq))
            except ValueError:
                seq = id_seq
            data = bytes(named.get(b"data", b""))
            push(
                StoredEvent(
                    seq=seq,
                    data=data,
                    hash=bytes(named.get(b"hash", b"")).decode(errors="replace"),
                    type=event_type(data),
                    session_id=session_id,
                )
            )
    return out


def fact_of(entry: Any, cursor: str) -> FactRecord:
    _entry_id, fields = entry
    named = dict(zip(fields[::2], fields[1::2], strict=True))
    return FactRecord(
        id=cursor,
        session_id=named[b"session_id"].decode(),
        seq=int(named[b"seq"]),
        data=named[b"data"],
    )


def stream_pairs(reply: Any) -> list[tuple[Any, Any]]:
    """``[(key, entries)]`` of an XREAD(GROUP) reply: a RESP3 map or RESP2 pairs."""
    if reply is None:
        return []
    if isinstance(reply, dict):
        return list(reply.items())
    return [(k, entries) for k, entries in reply]
