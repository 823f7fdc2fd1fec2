"""The MCP proxy's audit events: a call received, what it came to, the close.

Pattern: frozen, tagged msgspec Structs on the shared envelope, in a proxy
         session's own stream.
Role:    events layer; ``gateway``'s MCP proxy records these for every call
         it routes; ``helmlog`` renders them.
Emits:   nothing; these are the emissions.

Laws: R13 (P20–P22), P20 (recorded when received and when finished), P23
(what a finished call stores per sensitivity tier), P18/P22 (the signed
manifest at close), R10.

Why a family of their own: a proxy session records only these; sharing the
envelope and union lets one store, chain and decoder serve both kinds.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ._envelope import Event


class ProxyCallStarted(Event, tag="proxy.call_started", frozen=True):
    """The MCP proxy received a tool call, before routing it (P20)."""

    type: ClassVar[str] = "proxy.call_started"
    request_id: str
    tool: str
    transport: str = "stdio"
    identity: Any = None
    caller_meta: Any = None
    server_name: str | None = None
    server_version: str | None = None


class ProxyCallFinished(Event, tag="proxy.call_finished", frozen=True):
    """What one proxied tool call came to, before the response leaves (P20, P23).

    ``input_raw``/``output_raw`` are stored for the low and medium tiers;
    the high tier stores them only sealed (``input_sealed``/``output_sealed``,
    AES-256-GCM). Every tier stores the digests.
    """

    type: ClassVar[str] = "proxy.call_finished"
    request_id: str
    route: str
    tool: str
    outcome: str
    input_digest: str
    output_digest: str
    forwarded_tool: str | None = None
    rejection_reason: str | None = None
    duration_ms: float = 0.0
    sensitivity: str = "high"
    input_raw: Any = None
    output_raw: Any = None
    input_sealed: str | None = None
    output_sealed: str | None = None
    identity: Any = None
    server_name: str | None = None
    server_version: str | None = None


class ProxySessionClosed(Event, tag="proxy.session_closed", frozen=True):
    """A proxy session ended; ``manifest`` is its signed summary (P18, P22)."""

    type: ClassVar[str] = "proxy.session_closed"
    manifest: dict[str, Any]
