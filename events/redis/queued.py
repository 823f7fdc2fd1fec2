"""One queued append: the unit the appender's group commit sends and settles.

Pattern: a plain record with ``__slots__`` (the hot path makes one per append).
Role:    events layer, ``events/redis``; made by ``appender.Appender``, held by
         ``readback.ReadBack`` while a lost reply is read back (R24).

Laws: R24 (``token``/``last_seq``/``resolving``: what a read-back needs), R7
(``premark``: the open-turn mark sent before the append), issue 30
(``heads``: the leaves the log of heads owes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import hiredis

from .keys import Staged


class QueuedAppend:
    """One queued append: its script call, packed, and the caller's future."""

    __slots__ = (
        "acked",
        "after",
        "closing",
        "expected",
        "future",
        "heads",
        "last_hash",
        "last_seq",
        "packed",
        "premark",
        "resolving",
        "session_id",
        "shard",
        "token",
    )

    def __init__(
        self,
        session_id: str,
        expected: int,
        packed: bytes,
        last_hash: str,
        after: Sequence[Staged],
        premark: Staged | None,
        future: asyncio.Future[int],
    ) -> None:
        self.session_id = session_id
        self.expected = expected
        # The append script's call, RESP-encoded once (``wire.pack``): sent,
        # and sent again by a read-back (R24), as these bytes; bytes are not
        # walked by the collector, a list of arguments is.
        self.packed = packed
        self.last_hash = last_hash
        self.after = after
        self.premark = premark
        self.future = future
        # Landed; resolved once its index entries are sent (``Appender.release``).
        self.acked = False
        # R24: the append's token (its last entry's ``w``), the seq the batch
        # ends at were it in the stream, and whether its reply was lost and a
        # read-back now settles it (``readback.py``).
        self.token = ""
        self.last_seq = expected
        self.resolving = False
        # Whether the batch ends a turn (its close is in ``after``, R4).
        self.closing = False
        # The index shard of the session (``shard_of``: a hash, made once).
        self.shard = 0
        # Issue 30: the log of heads' share of this append: the signed head's
        # ``(seq, hash)`` and the leaves, until they are sent (``headlog.py``).
        self.heads: tuple[int, str, list[bytes]] | None = None

    @property
    def args(self) -> list[Any]:
        """The script call's arguments, decoded from ``packed`` (as bytes)."""
        reader = hiredis.Reader()
        reader.feed(self.packed)
        args: list[Any] = reader.gets()
        return args
