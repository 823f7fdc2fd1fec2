"""Appends whose reply was lost: asked again until the store says (R24).

Pattern: read-back by idempotent resend: a held append is sent again (same
         token, with backoff) until the store answers or ``resolve_timeout``
         passes; the script takes a batch the stream already ends with as
         landed. Runs as tasks of its own.
Role:    events layer, ``events/redis``; held by the appender (``settle``).

Laws: R24 ("failed" only when not in the stream; "unknown" only when the
store did not answer in time), R2/R20, R7 (the open-turn mark first), R4.

Why resend rather than only read: a command written may still run after a
read on another connection; whichever runs second finds the batch's token.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from .._errors import LedgerOutcomeUnknownError, StoreError
from .backend import Backend
from .heads import Heads
from .keys import stream_key
from .outbox import Outbox
from .queued import QueuedAppend
from .wire import DRIVER_ERRORS

log = logging.getLogger("helmlog.events")

# Backoff between read-backs: the first at once, then doubling to a cap.
_FIRST_WAIT_S: Final = 0.05
_MAX_WAIT_S: Final = 1.0


class ReadBack:
    """The read-backs of one store's appends whose reply was lost (R24).

    ``settle`` and ``kick`` are the appender's: a read-back that learns an
    outcome settles the append as its round trip would have, then lets the
    flusher send what it owes.
    """

    __slots__ = ("_backend", "_heads", "_kick", "_outbox", "_resolving", "_settle")

    def __init__(
        self,
        backend: Backend,
        heads: Heads,
        outbox: Outbox,
        settle: Callable[[QueuedAppend, Any], None],
        kick: Callable[[], None],
    ) -> None:
        self._backend = backend
        self._heads = heads
        self._outbox = outbox
        self._settle = settle
        self._kick = kick
        self._resolving: set[asyncio.Task[None]] = set()

    def unknown(self, items: list[QueuedAppend], cause: BaseException) -> None:
        """Hold appends whose reply was lost until the store says (R24)."""
        waiting = [i for i in items if not i.future.done() and not i.resolving]
        if not waiting:
            return
        for item in waiting:
            item.resolving = True
            self._heads.forget(item.session_id)
        log.warning(
            "redis event store %s: the replies of %d appends were lost (%s); "
            "reading them back before their runs are told anything",
            self._backend.url,
            len(waiting),
            cause,
        )
        task = asyncio.get_running_loop().create_task(self._resolve(waiting, cause))
        self._resolving.add(task)
        task.add_done_callback(self._resolving.discard)

    async def resolved(self) -> None:
        """Wait for every read-back under way (each is bounded)."""
        while self._resolving:
            await asyncio.gather(*self._resolving, return_exceptions=True)

    async def _resolve(self, items: list[QueuedAppend], cause: BaseException) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._backend.options.resolve_timeout
        wait = _FIRST_WAIT_S
        pending, last = items, cause
        try:
            while True:
                pending, last = await self._ask_again(pending, last)
                left = deadline - loop.time()
                if not pending or left <= 0:
                    break
                await asyncio.sleep(min(wait, left))
                wait = min(wait * 2, _MAX_WAIT_S)
        finally:
            # Whatever stopped the read-backs (time, cancellation), nobody
            # waits on them forever; a landed append's facts are left to the
            # session's next activation (R4), so vouch for nothing.
            for item in pending:
                if item.future.done() or item.acked:
                    continue
                self._outbox.unvouch(item.session_id)
                item.future.set_exception(
                    LedgerOutcomeUnknownError(
                        session_id=item.session_id,
                        store=self._backend.url,
                        cause=(
                            f"its reply was lost and the store did not answer "
                            f"within {self._backend.options.resolve_timeout:g} s "
                            f"(last: {type(last).__name__}: {last})"
                        ),
                    )
                )
            # What the settled appends owe (facts, index entries, acks) is
            # queued: the flusher sends it.
            self._kick()

    async def _ask_again(
        self, pending: list[QueuedAppend], last: BaseException
    ) -> tuple[list[QueuedAppend], BaseException]:
        """One read-back round: the items still unknown, and why."""
        try:
            await self._backend.routes.prepare()
            staged = [i.premark for i in pending if i.premark is not None]
            if staged:
                # R7: the open-turn mark goes again, before its append.
                keys, commands, _owners = self._outbox.shard_commands(staged)
                keyed = list(zip(keys, commands, strict=True))
                for reply in await self._backend.routes.call(keyed):
                    if isinstance(reply, Exception):
                        return pending, reply
            replies = await self._backend.routes.call(
                [(stream_key(i.session_id), i.packed) for i in pending]
            )
        except (*DRIVER_ERRORS, StoreError) as exc:
            return pending, exc
        still: list[QueuedAppend] = []
        for item, reply in zip(pending, replies, strict=True):
            if isinstance(reply, Exception):
                still.append(item)
                last = reply
                continue
            ok, seq = reply
            if not ok and int(seq) >= item.last_seq:
                # The stream moved past the batch: ours, then another's?
                try:
                    if await self._holds(item):
                        reply = [1, item.last_seq]
                except (*DRIVER_ERRORS, StoreError) as exc:
                    still.append(item)
                    last = exc
                    continue
            landed = bool(reply[0])
            log.warning(
                "redis event store %s: session %s: the append of seqs %d-%d, "
                "whose reply was lost, %s",
                self._backend.url,
                item.session_id,
                item.expected + 1,
                item.last_seq,
                "landed" if landed else "did not land",
                extra={
                    "session_id": item.session_id,
                    "first_seq": item.expected + 1,
                    "last_seq": item.last_seq,
                    "landed": landed,
                },
            )
            self._settle(item, reply)
        return still, last

    async def _holds(self, item: QueuedAppend) -> bool:
        """Whether the stream holds this batch's last record, with its token."""
        key = stream_key(item.session_id)
        at = f"0-{item.last_seq}"
        found = await self._backend.routes.one(key, "XRANGE", key, at, at)
        if not found:
            return False
        fields = found[0][1]
        named = {
            bytes(fields[i]): bytes(fields[i + 1]) for i in range(0, len(fields), 2)
        }
        return (
            named.get(b"hash") == item.last_hash.encode()
            and named.get(b"w") == item.token.encode()
        )
