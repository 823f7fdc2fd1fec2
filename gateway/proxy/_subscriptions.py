"""Resource subscriptions through the proxy: which client asked for which URI.

Pattern: a registry shared by every client session over the one upstream
         connection: URI -> the sessions subscribed to it, and each session's
         URIs. The upstream's ``notifications/resources/updated`` goes to the
         sessions subscribed to its URI only.
Role:    gateway layer; ``McpProxy`` holds one; each ``ProxySession`` files
         its ``resources/subscribe`` and ``resources/unsubscribe`` in it, and
         each listen stream its URIs (``_listen``).
Emits:   nothing.

Laws: P25 (an update reaches the sessions that subscribed, and only them; the
upstream's subscription ends with its last subscriber's unsubscribe or
close; a new upstream session is subscribed again), P8 (a hidden resource is
neither subscribed to nor told about).

Why counted: the upstream sees one session for all the proxy's clients, so
one client's unsubscribe must not end another client's subscription.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import anyio
import mcp.types as types

log = logging.getLogger("helmlog.proxy")

UNSUBSCRIBE_S = 5.0
"""How long a closing holder waits on the upstream's unsubscribe at most."""


class Subscriptions:
    """The URIs each client session subscribed to (see the module)."""

    def __init__(self) -> None:
        self._by_uri: dict[str, set[Any]] = {}
        # The same pairs by session: a closing session (every 2026-era HTTP
        # request is one) asks ``holds`` without a walk of every URI.
        self._by_session: dict[Any, set[str]] = {}

    def add(self, session: Any, uri: str) -> None:
        """``session`` subscribed to ``uri`` (the upstream accepted it)."""
        self._by_uri.setdefault(uri, set()).add(session)
        self._by_session.setdefault(session, set()).add(uri)

    def remove(self, session: Any, uri: str) -> bool:
        """``session`` unsubscribed from ``uri``; whether the upstream's
        subscription may end (no other session holds one)."""
        mine = self._by_session.get(session)
        if mine is not None:
            mine.discard(uri)
            if not mine:
                del self._by_session[session]
        held = self._by_uri.get(uri)
        if held is None:
            return True  # nobody here holds it: the upstream answers
        held.discard(session)
        if held:
            return False
        del self._by_uri[uri]
        return True

    def drop(self, session: Any) -> list[str]:
        """A closed session's subscriptions gone; the URIs it was the last
        subscriber of (their upstream subscriptions may end)."""
        return [
            uri
            for uri in self._by_session.get(session, set()).copy()
            if self.remove(session, uri)
        ]

    def holds(self, session: Any) -> bool:
        """Whether ``session`` holds any subscription."""
        return session in self._by_session

    def subscribers(self, uri: str) -> list[Any]:
        """The sessions subscribed to ``uri``, now."""
        return list(self._by_uri.get(uri, ()))

    def uris(self) -> list[str]:
        """Every URI some session is subscribed to."""
        return list(self._by_uri)


async def subscribe_upstream(
    upstream: Any,
    subscriptions: Subscriptions,
    holder: Any,
    params: types.SubscribeRequestParams,
) -> types.EmptyResult:
    """P25: subscribe upstream to ``params.uri``, then file ``holder`` under it
    (only once the upstream accepted: a refusal reaches the caller, filed
    nowhere)."""
    out: types.EmptyResult = await upstream.request(
        types.SubscribeRequest(params=params), types.EmptyResult
    )
    subscriptions.add(holder, str(params.uri))
    return out


async def unsubscribe_upstream(upstream: Any, uris: Iterable[str]) -> None:
    """P25: end the upstream's subscriptions no holder keeps any more: best
    effort (logged), shielded from the closing holder's cancel and bounded
    by ``UNSUBSCRIBE_S``, so a stream or session that ends never leaves the
    upstream subscribed and never waits on a failing upstream."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(UNSUBSCRIBE_S):
        for uri in uris:
            params = types.UnsubscribeRequestParams(uri=uri)
            try:
                await upstream.request(
                    types.UnsubscribeRequest(params=params), types.EmptyResult
                )
            except Exception as exc:  # noqa: BLE001 — logged; the close goes on
                log.info(
                    "proxy: an upstream unsubscribe failed: %s", type(exc).__name__
                )
