"""P19: one HTTP session's resumable streams, with unguessable event ids.

Pattern: an SDK ``EventStore`` per proxy session (never shared), bounded,
         keeping each event's stream so a replay stays on its stream.
Role:    gateway layer; ``ProxyHttpApp`` makes one per session, answers 404
         to a ``Last-Event-ID`` the session's store does not know, and hands
         the store to the SDK transport, which replays from it on resume.
Emits:   nothing.

Laws: P19 (event ids are 128 random bits, so another session's id, or a
guessed one, is unknown here and replays nothing; a replay sends only the
named stream's later events).

Why per session and random: mcpose shared one store with sequential ids, so
any client could replay another's stream by presenting a neighbouring id.
"""

from __future__ import annotations

import secrets

import mcp.types as types
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore


class SessionEventStore(EventStore):
    """P19: one session's resumable streams; event ids are 128 random bits."""

    def __init__(self, max_events: int = 1000) -> None:
        self.max_events = max_events
        self.events: dict[str, tuple[str, types.JSONRPCMessage | None]] = {}
        self.order: list[str] = []

    async def store_event(
        self, stream_id: str, message: types.JSONRPCMessage | None
    ) -> str:
        event_id = secrets.token_hex(16)
        self.events[event_id] = (stream_id, message)
        self.order.append(event_id)
        if len(self.order) > self.max_events:
            self.events.pop(self.order.pop(0), None)
        return event_id

    def knows(self, event_id: str) -> bool:
        return event_id in self.events

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        found = self.events.get(last_event_id)
        if found is None:
            return None
        stream_id = found[0]
        after = self.order.index(last_event_id) + 1
        for event_id in self.order[after:]:
            sid, message = self.events[event_id]
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id
