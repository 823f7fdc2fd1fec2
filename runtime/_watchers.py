"""Listeners and watchers: who hears about a session's events, and how.

Pattern: observer registry with identity de-duplication and per-handler
         ordered delivery (a queue per async handler, so none sees event 7
         before event 6); nothing a listener does flows back into the run.
Role:    runtime layer; the journal hands every recorded event (and each
         transient token) to ``Listeners.deliver``.

Laws: G82–G84 (attach, order, never steer), G83 (ids), G95 and G49/R4 (only
a ``RecordTaker`` is handed stored records; others hear facts), G86.
Why copies: an event's containers are the folded session's own; a watcher
changing one would change what the model reads (``readonly`` sinks skip
them). Why ``deferred``: a CPU-bound sink runs off the run's path, in order,
and has caught up when the run hands back its answer or pause.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from helmlog.events import StoredEvent
from helmlog.events.lowlevel import RecordTaker

from ._errors import AgentBuildError

log = logging.getLogger("helmlog")

Handler = Callable[[Any], Any]


@runtime_checkable
class Watcher(Protocol):
    """Anything with ``on_event(event)`` (plain or async), an optional ``id``,
    and optionally ``deferred = True`` (delivered off the run's path, in order),
    ``readonly = True`` (it never changes what it is handed, so it is handed
    the session's own frozen events instead of copies). It hears facts and
    the documented events only, whatever other attributes it has (G95)."""

    def on_event(self, event: Any) -> Any:
        """Receive one event."""
        ...


# Events after which the run hands back its answer, pause or failure.
_ENDS_OUTPUT = frozenset({"agent.turn_end", "pause.request", "error.fatal"})


class _Ordered:
    """Delivers to one async handler in order, without the run awaiting it."""

    __slots__ = ("_fn", "_pending", "_task", "deferred")

    def __init__(self, fn: Handler, *, deferred: bool = False) -> None:
        self.deferred = deferred  # a plain on_event, queued (settled at ends)
        self._fn = fn
        self._pending: deque[Any] = deque()
        self._task: asyncio.Task[None] | None = None

    def push(self, event: Any, first: Any) -> None:
        self._pending.append((event, first))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        # Let what the run just set going (a store's flusher sending its
        # append) go first, so this work overlaps the wait for the reply
        # instead of delaying the send.
        await asyncio.sleep(0)
        while self._pending:
            event, first = self._pending.popleft()
            try:
                out = first if first is not None else self._fn(event)
                # A deferred watcher's plain on_event returns None.
                if out is not None and inspect.isawaitable(out):
                    await out
            except Exception:
                log.exception(
                    "helmlog watcher failed on %s", getattr(event, "type", event)
                )

    def settle(self) -> None:
        """Hand a deferred watcher what is queued, now, in order."""
        while self._pending:
            event, _first = self._pending.popleft()
            try:
                self._fn(event)
            except Exception:
                log.exception(
                    "helmlog watcher failed on %s", getattr(event, "type", event)
                )

    async def idle(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)


class _Subscription:
    __slots__ = ("fn", "key", "ordered", "owner", "readonly", "records", "type")

    def __init__(self, type_: str, fn: Handler, owner: object, key: int) -> None:
        self.type = type_
        self.fn = fn
        self.owner = owner
        self.key = key
        self.ordered: _Ordered | None = None
        # A watcher that declares it never changes what it is handed is
        # handed the session's own frozen events, not copies (G84).
        self.readonly = owner is not fn and getattr(owner, "readonly", False) is True
        # Only a RecordTaker, by its class, is handed appends as stored: any
        # other watcher hears facts, whatever attributes it has (G95).
        self.records: Callable[[list[StoredEvent]], Any] | None = (
            owner.on_records
            if owner is not fn and isinstance(owner, RecordTaker)
            else None
        )


class Listeners:
    """The subscriptions of one agent: ``on(type, fn)`` and watchers."""

    def __init__(self) -> None:
        self._subs: list[_Subscription] = []
        # Kept with ``_subs`` (read once per append): the record takers, the
        # rest, and whether someone among all / among the rest needs copies.
        self._takers: list[_Subscription] = []
        self._rest: list[_Subscription] = []
        self._copying = self._rest_copying = False
        self._next = 0

    def __bool__(self) -> bool:
        return bool(self._subs)

    @property
    def copying(self) -> bool:
        """Whether some subscriber must be handed copies (it may change what
        it is handed): every ``on()`` callback, and every watcher that does
        not declare ``readonly = True``."""
        return self._copying

    @property
    def takers(self) -> bool:
        """Whether some watcher takes appends as stored records (a ``RecordTaker``)."""
        return bool(self._takers)

    def copying_after(self, handed: bool) -> bool:
        """``copying``, or, once an append's records were ``handed`` to the
        takers, whether one of the other subscribers needs copies."""
        return self._rest_copying if handed else self._copying

    def others(self, handed: bool) -> bool:
        """Whether anyone is left to hand an appended event to."""
        return bool(self._rest if handed else self._subs)

    def hand_records(self, records: list[StoredEvent]) -> None:
        """Hand one append's records to every record taker, in subscription
        order; a raise is logged and changes nothing (G84)."""
        for sub in self._takers:
            take = sub.records
            assert take is not None  # only record takers are in ``_takers``
            try:
                take(records)
            except Exception:
                log.exception(
                    "helmlog watcher failed on records %s..%s",
                    records[0].seq,
                    records[-1].seq,
                )

    def on(self, event_type: str, fn: Handler) -> Callable[[], None]:
        """Subscribe ``fn`` to one event type (``"*"`` for all)."""
        if not isinstance(event_type, str) or not event_type:
            raise ValueError("on(): event_type must be a type string or '*'")
        if not callable(fn):
            raise ValueError("on(): the listener must be callable")
        return self._add(event_type, fn, fn)

    def check_watchers(self, watchers: list[Any]) -> list[Any]:
        """De-duplicate by identity and refuse two different objects with one id."""
        seen: list[Any] = []
        for w in watchers:
            if not callable(getattr(w, "on_event", None)):
                raise AgentBuildError(f"a watcher needs an on_event method (got {w!r})")
            if any(w is s for s in seen):
                continue
            seen.append(w)
        present = [s.owner for s in self._subs if s.type == "*" and s.owner is not s.fn]
        pool: list[Any] = []
        for w in present + seen:
            if not any(w is p for p in pool):
                pool.append(w)
        ids: dict[Any, Any] = {}
        for w in pool:
            wid = getattr(w, "id", None)
            if wid is None:
                continue
            other = ids.get(wid)
            if other is not None and other is not w:
                raise AgentBuildError(
                    f"two different watchers were given the id '{wid}'"
                )
            ids[wid] = w
        return [w for w in seen if not any(w is p for p in present)]

    def attach(self, watcher: Any) -> Callable[[], None]:
        """Attach one watcher (after ``check_watchers``); returns unsubscribe."""
        for sub in self._subs:
            if sub.owner is watcher and sub.fn is not watcher:
                return self._unsubscriber(sub.key)
        if isinstance(watcher, RecordTaker) and inspect.iscoroutinefunction(
            watcher.on_records
        ):
            raise AgentBuildError(
                f"a record taker's on_records must be a plain method (got {watcher!r})"
            )
        unsubscribe = self._add("*", watcher.on_event, watcher)
        if getattr(watcher, "deferred", False) is True:
            self._subs[-1].ordered = _Ordered(watcher.on_event, deferred=True)
        return unsubscribe

    def _add(self, type_: str, fn: Handler, owner: object) -> Callable[[], None]:
        self._next += 1
        sub = _Subscription(type_, fn, owner, self._next)
        self._subs.append(sub)
        self._refresh()
        return self._unsubscriber(sub.key)

    def _refresh(self) -> None:
        subs = self._subs
        self._takers = [s for s in subs if s.records is not None]
        self._rest = [s for s in subs if s.records is None]
        self._copying = not all(s.readonly for s in subs)
        self._rest_copying = not all(s.readonly for s in self._rest)

    def _unsubscriber(self, key: int) -> Callable[[], None]:
        def unsubscribe() -> None:
            self._subs = [s for s in self._subs if s.key != key]
            self._refresh()

        return unsubscribe

    def deliver(self, event: Any, copy: Any = None, *, handed: bool = False) -> None:
        """Hand one event to every matching subscriber, in subscription order.

        ``copy``, when given, is an equal event sharing no mutable container
        with ``event``: it goes to every subscriber that is not ``readonly``.
        ``handed``: the event's record went to the record takers, who are
        skipped.
        """
        etype = event.type
        for sub in self._rest if handed else self._subs:
            if sub.type != "*" and sub.type != etype:
                continue
            handed = event if copy is None or sub.readonly else copy
            ordered = sub.ordered
            if ordered is not None:
                ordered.push(handed, None)
                if ordered.deferred and etype in _ENDS_OUTPUT:
                    ordered.settle()
                continue
            try:
                out = sub.fn(handed)
            except Exception:
                log.exception("helmlog listener failed on %s", etype)
                continue
            # A plain watcher returns None: skip the (costly) awaitable check.
            if out is not None and inspect.isawaitable(out):
                sub.ordered = _Ordered(sub.fn)
                sub.ordered.push(handed, out)

    def deliver_all(self, events: list[Any], *, handed: bool = False) -> None:
        """``deliver`` each of ``events`` in order, none needing a copy.

        One plain watcher of every type (the usual case: one sink) is called
        straight, without ``deliver``'s per-event dispatch; anything else
        goes through ``deliver``.
        """
        subs = self._rest if handed else self._subs
        if len(subs) != 1 or subs[0].type != "*" or subs[0].ordered is not None:
            for event in events:
                self.deliver(event, handed=handed)
            return
        sub = subs[0]
        fn = sub.fn
        for at, event in enumerate(events):
            if (self._rest if handed else self._subs) is not subs or len(subs) != 1:
                # Subscribed or unsubscribed from inside a handler: the rest
                # go as ``deliver`` would hand them.
                for rest in events[at:]:
                    self.deliver(rest, handed=handed)
                return
            try:
                out = fn(event)
            except Exception:
                log.exception("helmlog listener failed on %s", event.type)
                continue
            if out is not None and inspect.isawaitable(out):
                # An async handler: from here on it is delivered in order
                # through its queue, as ``deliver`` does.
                sub.ordered = _Ordered(fn)
                sub.ordered.push(event, out)
                for rest in events[at + 1 :]:
                    self.deliver(rest, handed=handed)
                return

    async def idle(self) -> None:
        """Wait until every async handler has caught up (for tests and shutdown)."""
        for sub in list(self._subs):
            if sub.ordered is not None:
                await sub.ordered.idle()
