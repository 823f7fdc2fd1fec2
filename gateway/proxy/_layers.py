"""The proxy's middleware model: onion layers, ``compose``, the context, reasons.

Pattern: the onion: a layer is ``async (req, next, ctx)`` that may rewrite
         the request, call ``next`` at most once, rewrite the response.
Role:    gateway layer; the shared types of the proxy (``ProxyContext``,
         ``RejectionReason``), imported by every other proxy module.
Emits:   nothing.

Laws: P1, P2, P3 (``layers_of`` reverses, never mutates), P4, P5, P6, P7
(credential headers never reach ``headers``), P11, P13.

Why ``next`` returns an awaitable that raises: P4 pins the error to the
await, so a layer calling ``next`` twice and awaiting once is unaffected.
"""

from __future__ import annotations

import enum
import os
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

Req = TypeVar("Req")
Res = TypeVar("Res")

Next = Callable[[Any], Awaitable[Any]]
"""``await next(req)`` runs the rest of the pipeline with ``req``."""

Layer = Callable[[Any, Next, "ProxyContext"], Awaitable[Any]]
"""A proxy middleware: ``async def layer(req, next, ctx) -> response`` (P1)."""

CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}
)
MULTIPLE_NEXT = "next() called multiple times"


class RejectionReason(enum.StrEnum):
    """Why the proxy refused a request: a closed set of string constants (P11).

    A reason travels in the MCP error's ``data.rejection_reason`` beside the
    natural top-level code (or a refused tool result's ``_meta``). Four are
    reserved: identity, consent, delegation, budget.
    """

    TOOL_HIDDEN = "TOOL_HIDDEN"
    RESOURCE_HIDDEN = "RESOURCE_HIDDEN"
    POLICY_DENIED = "POLICY_DENIED"
    SESSION_LIMIT = "SESSION_LIMIT"
    BODY_LIMIT = "BODY_LIMIT"
    LEDGER_UNAVAILABLE = "LEDGER_UNAVAILABLE"
    IDENTITY_UNRESOLVED = "IDENTITY_UNRESOLVED"
    CONSENT_MISSING = "CONSENT_MISSING"
    DELEGATION_INVALID = "DELEGATION_INVALID"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    # issue 26: a result that breaks the tool's advertised ``outputSchema``
    OUTPUT_SCHEMA = "OUTPUT_SCHEMA"


# RFC 4122 version 4: the version nibble 4 and the variant bits 10, as
# ``uuid.UUID(bytes=..., version=4)`` sets them.
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def uuid4_hex() -> str:
    """``uuid.uuid4().hex`` (a random version-4 UUID's 32 hex digits), without
    building the ``UUID``: two per 2026-era HTTP request (issue 26)."""
    raw = int.from_bytes(os.urandom(16))
    return f"{raw & _UUID4_CLEAR | _UUID4_SET:032x}"


def uuid4_text() -> str:
    """``str(uuid.uuid4())``: the same random UUID in its dashed form."""
    h = uuid4_hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True, slots=True)
class ProxyContext:
    """What every layer of one proxied request knows about it (P7).

    Attributes:
        request_id: a fresh UUID per MCP request (not the JSON-RPC id).
        transport: ``"stdio"`` or ``"http"``.
        session_id: the HTTP session once initialized, else ``None``.
        headers: HTTP only: lowercased keys, repeated headers joined by
            ``", "``, credential headers removed; else ``None``.
        identity: the caller identity resolved once per session, else ``None``.
        delegated_from: identities the resolver supplied, else ``()``.
        server_name: the proxy's name (P25).
        server_version: the proxy's version (P25).
    """

    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    transport: str = "stdio"
    session_id: str | None = None
    headers: Mapping[str, str] | None = None
    identity: Any = None
    delegated_from: tuple[Any, ...] = ()
    server_name: str | None = None
    server_version: str | None = None


def clean_headers(raw: Iterable[tuple[str, str]]) -> dict[str, str]:
    """P7: lowercased keys, repeats joined by ``", "``, no credential header."""
    out: dict[str, str] = {}
    for key, value in raw:
        k = key.lower()
        if k in CREDENTIAL_HEADERS:
            continue
        out[k] = f"{out[k]}, {value}" if k in out else value
    return out


async def _called_twice() -> Any:
    raise RuntimeError(MULTIPLE_NEXT)


def _step(layers: Sequence[Layer], i: int, terminal: Next, ctx: ProxyContext) -> Next:
    """The ``next`` handed to layer ``i - 1``: runs layers ``i..`` then the terminal."""
    if i == len(layers):
        return terminal
    layer = layers[i]
    inner = _step(layers, i + 1, terminal, ctx)

    def enter(req: Any) -> Awaitable[Any]:
        called = False

        def next_once(r: Any) -> Awaitable[Any]:
            nonlocal called
            if called:
                return _called_twice()  # P4: raises when awaited, not now
            called = True
            return inner(r)

        return layer(req, next_once, ctx)

    return enter


class Composed:
    """``compose(layers)``: itself a layer, outermost first (P2).

    ``await composed(req, terminal, ctx)`` runs ``layers[0]`` enter, ...,
    ``terminal``, ..., ``layers[0]`` exit. ``ctx`` defaults to a fresh
    ``stdio`` context (P5).
    """

    __slots__ = ("layers",)

    def __init__(self, layers: Iterable[Layer]) -> None:
        self.layers: tuple[Layer, ...] = tuple(layers)

    def __call__(
        self, req: Any, terminal: Next, ctx: ProxyContext | None = None
    ) -> Awaitable[Any]:
        context = ctx if ctx is not None else ProxyContext()
        if not self.layers:
            return terminal(req)
        return _step(self.layers, 0, terminal, context)(req)


def compose(layers: Iterable[Layer]) -> Composed:
    """Compose proxy middleware outermost-first (P2).

    Note that ``McpProxy``'s option sequences are in the opposite,
    response-processing order (P3): never pass one straight to ``compose``.
    """
    return Composed(layers)


def layers_of(option: Sequence[Layer]) -> tuple[Layer, ...]:
    """P3: an option sequence (innermost first) in ``compose`` order."""
    return tuple(reversed(tuple(option)))


class PassThroughObserver:
    """A layer that also observes pass-through calls (P13); see the factory."""

    __slots__ = ("inner",)

    def __init__(self, inner: Layer) -> None:
        self.inner = inner

    def __call__(self, req: Any, next: Next, ctx: ProxyContext) -> Awaitable[Any]:
        return self.inner(req, next, ctx)

    def __repr__(self) -> str:
        return f"mark_pass_through_observer({self.inner!r})"


def mark_pass_through_observer(layer: Layer) -> Layer:
    """Return a new layer that also runs, at its position, for pass-through calls.

    The argument is not mutated (P13). Use it for observers (audit, metrics),
    never for transformers: on a pass-through call the upstream gets the
    original params and the client the raw outcome whatever the layer does.
    """
    if not callable(layer):
        raise TypeError("mark_pass_through_observer needs a middleware callable")
    return PassThroughObserver(layer)


def is_pass_through_observer(layer: Any) -> bool:
    """Whether ``layer`` was marked by ``mark_pass_through_observer``."""
    return isinstance(layer, PassThroughObserver)


Visibility = Callable[[str, ProxyContext], bool]


def visibility(option: Any, what: str) -> Visibility:
    """P8: a collection of names or a predicate ``(name, ctx) -> bool``."""
    if option is None:
        return lambda name, ctx: False
    if callable(option):
        return option  # type: ignore[no-any-return]
    if isinstance(option, str):
        raise TypeError(f"{what} is a collection of names or a predicate, not a str")
    names = frozenset(option)
    return lambda name, ctx: name in names
