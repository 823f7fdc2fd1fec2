"""Automatic failover: a host finishes its shard's unfinished turns and facts.

Pattern: a start-up sweep over a projection (the store's open-turns index),
         each item handed to the loop's own recovery (``agent.recover``), with
         a bound on how many run at once; a periodic facts sweep beside it.
Role:    actors layer; ``SessionHost`` runs it at (re)start and for a shard
         whose lease it took over (R27); ``helmlog recover`` reaches the same.

Laws: R1 (the stream decides, not the index), R4 (``publish_open_facts``),
R7, R8, R22 (through the open-turns index, never a scan).
Why a pending ask alone does not skip a session: the index may lag the
stream; only a head that is the ask's own ``pause.request`` is skipped.
``reindex`` follows every candidate; one session's failure is logged and the
sweep goes on (cancellation propagates).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from helmlog.events import EventStore, StoreError

from ._placement import host_for

log = logging.getLogger("helmlog.actors")

# Sessions recovered at once by one host: each recovery reads a stream and may
# call a model and run tools, so an unbounded sweep after a crash of a busy
# host would flood the store and the provider at the worst moment.
DEFAULT_CONCURRENCY: Final = 16
# How often a host sweeps its open-turn sessions for facts their writers
# left unpublished (R4): the longest a missed fact waits for watchers.
DEFAULT_FACTS_SWEEP_S: Final = 30.0


async def finish_open_turns(
    store: EventStore,
    *,
    index: int,
    n_hosts: int,
    recover: Callable[[str], Awaitable[object]],
    concurrency: int = DEFAULT_CONCURRENCY,
) -> int:
    """Finish, per R7, the open turns of host ``index``'s shard (R22).

    Args:
        store: the shared event store; its ``open_turns()`` index names the
            candidates, and ``reindex(session_id)`` repairs a stale mark.
        index: this host's index among ``n_hosts`` (R8 placement).
        n_hosts: how many hosts the cluster has now.
        recover: finishes one session's open turn (the host's own
            ``agent.recover``); returns ``None`` when there was nothing to
            finish (a paused, finished or unknown session).
        concurrency: at most this many sessions recover at once.

    Returns:
        How many turns were finished (``recover`` returned an answer or a new
        pause). A session whose recovery raised is logged with its id and
        error, and not counted.

    Raises:
        StoreError: the open-turns or pending-asks index could not be read.
        ValueError: ``n_hosts`` < 1, ``index`` out of range, or
            ``concurrency`` < 1.
    """
    if not 0 <= index < n_hosts:
        raise ValueError(f"host index {index} is not one of {n_hosts} hosts")
    if concurrency < 1:
        raise ValueError("failover needs a concurrency of at least 1")
    open_ids = await store.open_turns()
    mine = sorted({sid for sid in open_ids if host_for(sid, n_hosts) == index})
    if not mine:
        return 0
    asks = {a.session_id: a.seq for a in await store.pending_asks()}
    gate = asyncio.Semaphore(concurrency)

    async def one(session_id: str) -> bool:
        async with gate:
            if await _waiting_on_a_person(store, session_id, asks.get(session_id)):
                return False
            return await _finish(store, session_id, recover)

    finished = await asyncio.gather(*(one(sid) for sid in mine))
    count = sum(finished)
    log.info(
        "failover: host %d of %d finished %d of %d open turns",
        index,
        n_hosts,
        count,
        len(mine),
        extra={"host_index": index, "finished": count, "candidates": len(mine)},
    )
    return count


async def publish_open_facts(
    store: EventStore,
    *,
    index: int,
    n_hosts: int,
    busy: Callable[[str], bool] = lambda _session_id: False,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> int:
    """Publish the missed facts of host ``index``'s open-turn sessions (R4).

    The open-turns index is the outbox's index: a turn's close is sent only
    after (or with, in the same script) every earlier fact of its session,
    so a session with an unpublished fact keeps its open mark. Sessions
    ``busy`` says are in an operation here are left to it: their next
    append or activation publishes.

    Returns:
        How many facts were published. A session whose publication failed
        is logged with its id and error; the next sweep tries again.

    Raises:
        StoreError: the open-turns index could not be read.
    """
    if not 0 <= index < n_hosts:
        raise ValueError(f"host index {index} is not one of {n_hosts} hosts")
    mine = sorted(
        {
            sid
            for sid in await store.open_turns()
            if host_for(sid, n_hosts) == index and not busy(sid)
        }
    )
    gate = asyncio.Semaphore(concurrency)

    async def one(session_id: str) -> int:
        async with gate:
            try:
                return await store.publish_facts(session_id)
            except Exception as exc:  # one session's failure never stops the sweep
                log.warning(
                    "facts sweep: could not publish the facts of session %s: %s",
                    session_id,
                    _named(exc),
                    exc_info=True,
                    extra=_fields(session_id, exc),
                )
                return 0

    published = sum(await asyncio.gather(*(one(sid) for sid in mine)))
    if published:
        log.info(
            "facts sweep: host %d of %d published %d missed facts of %d sessions",
            index,
            n_hosts,
            published,
            len(mine),
            extra={"host_index": index, "published": published},
        )
    return published


async def _waiting_on_a_person(
    store: EventStore, session_id: str, ask_seq: int | None
) -> bool:
    """Whether the session's last event is the pause its ask names.

    Then nothing happened after the pause: the turn waits on a person and is
    left alone, unread. Any later event (a resume whose index update was
    lost, then a crash) sends the session through ``recover``, which decides.
    """
    if ask_seq is None:
        return False
    try:
        last_seq, _hash = await store.head(session_id)
    except StoreError as exc:  # recover decides, and logs what fails there
        log.warning(
            "failover: could not read the head of session %s: %s",
            session_id,
            _named(exc),
            exc_info=True,
            extra=_fields(session_id, exc),
        )
        return False
    return last_seq == ask_seq


async def _finish(
    store: EventStore, session_id: str, recover: Callable[[str], Awaitable[object]]
) -> bool:
    """Recover one session, then repair its index marks; ``True`` if finished."""
    finished = False
    try:
        finished = await recover(session_id) is not None
    except Exception as exc:  # one session's failure never stops the sweep
        log.error(
            "failover: could not finish the open turn of session %s: %s",
            session_id,
            _named(exc),
            exc_info=True,
            extra=_fields(session_id, exc),
        )
    try:
        await store.reindex(session_id)
    except Exception as exc:  # the mark stays; the next start tries again
        log.error(
            "failover: could not reindex session %s: %s",
            session_id,
            _named(exc),
            exc_info=True,
            extra=_fields(session_id, exc),
        )
    return finished


def _named(exc: Exception) -> str:
    code = getattr(exc, "code", None)
    return f"{type(exc).__name__} ({code})" if code else type(exc).__name__


def _fields(session_id: str, exc: Exception) -> dict[str, object]:
    """What a log record of a failed session carries, for structured handlers."""
    return {
        "session_id": session_id,
        "error_type": type(exc).__name__,
        "code": getattr(exc, "code", None),
        "retryable": bool(getattr(exc, "retryable", False)),
    }
