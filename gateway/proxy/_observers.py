"""The proxy's observers: the four callbacks, called safely and awaited in order.

Pattern: one object holding ``on_telemetry``, ``on_event``, ``on_manifest``
         and ``on_session_closed`` and the awaitables they owe; ``settle``
         awaits them in the order they were made, each bounded.
Role:    gateway layer; ``McpProxy`` makes one and hands it to the ledger
         (events, manifests), the accounting (telemetry) and its sessions.
Emits:   a log record when an observer raises or overruns.

Laws: P15, P16 (an observer that raises is logged and changes nothing), H6
(an async one is awaited, at most ``timeout_s``, in the order it was handed
its values; ``on_event`` is called inside the journal's flush, which is not
async, so its awaitable is settled by the ledger right after the append).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import anyio

log = logging.getLogger("helmlog.proxy")


class Observers:
    """The operator's four observers and the async work they owe (P16, H6)."""

    def __init__(
        self,
        *,
        on_telemetry: Callable[[Any], Any] | None,
        on_event: Callable[[Any], Any] | None,
        on_manifest: Callable[[Any], Any] | None,
        on_session_closed: Callable[[str], Any] | None,
        timeout_s: float,
    ) -> None:
        for what, fn in (
            ("on_telemetry", on_telemetry),
            ("on_event", on_event),
            ("on_manifest", on_manifest),
            ("on_session_closed", on_session_closed),
        ):
            if fn is not None and not callable(fn):
                raise TypeError(f"McpProxy {what} must be callable")
        self.on_telemetry = on_telemetry
        self.on_event = on_event
        self.on_manifest = on_manifest
        self.on_session_closed = on_session_closed
        self.timeout_s = timeout_s
        # Async observers' awaitables, awaited in the order they were made.
        self._owed: list[tuple[str, Any]] = []
        self._settling = anyio.Lock()

    async def telemetry(self, event: Any) -> None:
        """P15, P16: hand one telemetry event over; a failure is only logged."""
        self._observe(self.on_telemetry, event, "on_telemetry")
        await self.settle()

    def event(self, event: Any) -> None:
        """P16: hand one recorded event to ``on_event`` (settled by ``settle``)."""
        self._observe(self.on_event, event, "on_event")

    async def manifest(self, manifest: Any) -> None:
        """P16, P22: hand a manifest to ``on_manifest``; a failure is only logged."""
        self._observe(self.on_manifest, manifest, "on_manifest")
        await self.settle()

    def quiet(self) -> bool:
        """Whether a session's end has nothing to tell or await: no
        ``on_session_closed``, no observer work owed."""
        return self.on_session_closed is None and not self._owed

    async def session_closed(self, audit_session: str) -> None:
        """P18: ``on_session_closed`` once per session end, awaited."""
        self._observe(self.on_session_closed, audit_session, "on_session_closed")
        await self.settle()

    def _observe(self, fn: Callable[[Any], Any] | None, value: Any, what: str) -> None:
        if fn is None:
            return
        try:
            out = fn(value)
        except Exception:  # P16: a failing observer never fails a call
            log.warning("proxy: %s raised", what, exc_info=True)
            return
        if out is not None and inspect.isawaitable(out):
            self._owed.append((what, out))

    async def settle(self) -> None:
        """H6, P16: await the observers' work owed so far, in order, each at
        most ``timeout_s``; a failure or overrun is logged."""
        if not self._owed:
            return
        async with self._settling:
            while self._owed:
                what, owed = self._owed.pop(0)
                await self._bounded(owed, what)

    async def _bounded(self, owed: Any, what: str) -> None:
        try:
            with anyio.move_on_after(self.timeout_s) as scope:
                await owed
            if scope.cancelled_caught:
                log.warning(
                    "proxy: %s did not finish within %ss; it was cancelled",
                    what,
                    self.timeout_s,
                )
        except Exception:  # P16: a failing observer never fails a call
            log.warning("proxy: %s raised", what, exc_info=True)
