"""``subscriptions/listen`` through the proxy: a 2026-era client's change stream.

Pattern: one ``Listening`` per proxy: the SDK's ``InMemorySubscriptionBus``
         carries what the upstream announces (its list changes, a resource's
         update), and each listen request is served by the SDK's
         ``ListenHandler`` on a view of that bus which hides from the stream
         what is hidden from its session; a stream's resource URIs are
         subscribed upstream through the proxy's counted ``Subscriptions``.
Role:    gateway layer; ``McpProxy`` holds one and tells it each upstream
         notification; ``ProxySession`` serves ``subscriptions/listen`` with it.
Emits:   nothing; the notifications go to the client on its listen stream.

Laws: P25 (the 2026-07-28 revision delivers change notifications only on a
listen stream: a 2026-era client of the proxy hears what a 2025-era one
hears, and the upstream's resource subscription ends with its last holder,
a stream's end included), P8/P9 (a hidden resource is not found at listen,
and an update of one hidden from the stream's session is not delivered).

Why a holder per stream in ``Subscriptions``: one session may hold several
listen streams, and ending one must not end another's subscription.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp.types as types
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError

from ._calls import resource_hidden
from ._subscriptions import subscribe_upstream, unsubscribe_upstream

MAX_STREAMS = 1024
"""Listen streams open at once through one proxy (the SDK's own default)."""

_EVENTS: dict[type, ServerEvent] = {
    types.ToolListChangedNotification: ToolsListChanged(),
    types.PromptListChangedNotification: PromptsListChanged(),
    types.ResourceListChangedNotification: ResourcesListChanged(),
}


class _View:
    """The proxy's bus as one stream sees it: an update of a resource hidden
    from the stream's session is never delivered (P8 at delivery)."""

    def __init__(
        self, bus: InMemorySubscriptionBus, hidden: Callable[[str], bool]
    ) -> None:
        self._bus = bus
        self._hidden = hidden

    async def publish(self, event: ServerEvent) -> None:
        await self._bus.publish(event)

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        hidden = self._hidden

        def seen(event: ServerEvent) -> None:
            if isinstance(event, ResourceUpdated) and hidden(event.uri):
                return
            listener(event)

        return self._bus.subscribe(seen)


class _Holder:
    """One listen stream as ``Subscriptions`` counts it: its updates go by the
    bus, so the handshake era's relay tells it nothing."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def fresh_context(self) -> Any:
        return self.session.fresh_context()

    async def notify(self, notification: Any) -> None:
        return None  # delivered on its listen stream


class Listening:
    """Every listen stream of one proxy (see the module)."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self.open = 0  # streams open now

    async def heard(self, notification: Any) -> None:
        """An upstream notification, on every listen stream that asked for it."""
        if isinstance(notification, types.ResourceUpdatedNotification):
            await self.bus.publish(ResourceUpdated(uri=str(notification.params.uri)))
            return
        event = _EVENTS.get(type(notification))
        if event is not None:
            await self.bus.publish(event)

    async def serve(
        self,
        session: Any,
        ctx: Any,
        params: types.SubscriptionsListenRequestParams,
    ) -> types.SubscriptionsListenResult:
        """Serve one ``subscriptions/listen`` of ``session`` (a ``ProxySession``)
        until its client ends it: the hidden refused, the URIs subscribed
        upstream, then the SDK's handler (the ack first, then the events).

        Raises:
            MCPError: a URI hidden from the session (not found, P9), the
                upstream refused a subscription, or too many streams are open.
        """
        if self.open >= MAX_STREAMS:
            raise MCPError(types.INTERNAL_ERROR, "Subscription limit reached")
        context = session.context(ctx)  # as a subscribe's check (P5, P7)
        routing, subscriptions = session.routing, session.subscriptions
        uris = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))
        for uri in uris:
            if routing.is_hidden_resource(uri, context):
                raise resource_hidden(uri)
        holder = _Holder(session)
        self.open += 1
        try:
            for uri in uris:
                await subscribe_upstream(
                    session.upstream,
                    subscriptions,
                    holder,
                    types.SubscribeRequestParams(uri=uri),
                )

            def hidden(uri: str) -> bool:
                return bool(routing.is_hidden_resource(uri, session.fresh_context()))

            handler = ListenHandler(_View(self.bus, hidden))
            result: types.SubscriptionsListenResult = await handler(ctx, params)
            return result
        finally:
            self.open -= 1
            await unsubscribe_upstream(session.upstream, subscriptions.drop(holder))
