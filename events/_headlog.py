"""The heads log port: the store-wide, append-only log of signed heads.

Pattern: a narrow port (as ``FactsLog`` and ``SessionIndex``), runtime-
         checkable, that a store implements beside ``EventStore``: the leaf
         hashes in order, a leaf's index, and repair from the streams.
Role:    events layer; the memory store appends a head's leaf in the same
         step as the head, the Redis store right after it lands; ``helmlog
         evidence`` reads leaves to build checkpoints and proofs.

Laws: issue 30 item 2 (an RFC 9162 log whose leaves are head notes, appended
with the head where the store allows, repairable from the session streams).
Why repair only appends: the log is append-only; a head found in a stream
and missing from the log is appended, and nothing is ever removed or moved.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class HeadsLog(Protocol):
    """The store-wide log of signed heads (leaf = SHA-256(0x00 || head text))."""

    async def log_leaves(self, size: int | None = None) -> list[bytes]:
        """The first ``size`` leaf hashes (all when ``None``), in log order."""
        ...

    async def log_index(self, leaf: bytes) -> int | None:
        """The index of a leaf hash in the log; ``None`` when it is absent."""
        ...

    async def repair_log(self, session_id: str | None = None) -> int:
        """Append the signed heads found in the streams (one session's, or
        every session's) that the log lacks; return how many were appended."""
        ...
