"""The proxy's record: one keyed stream per proxy session, around every route.

Pattern: a write-ahead ledger outside every layer: ``proxy.call_started``
         before routing, ``proxy.call_finished`` before the response leaves,
         ``proxy.session_closed`` with a signed Merkle manifest at each end.
Role:    gateway layer; ``McpProxy`` holds one ``ProxyLedger``.
Emits:   the three ``proxy.*`` events, rows and ``tool.dispatched``.

Laws: P18, P20, P21, P22, P23, S6, R5, R7.

Why a payload key binds the event's seq (``v2:``): a key of the session and
request id alone opened a ciphertext moved to another event of the request.
Keys are derived, never the secret: publishing one reveals no other.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp.types as types
from mcp.shared.exceptions import MCPError

from helmlog.events import (
    EventStore,
    MemoryEventStore,
    MiddlewareDecision,
    ProxyCallFinished,
    ProxyCallStarted,
    ProxySessionClosed,
    ToolDispatched,
)
from helmlog.events.lowlevel import canonical_json, digest
from helmlog.runtime import wall_clock_ms
from helmlog.runtime.lowlevel import Journal, Listeners

from .._withheld import withheld
from ._layers import RejectionReason

if TYPE_CHECKING:
    from helmlog.runtime import Tool

    from ._calls import CallState
    from ._layers import ProxyContext
    from ._observers import Observers

log = logging.getLogger("helmlog.proxy")

CHAIN_LABEL = b"helmlog/v1/chain"
# A sealed payload whose key binds its event's seq (issue 23); unmarked ones
# were sealed with a key of the session and request id alone.
SEALED_AT = "v2:"
# How long a closing session waits for its calls in flight, by default.
DRAIN_S = 5.0
MANIFEST_LABEL = b"helmlog/v1/manifest"
PAYLOAD_LABEL = b"helmlog/v1/payload"
TIERS = ("low", "medium", "high")


def chain_key(secret: bytes) -> bytes:
    """P21: the audit chain's HMAC key, ``HMAC-SHA256(secret, b"helmlog/v1/chain")``."""
    return hmac.new(secret, CHAIN_LABEL, hashlib.sha256).digest()


def manifest_signature(manifest: dict[str, Any], secret: bytes) -> str:
    """P22: the HMAC of a manifest's canonical JSON without its ``signature``."""
    body = {k: v for k, v in manifest.items() if k != "signature"}
    key = hmac.new(secret, MANIFEST_LABEL, hashlib.sha256).digest()
    return hmac.new(key, canonical_json(body), hashlib.sha256).hexdigest()


def verify_manifest(manifest: dict[str, Any], secret: bytes) -> bool:
    """Whether a manifest's signature is the one its fields and ``secret`` give."""
    expected = manifest_signature(manifest, secret)
    return hmac.compare_digest(expected, str(manifest.get("signature", "")))


def merkle_root(hashes: list[str]) -> str:
    """P22: a Merkle root over event hashes; leaves and nodes domain-separated."""
    if not hashes:
        return hashlib.sha256(b"\x00").hexdigest()
    level = [hashlib.sha256(b"\x00" + h.encode()).digest() for h in hashes]
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            nxt.append(hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest())
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0].hex()


def _payload_key(
    secret: bytes, session_id: str, request_id: str, seq: int | None
) -> bytes:
    """P23: one event's payload key; ``seq`` ``None`` is the unbound, older form."""
    if seq is None:
        info = PAYLOAD_LABEL + b"|" + session_id.encode() + b"|" + request_id.encode()
    else:  # length-safe: no id can pass for another's, nor seq for an id
        info = PAYLOAD_LABEL + b"|v2|" + canonical_json([session_id, request_id, seq])
    return hmac.new(secret, info, hashlib.sha256).digest()


def seal_payload(
    value: Any,
    secret: bytes,
    session_id: str,
    request_id: str,
    field: str,
    seq: int,
) -> str:
    """P23: AES-256-GCM under the key of the event at ``seq``, a fresh nonce,
    the field as AAD; marked ``v2:`` (the key binds the position)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(12)
    aes = AESGCM(_payload_key(secret, session_id, request_id, seq))
    sealed = aes.encrypt(nonce, canonical_json(value), field.encode())
    return SEALED_AT + base64.b64encode(nonce + sealed).decode()


def open_payload(event: ProxyCallFinished, secret: bytes, field: str = "input") -> Any:
    """Decrypt a high-tier ``input``/``output`` of a ``proxy.call_finished``.

    A value sealed for another event (moved here, even from a call with the
    same request id) does not open: its key binds the seq it was sealed at.

    Raises:
        ValueError: the event stores no such sealed value, or it does not
            open here (moved, edited, or sealed under another secret).
    """
    import msgspec
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    sealed = event.input_sealed if field == "input" else event.output_sealed
    if sealed is None:
        raise ValueError(f"the event stores no sealed {field}")
    seq: int | None = None
    if sealed.startswith(SEALED_AT):
        sealed, seq = sealed[len(SEALED_AT) :], event.seq
    raw = base64.b64decode(sealed)
    aes = AESGCM(_payload_key(secret, event.session_id, event.request_id, seq))
    try:
        opened = aes.decrypt(raw[:12], raw[12:], field.encode())
    except InvalidTag:
        raise ValueError(
            f"the sealed {field} does not open at seq {event.seq} of"
            f" {event.session_id}: moved from another event, edited, or sealed"
            " under another secret"
        ) from None
    return msgspec.json.decode(opened)


@dataclass(frozen=True)
class ProxyAudit:
    """The proxy's audit configuration (P20–P23).

    Attributes:
        secret: the operator's secret, or a function returning it (called
            until it succeeds; a failure refuses that call, P21).
        key_id: an operator-chosen label for the key, put on manifests.
        store: where audit streams go (``None``: an in-memory store).
        drain_s: how long a session that ends (DELETE, TTL, shutdown) waits
            for its calls in flight before it records them cut off (P18).
    """

    secret: bytes | str | Callable[[], bytes | str]
    key_id: str = "default"
    store: EventStore | None = None
    drain_s: float = DRAIN_S

    def __post_init__(self) -> None:
        # H6: a str secret is its UTF-8 bytes; anything else is refused here,
        # not by every call afterwards.
        secret = self.secret
        if isinstance(secret, str):
            object.__setattr__(self, "secret", secret.encode("utf-8"))
        elif not (isinstance(secret, bytes) or callable(secret)):
            raise TypeError(
                "ProxyAudit secret is bytes, a str (used as its UTF-8 bytes) or a"
                f" function returning one, not {type(secret).__name__}"
            )
        if isinstance(self.secret, bytes) and not self.secret:
            raise ValueError("ProxyAudit secret must not be empty")


def ledger_error(cause: str, exc: BaseException | None = None) -> MCPError:
    """P20, S6: the record failed; nothing follows from it.

    ``cause`` is a fixed description; ``exc``'s text (a key provider's, a
    store's) goes only to the log, under the error's id (H4).
    """
    return withheld(
        f"the proxy's ledger could not record this call: {cause}",
        exc,
        reason=RejectionReason.LEDGER_UNAVAILABLE.value,
    )


class _InFlight:
    """A call recorded as started and not yet as finished (P18, P20)."""

    __slots__ = ("args", "began", "state", "tool")

    def __init__(self, tool: str, args: Any, state: CallState | None) -> None:
        self.tool = tool
        self.args = args
        self.state = state
        self.began = time.perf_counter()


class _Stream:
    """One proxy session's stream: its journal, the lock ordering appends, and
    the calls in flight a close waits for."""

    __slots__ = (
        "closed",
        "closing",
        "drained",
        "identity",
        "in_flight",
        "journal",
        "lock",
        "settle",
        "started_at",
    )

    def __init__(
        self,
        journal: Journal,
        started_at: int,
        settle: Callable[[], Awaitable[None]],
    ) -> None:
        self.journal = journal
        # Awaits the async on_event work the append's events owed (H6).
        self.settle = settle
        self.lock = asyncio.Lock()
        self.started_at = started_at
        self.identity: Any = None
        # By request id; a close waits (bounded) until it is empty.
        self.in_flight: dict[str, _InFlight] = {}
        self.drained = asyncio.Event()
        self.drained.set()
        self.closing = False
        self.closed = False  # its manifest is recorded: nothing follows it

    def ended(self, request_id: str) -> _InFlight | None:
        """Take a call off the in-flight list (``None``: cut off already)."""
        call = self.in_flight.pop(request_id, None)
        if not self.in_flight:
            self.drained.set()
        return call

    async def append(self, events: list[Any] | Callable[[int], list[Any]]) -> None:
        """Append events atomically, serialized with the session's others (P21).

        ``events`` may be a function of the seq the first of them gets (a
        sealed payload's key binds it, P23), called under the lock.
        """
        async with self.lock:
            if self.closed:  # a call cut off at the close, still running
                raise ledger_error("the session is closed")
            try:
                if self.journal.broken:
                    self.journal = await self.journal.reopened()
                if callable(events):
                    events = events(self.journal.next_seq)
                for event in events:
                    self.journal.add(event)
                await self.journal.flush()
            except Exception as exc:  # translated: fail closed (R5)
                self.journal.broken = True
                self.journal.discard()
                raise ledger_error("the append failed", exc) from exc
        await self.settle()


class _Recorder:
    """The pipeline's ``CallRecorder`` for one governed call (P14, R7).

    Before-tool rows that let the call on are held and appended with its
    ``tool.dispatched`` as one batch, in the same order (one flush, as an
    agent's step files them): nothing observable happens between the two
    and both are durable before ``execute`` (R7). Rows the call stops at
    (a deny, an ask) go at once; rows a later step refuses (validation) go
    when the caller ``release``s them.
    """

    __slots__ = ("changed_by", "held", "refused_by", "stream", "value")

    def __init__(self, stream: _Stream) -> None:
        self.stream = stream
        self.refused_by: str | None = None
        # the last after-tool transform: its link and value (issue 26, S9)
        self.changed_by: str | None = None
        self.value: Any = None
        self.held: list[Any] | None = None  # before-tool rows awaiting dispatch

    async def file(self, rows: list[MiddlewareDecision]) -> None:
        if not rows:
            return
        from helmlog.events import DecisionFiled

        on = True  # every row lets the call go on to its dispatch
        for row in rows:
            if row.outcome != "allow":
                self.refused_by = row.middleware
                on = False
            if row.moment != "before-tool":
                on = False
            if row.moment == "after-tool" and row.changed:
                self.changed_by, self.value = row.middleware, row.after
        events = [DecisionFiled(row=row) for row in rows]
        if on:  # appended with the dispatch, or by ``release``
            self.held = events if self.held is None else [*self.held, *events]
            return
        await self.release()
        await self.stream.append(events)

    async def dispatched(
        self, tool: Tool, tool_call_id: str, args: Any, attempt: int
    ) -> None:
        event = ToolDispatched(
            tool_name=tool.name, tool_call_id=tool_call_id, args=args, attempt=attempt
        )
        held, self.held = self.held, None
        await self.stream.append([*held, event] if held else [event])

    async def release(self) -> None:
        """Append held rows no dispatch followed (a refusal after the walk)."""
        held, self.held = self.held, None
        if held:
            await self.stream.append(held)


def canonical_result(result: dict[str, Any]) -> dict[str, Any]:
    """A ``tools/call`` result as the audit records it, whichever path and
    era it came by: ``isError`` present, the 2026 ``resultType`` only where it
    is not the default ``"complete"`` (so digests match the handshake era's)."""
    out = result
    if out.get("resultType") == "complete":
        out = {k: v for k, v in out.items() if k != "resultType"}
    if "isError" not in out:
        out = {**out, "isError": False}
    return out


class ProxyLedger:
    """Every proxy session's stream, in one store, under one key (P20–P22)."""

    def __init__(
        self,
        store: EventStore,
        audit: ProxyAudit | None,
        observers: Observers,
        *,
        name: str,
        version: str,
        sensitivity: Callable[[str, Any, Any], str] | None = None,
    ) -> None:
        self.store = store
        self.audit = audit
        self.observers = observers
        self.name = name
        self.version = version
        self.sensitivity = sensitivity
        self.listeners = Listeners()
        if observers.on_event is not None:
            # P16: only an ``on_event`` is told; with none, an append makes no
            # facts and no copies for nobody (``Journal`` skips an empty list)
            self.listeners.on("*", observers.event)
        self._streams: dict[str, _Stream] = {}
        self._secret: bytes | None = None

    @classmethod
    def of(
        cls,
        audit: ProxyAudit | None,
        store: EventStore | None,
        observers: Observers,
        *,
        name: str,
        version: str,
        sensitivity: Callable[[str, Any, Any], str] | None = None,
    ) -> ProxyLedger:
        """The ledger the options ask for (the audit's store wins)."""
        if audit is not None and not isinstance(audit, ProxyAudit):
            raise TypeError("McpProxy audit= takes a ProxyAudit")
        chosen = audit.store if audit is not None and audit.store else store
        return cls(
            chosen if chosen is not None else MemoryEventStore(),
            audit,
            observers,
            name=name,
            version=version,
            sensitivity=sensitivity,
        )

    def secret(self) -> bytes:
        """The operator's secret; derived again until it succeeds (P21)."""
        if self._secret is not None:
            return self._secret
        assert self.audit is not None
        raw = self.audit.secret
        value = raw() if callable(raw) else raw
        if isinstance(value, str):  # a provider's str: its UTF-8 bytes
            value = value.encode("utf-8")
        if not isinstance(value, bytes) or not value:
            raise ValueError("the audit secret must be non-empty bytes or str")
        key = chain_key(value)
        if self.store.chain_key is None:
            self.store.chain_key = key
        elif not hmac.compare_digest(self.store.chain_key, key):
            raise ValueError("the audit store is keyed with another chain key")
        self._secret = value
        return value

    def stream(self, audit_session: str) -> _Stream:
        """The stream of one proxy session (``audit_session``), made on first use."""
        found = self._streams.get(audit_session)
        if found is None:
            journal = Journal(self.store, audit_session, self.listeners, wall_clock_ms)
            found = _Stream(journal, wall_clock_ms(), self.observers.settle)
            self._streams[audit_session] = found
        return found

    def forget(self, audit_session: str) -> None:
        """Drop a stream no call is using from the cache (an ask's, once its
        pause or decision is recorded: its state is the store's, S10)."""
        found = self._streams.get(audit_session)
        if found is not None and not found.in_flight:
            del self._streams[audit_session]

    def recorder(self, audit_session: str) -> _Recorder:
        """Where a governed call's rows and dispatch go (P14)."""
        if self.audit is not None:
            self._keyed()
        return _Recorder(self.stream(audit_session))

    def _keyed(self) -> bytes:
        try:
            return self.secret()
        except Exception as exc:  # P21: refused, retried next call; H4: withheld
            raise ledger_error("the audit key could not be derived", exc) from exc

    # -- the audit of a call (P20) ------------------------------------------

    async def started(
        self,
        audit_session: str,
        ctx: ProxyContext,
        tool: str,
        args: Any,
        meta: Any = None,
        state: CallState | None = None,
    ) -> _Stream:
        """Append ``proxy.call_started`` before anything is routed; the call
        is in flight until its finish (or its cut-off) is recorded."""
        self._keyed()
        stream = self.stream(audit_session)
        if stream.closing:  # P18: its manifest is being finalized
            raise ledger_error("the session is closing")
        if stream.identity is None:
            stream.identity = ctx.identity
        await stream.append(
            [
                ProxyCallStarted(
                    request_id=ctx.request_id,
                    tool=tool,
                    transport=ctx.transport,
                    identity=ctx.identity,
                    caller_meta=meta,
                    server_name=ctx.server_name,
                    server_version=ctx.server_version,
                )
            ]
        )
        stream.in_flight[ctx.request_id] = _InFlight(tool, args, state)
        stream.drained.clear()
        return stream

    def tier(self, tool: str, identity: Any, args: Any) -> str:
        """P23: the call's tier; unknown tools and a failing function are high."""
        fn = self.sensitivity
        if fn is None:
            return "high"
        try:
            tier = fn(tool, identity, args)
        except Exception:  # fail closed: the strictest tier
            log.warning("proxy: sensitivity raised for %s", tool, exc_info=True)
            return "high"
        return tier if tier in TIERS else "high"

    async def finished(
        self,
        audit_session: str,
        ctx: ProxyContext,
        stream: _Stream,
        tool: str,
        state: CallState,
        outcome: str,
        result: types.CallToolResult | dict[str, Any] | None,
        error: MCPError | None,
        duration_ms: float,
    ) -> None:
        """Append ``proxy.call_finished`` before the response leaves (P20).

        Raises:
            MCPError: ``LEDGER_UNAVAILABLE`` when the append fails, or when
                the session's close already recorded this call cut off (its
                response is withheld: the record says it did not finish).
        """
        if stream.ended(ctx.request_id) is None:
            raise ledger_error("the session closed first; the call is cut off")
        secret = self._keyed()
        args = state.forwarded_args if state.forwarded_args is not None else {}
        if error is not None:
            output: Any = {
                "error": error.error.model_dump(mode="json", exclude_none=True)
            }
        elif isinstance(
            result, dict
        ):  # the JSON path's result, as the upstream sent it
            output = canonical_result(result)
        else:
            assert result is not None
            output = canonical_result(
                result.model_dump(mode="json", by_alias=True, exclude_none=True)
            )
        tier = self.tier(tool, ctx.identity, args)
        sid, rid = audit_session, ctx.request_id

        def at(seq: int) -> list[Any]:
            """The event, its payloads sealed for ``seq``, its position (P23)."""
            raw_in: Any = None
            raw_out: Any = None
            sealed_in = sealed_out = None
            if tier == "high":
                sealed_in = seal_payload(args, secret, sid, rid, "input", seq)
                sealed_out = seal_payload(output, secret, sid, rid, "output", seq)
            else:
                raw_in, raw_out = args, output
            event = ProxyCallFinished(
                request_id=rid,
                route=state.route,
                tool=tool,
                forwarded_tool=state.forwarded,
                outcome=outcome,
                rejection_reason=state.reason,
                duration_ms=round(duration_ms, 3),
                input_digest=digest(args),
                output_digest=digest(output),
                sensitivity=tier,
                input_raw=raw_in,
                output_raw=raw_out,
                input_sealed=sealed_in,
                output_sealed=sealed_out,
                identity=ctx.identity,
                server_name=ctx.server_name,
                server_version=ctx.server_version,
            )
            return [event]

        await stream.append(at)

    async def cut_off(self, audit_session: str, ctx: ProxyContext) -> None:
        """Record a call that was cancelled mid-route (its session ended) as
        finished with outcome ``"cut_off"``, unless its close did already."""
        stream = self._streams.get(audit_session)
        if stream is None:
            return
        call = stream.ended(ctx.request_id)
        if call is not None:
            await stream.append([self._cut(ctx.request_id, call, ctx.identity)])

    def _cut(self, request_id: str, call: _InFlight, identity: Any) -> Any:
        """P18, P20: what a call cut off by its session's end came to: no
        response left; only its digests are kept."""
        state = call.state
        return ProxyCallFinished(
            request_id=request_id,
            route=state.route if state is not None else "pipeline",
            tool=call.tool,
            forwarded_tool=state.forwarded if state is not None else None,
            outcome="cut_off",
            rejection_reason=state.reason if state is not None else None,
            duration_ms=round((time.perf_counter() - call.began) * 1000.0, 3),
            input_digest=digest(call.args),
            output_digest=digest(None),
            identity=identity,
            server_name=self.name,
            server_version=self.version,
        )

    async def _drain(self, stream: _Stream) -> None:
        """P18: wait (at most ``drain_s``) for the calls in flight to finish;
        record each one still running as cut off, before the manifest."""
        assert self.audit is not None
        # What is still running at the bound is recorded as cut off, below.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stream.drained.wait(), self.audit.drain_s)
        for request_id in list(stream.in_flight):
            call = stream.ended(request_id)
            if call is None:
                continue
            try:
                await stream.append([self._cut(request_id, call, stream.identity)])
            except MCPError:
                log.error(
                    "proxy: the cut-off of call %s in %s was not recorded",
                    request_id,
                    stream.journal.session_id,
                    exc_info=True,
                )

    # -- the end of a session (P18, P22) ------------------------------------

    async def close_session(self, audit_session: str) -> dict[str, Any] | None:
        """Append the session's signed manifest and hand it to ``on_manifest``."""
        if self.audit is None:
            return None
        try:
            secret = self.secret()
        except Exception:  # logged: a close never raises
            log.error(
                "proxy: no audit key: session %s has no manifest",
                audit_session,
                exc_info=True,
            )
            return None
        stream = self.stream(audit_session)
        stream.closing = True
        await self._drain(stream)
        records = await self.store.read(audit_session)
        manifest: dict[str, Any] = {
            "session_id": audit_session,
            "identity": stream.identity,
            "started_at": stream.started_at,
            "closed_at": wall_clock_ms(),
            "event_count": len(records),
            "merkle_root": merkle_root([r.hash for r in records]),
            "key_id": self.audit.key_id,
        }
        manifest["signature"] = manifest_signature(manifest, secret)
        try:
            await stream.append([ProxySessionClosed(manifest=manifest)])
        except MCPError:
            log.error(
                "proxy: the manifest of %s was not recorded",
                audit_session,
                exc_info=True,
            )
        stream.closed = True  # a call still running records nothing more
        self._streams.pop(audit_session, None)
        await self.observers.manifest(manifest)
        return manifest
