"""The MCP governance proxy: cross-cutting rules in front of any MCP server.

Pattern: a facade holding its parts, each owning its state: the upstream, the
         observers, the ledger, governance, the routing (options compiled
         once) and the accounting; each client session (``ProxySession``)
         shares them over the one upstream connection.
Role:    gateway layer; ``McpProxy(upstream, ...)``; ``async with proxy``, then
         ``serve_stdio``/``run`` or ``http_app``/``http_server``/``serve_http``.
Emits:   through its parts: telemetry, audit chain, governance rows.

Laws: P3, P8, P13, P14, P16, H6, P17, P18, P21, P24, P25 (see each part);
S10 through P14 (``resume``/``on_store``: a governance ask decided by a
person, carried out on the upstream by the deciding process).

Why one upstream connection for every session: the upstream is a server the
operator runs once; requests are independent JSON-RPC calls multiplexed by id.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio
import mcp.types as types

from helmlog.events import Checkpoint, EventStore

from ..upstream import Upstream
from ._accounting import Accounting
from ._asks import ProxyAsks
from ._audit import ProxyLedger
from ._calls import ToolCallTelemetry
from ._governance import Governance
from ._layers import Layer, ProxyContext
from ._listen import Listening
from ._observers import Observers
from ._routing import Routing
from ._session import ProxySession
from ._subscriptions import Subscriptions, unsubscribe_upstream

log = logging.getLogger("helmlog.proxy")

DEFAULT_SESSION_TTL_S = 1800.0
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
# How long one async observer (on_telemetry, on_event, on_manifest,
# on_session_closed) is awaited before it is cancelled and logged (H6).
DEFAULT_OBSERVER_TIMEOUT_S = 5.0
TIERS = ("low", "medium", "high")

_LIST_CHANGED = (
    types.ToolListChangedNotification,
    types.ResourceListChangedNotification,
    types.PromptListChangedNotification,
)


def _tiers(option: Any) -> Callable[[str, Any, Any], str] | None:
    """P23, H6: a function, or a mapping of tool name to tier (others high)."""
    if option is None or callable(option):
        return option  # type: ignore[no-any-return]
    if not isinstance(option, Mapping):
        raise TypeError(
            "McpProxy sensitivity is a function (tool, identity, args) -> tier or"
            f" a mapping of tool name to tier, not {type(option).__name__}"
        )
    tiers = dict(option)
    for tool, tier in tiers.items():
        if not isinstance(tool, str) or tier not in TIERS:
            raise ValueError(
                f"McpProxy sensitivity: {tool!r}: {tier!r} is not one of"
                f" {', '.join(TIERS)}"
            )

    def by_name(tool: str, identity: Any, args: Any) -> str:
        return str(tiers.get(tool, "high"))

    return by_name


class McpProxy:
    """A governance proxy in front of one MCP server (section P).

    Args:
        upstream: a URL (Streamable HTTP), a command as a list of strings
            (stdio), or an in-process server (FastMCP, a low-level
            ``Server``, an ``mcp_serve`` result).
        name: the proxy's server name (P25), also the governance
            ``tool_call_id`` prefix.
        version: the proxy's server version (P25).
        tool_middleware: ``tools/call`` layers, innermost first (P3).
        resource_middleware: ``resources/read`` layers, innermost first.
        list_tools_middleware: ``tools/list`` layers, innermost first.
        hidden_tools: names, or a predicate ``(name, ctx) -> bool`` (P8).
        hidden_resources: URIs, or a predicate ``(uri, ctx) -> bool``.
        pass_through_tools: names forwarded as-is (P12).
        pass_through_resources: URIs forwarded as-is.
        governance: helmlog tool links, the innermost layer (P14).
        on_telemetry: called once per tool call (P15).
        on_event: called with every event the proxy records.
        on_manifest: called with each session's audit manifest (P22).
        on_session_closed: called once per session end (P18).
            Each of the four may be async: it is awaited, at most
            ``observer_timeout_s`` (H6).
        resolve_identity: ``(headers) -> identity`` or ``(identity,
            delegated_from)``, once per session (P17); may be async.
        max_sessions: HTTP sessions at once, initializing ones included.
        session_ttl_s: an HTTP session's absolute lifetime.
        max_body_bytes: the largest HTTP request body.
        audit: a ``ProxyAudit`` (P20–P22), or ``None``.
        sensitivity: ``(tool, identity, args) -> "low"|"medium"|"high"``, or
            a mapping of tool name to tier; tools it does not name are
            ``"high"`` (P23).
        store: where governance rows go without an audit (memory by default).
        allowed_hosts: ``Host`` values the HTTP proxy accepts (P24).
        allowed_origins: ``Origin`` values the HTTP proxy accepts (P24).
        observer_timeout_s: how long one async observer is awaited.
    """

    def __init__(
        self,
        upstream: Any,
        *,
        name: str = "helmlog-proxy",
        version: str = "1",
        tool_middleware: Sequence[Layer] = (),
        resource_middleware: Sequence[Layer] = (),
        list_tools_middleware: Sequence[Layer] = (),
        hidden_tools: Any = None,
        hidden_resources: Any = None,
        pass_through_tools: Iterable[str] = (),
        pass_through_resources: Iterable[str] = (),
        governance: Sequence[Any] = (),
        on_telemetry: Callable[[ToolCallTelemetry], Any] | None = None,
        on_event: Callable[[Any], Any] | None = None,
        on_manifest: Callable[[Any], Any] | None = None,
        on_session_closed: Callable[[str], Any] | None = None,
        resolve_identity: Callable[[Mapping[str, str]], Any] | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        session_ttl_s: float = DEFAULT_SESSION_TTL_S,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        audit: Any = None,
        sensitivity: Callable[[str, Any, Any], str] | Mapping[str, str] | None = None,
        store: EventStore | None = None,
        allowed_hosts: Sequence[str] | None = None,
        allowed_origins: Sequence[str] | None = None,
        observer_timeout_s: float = DEFAULT_OBSERVER_TIMEOUT_S,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("McpProxy needs a non-empty name")
        if max_sessions < 0 or session_ttl_s <= 0 or max_body_bytes <= 0:
            raise ValueError(
                "McpProxy: max_sessions >= 0, session_ttl_s > 0 and max_body_bytes > 0"
            )
        if observer_timeout_s <= 0:
            raise ValueError("McpProxy: observer_timeout_s > 0")
        # What ``on_store`` rebuilds this proxy from (S10's deciding process).
        self._options: dict[str, Any] = {
            k: v for k, v in locals().items() if k not in ("self", "__class__")
        }
        self.name = name
        self.version = version
        observers = Observers(
            on_telemetry=on_telemetry,
            on_event=on_event,
            on_manifest=on_manifest,
            on_session_closed=on_session_closed,
            timeout_s=observer_timeout_s,
        )
        self.observers = observers
        self.upstream = Upstream(upstream, self._upstream_notification)
        self.upstream.on_healed = self._resubscribed
        self.resolve_identity = resolve_identity
        self.max_sessions = max_sessions
        self.session_ttl_s = session_ttl_s
        self.max_body_bytes = max_body_bytes
        self.allowed_hosts = allowed_hosts
        self.allowed_origins = allowed_origins
        self.sensitivity = _tiers(sensitivity)
        self.observer_timeout_s = observer_timeout_s
        self.sessions: set[ProxySession] = set()
        # Which session subscribed to which resource (P25: updates relayed),
        # and the 2026-era clients' listen streams (P25: changes delivered).
        self.subscriptions = Subscriptions()
        self.listening = Listening()
        # The JSON path of a plain tools/call (``_routing``'s same-route
        # rule); tests turn it off to compare it with the model path.
        self.fast_calls = True
        self.stdio_session_id = f"stdio-{uuid.uuid4()}"
        # Every session's stream; with ``audit=`` it also records calls (P20).
        self.records = ProxyLedger.of(
            audit,
            store,
            observers,
            name=name,
            version=version,
            sensitivity=self.sensitivity,
        )
        self.ledger: ProxyLedger | None = self.records if audit is not None else None
        links = list(governance)
        self.governance: Governance | None = (
            Governance(links, name=name, upstream=self.upstream, ledger=self.records)
            if links
            else None
        )
        self.routing = Routing(
            self.upstream,
            self.governance,
            tool_middleware=tool_middleware,
            resource_middleware=resource_middleware,
            list_tools_middleware=list_tools_middleware,
            hidden_tools=hidden_tools,
            hidden_resources=hidden_resources,
            pass_through_tools=pass_through_tools,
            pass_through_resources=pass_through_resources,
        )
        self.accounting = Accounting(self.ledger, observers, name=name, version=version)
        # S10 via P14: a governance link's ask is a durable pause of its own.
        self.asks = ProxyAsks(self)
        if self.governance is not None:
            self.governance.asks = self.asks
            self.governance.forward = self.routing.forward
        self._deciding = anyio.Lock()

    def __repr__(self) -> str:
        return f"McpProxy(name={self.name!r}, upstream={self.upstream.label!r})"

    # -- lifecycle --------------------------------------------------------

    @property
    def upstream_init(self) -> types.InitializeResult | types.DiscoverResult:
        """The upstream's initialize result (P25: what the proxy mirrors)."""
        init = self.upstream.init
        if init is None:
            raise RuntimeError("McpProxy is not started: use `async with proxy`")
        return init

    async def start(self) -> McpProxy:
        """Connect to and initialize the upstream (P25).

        Raises:
            UpstreamError: it did not start or did not initialize.
        """
        await self.upstream.open()
        return self

    async def close(self) -> None:
        """Disconnect from the upstream (observers' owed work awaited first)."""
        await self.settle()
        await self.upstream.close()

    async def __aenter__(self) -> McpProxy:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- asks decided by a person (S10 through P14) -----------------------

    @property
    def store(self) -> EventStore:
        """The store the proxy's sessions and governance asks are recorded in."""
        return self.records.store

    def on_store(self, store: EventStore) -> McpProxy:
        """The same proxy (upstream, options, governance) recording into ``store``.

        What ``--agent module:attr`` makes of an ``McpProxy`` (``helmlog
        approve``, ``helmlog serve``): the command opens the store, and the
        proxy decides that store's governance asks (S10, P14). An audit
        keeps its settings and records into ``store`` too.
        """
        options = dict(self._options)
        audit = options.get("audit")
        if audit is not None:
            options["audit"] = dataclasses.replace(audit, store=store)
        options["store"] = store
        return McpProxy(**options)

    async def resume(
        self,
        checkpoint: Checkpoint | str,
        decision: Any,
        *,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> str:
        """Decide a governance ask's pause and carry the call out (S10, P14).

        What ``decide_pending`` hands a resumer. A proxy not started opens
        its upstream for this decision (its own connection) and closes it
        after; the upstream's tool runs once if approved. Returns the text
        the asking call's client receives (recorded as its task's end).

        Raises:
            CheckpointError: the checkpoint is not a pending pause of this
                proxy's (``stale``, ``replayed``, ``tampered``).
            DecisionRequiredError: ``decision`` is not a ``CheckInDecision``.
            UpstreamError: the upstream did not start.
        """
        del traceparent, tracestate  # a proxied call has no turn to trace
        if self.governance is None:
            raise ValueError("this McpProxy has no governance: it holds no asks")
        async with self._deciding:
            if self.upstream.session is not None:
                return await self.asks.resume(checkpoint, decision)
            await self.start()
            try:
                return await self.asks.resume(checkpoint, decision)
            finally:
                await self.close()

    # -- routing and observers (``Routing``, ``Observers``) --------------

    def is_hidden_tool(self, name: str, ctx: ProxyContext) -> bool:
        """P8: hidden by name or predicate; a raising predicate hides (fail closed)."""
        return self.routing.is_hidden_tool(name, ctx)

    def is_hidden_resource(self, uri: str, ctx: ProxyContext) -> bool:
        """P8: the same on the exact URI."""
        return self.routing.is_hidden_resource(uri, ctx)

    async def telemetry(self, event: ToolCallTelemetry) -> None:
        """P15, P16: hand one telemetry event over; a failure is only logged."""
        await self.observers.telemetry(event)

    async def settle(self) -> None:
        """H6, P16: await the async observers' work owed so far, in order."""
        await self.observers.settle()

    async def _resubscribed(self) -> None:
        """P25: a new upstream session (a heal) holds no subscription: each
        URI a session still holds is subscribed to again."""
        for uri in self.subscriptions.uris():
            params = types.SubscribeRequestParams(uri=uri)
            try:
                await self.upstream.request(
                    types.SubscribeRequest(params=params), types.EmptyResult
                )
            except Exception as exc:  # noqa: BLE001 — one URI is not the others'
                log.warning(
                    "proxy: a resource subscription could not be made again "
                    "on the upstream's new session: %s",
                    type(exc).__name__,
                )

    async def _upstream_notification(self, note: Any) -> None:
        await self.listening.heard(note)  # the 2026 era's listen streams (P25)
        if isinstance(note, types.ResourceUpdatedNotification):
            uri = str(note.params.uri)
            for session in self.subscriptions.subscribers(uri):  # P25, P8
                if self.routing.is_hidden_resource(uri, session.fresh_context()):
                    continue
                try:
                    await session.notify(note)
                except Exception:  # one gone client is not the others'
                    log.info("proxy: a session missed a resource update", exc_info=True)
            return
        if isinstance(note, types.ToolListChangedNotification):
            self.routing.forget_schemas()
        if isinstance(note, _LIST_CHANGED):
            for session in list(self.sessions):  # P25: every live session
                try:
                    await session.notify(note)
                except Exception:  # one gone client is not the others'
                    log.info("proxy: a session missed a list_changed", exc_info=True)

    # -- sessions ---------------------------------------------------------

    async def identify(self, headers: Mapping[str, str]) -> tuple[Any, tuple[Any, ...]]:
        """Resolve a session's identity once (P17); raises what the resolver raises."""
        if self.resolve_identity is None:
            return None, ()
        out = self.resolve_identity(headers)
        if inspect.isawaitable(out):
            out = await out
        if isinstance(out, tuple) and len(out) == 2:
            return out[0], tuple(out[1] or ())
        return out, ()

    def open_session(
        self,
        *,
        transport: str,
        session_id: str | None,
        identity: Any = None,
        delegated_from: tuple[Any, ...] = (),
    ) -> ProxySession:
        """Make and register one client session (its own server and pipelines)."""
        audit_session = session_id if session_id is not None else self.stdio_session_id
        session = ProxySession(
            name=self.name,
            version=self.version,
            upstream=self.upstream,
            routing=self.routing,
            accounting=self.accounting,
            fast=self.fast_calls,
            transport=transport,
            session_id=session_id,
            identity=identity,
            delegated_from=delegated_from,
            audit_session=audit_session,
            subscriptions=self.subscriptions,
            listening=self.listening,
        )
        self.sessions.add(session)
        return session

    def closed_at_once(self, session: ProxySession) -> bool:
        """``close_session`` done now where it has nothing to await (no
        ledger, observers ``quiet``): ``True``; else nothing done, ``False``."""
        if (
            self.ledger is not None
            or not self.observers.quiet()
            or self.subscriptions.holds(session)
        ):
            return False
        self.sessions.discard(session)
        return True

    async def close_session(self, session: ProxySession) -> None:
        """P18: remove it, finalize its manifest, await ``on_session_closed`` once."""
        if session not in self.sessions:
            return
        self.sessions.discard(session)
        await unsubscribe_upstream(self.upstream, self.subscriptions.drop(session))
        if self.ledger is not None:
            await self.ledger.close_session(session.audit_session)
        await self.observers.session_closed(session.audit_session)

    async def run(
        self, read_stream: Any, write_stream: Any, *, lane: Any = None
    ) -> None:
        """Serve one stdio-style session over a pair of SDK streams (P21);
        ``lane`` (a ``fast.ServingLane``) answers its plain calls."""
        session = await self._stdio_session()
        if lane is not None:
            lane.attach(session)
        try:
            await session.run(read_stream, write_stream)
        finally:
            # P18, H6: the close (manifest, observers) runs whole, bounded
            # by drain_s and observer_timeout_s, even when cancelled.
            with anyio.CancelScope(shield=True):
                await self.close_session(session)

    async def _stdio_session(self) -> ProxySession:
        identity, delegated = await self.identify({})
        return self.open_session(
            transport="stdio",
            session_id=None,
            identity=identity,
            delegated_from=delegated,
        )

    async def serve_stdio(self) -> None:
        """Serve one client over this process's stdin/stdout."""
        from mcp.server.stdio import stdio_server

        from ._stdio import loop_pipes_usable, loop_stdio

        if loop_pipes_usable():
            async with loop_stdio() as (read_stream, write_stream, lane):
                await self.run(read_stream, write_stream, lane=lane)
            return
        async with stdio_server() as (read_stream, write_stream):
            await self.run(read_stream, write_stream)

    def http_app(self, **kw: Any) -> Any:
        """The Streamable HTTP proxy as an ASGI app (``proxy/_http.py``)."""
        from ._http import ProxyHttpApp

        return ProxyHttpApp(self, **kw)

    def http_server(self, host: str = "127.0.0.1", port: int = 0) -> Any:
        """``async with proxy.http_server() as url``: serve HTTP inside the block."""
        from ._uvicorn import http_server

        return http_server(self, host, port)

    async def serve_http(
        self, host: str = "127.0.0.1", port: int = 0, *, ready: Any = None
    ) -> None:
        """Serve clients over Streamable HTTP until cancelled (P24 defaults)."""
        from ._uvicorn import serve_http

        await serve_http(self, host, port, ready=ready)
