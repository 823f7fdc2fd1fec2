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

from .keys import Op
from .wire import Arg


class QueuedAppend:
    """One queued append: its script arguments and the caller's future."""

    __slots__ = (
        "acked",
        "after",
        "args",
        "expected",
        "future",
        "heads",
        "last_hash",
        "last_seq",
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
        args: list[Arg],
        last_hash: str,
        after: list[Op],
        premark: Op | None,
        future: asyncio.Future[int],
    ) -> None:
        self.session_id = session_id
        self.expected = expected
        self.args = args
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
        # The index shard of the session (``shard_of``: a hash, made once).
        self.shard = 0
        # Issue 30: the log of heads' share of this append: the signed head's
        # ``(seq, hash)`` and the leaves, until they are sent (``headlog.py``).
        self.heads: tuple[int, str, list[bytes]] | None = None
