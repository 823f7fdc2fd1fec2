"""What crosses a policy or executor boundary: typed, msgspec-encoded messages.

Pattern: one frozen, tagged Struct per hook input and per answer (Temporal's
         "one typed input per hook"), encoded once per hop as msgpack:
         ``HookCall``/``HookReply`` (PolicyActor), ``ExecuteIn``/
         ``ExecuteReply`` (ToolExecutor), ``ChainInfo``.
Role:    actors layer; ``PolicyLink`` and the isolated-tool proxy encode here,
         ``PolicyActor`` and ``ToolExecutor`` decode.

Laws: R12, R17, G6 (a non-outcome reads as inline), G7 (``Raised`` comes back
as ``RemoteRaised`` with the same text).
Why msgspec-encodable values: a value that cannot be encoded fails closed.
Outcomes are rebuilt through ``allow``/``deny``/``ask`` so the verbs' checks
(G2–G5) hold for values from the wire.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import msgspec

from helmlog.events import Message
from helmlog.runtime import (
    Allow,
    Ask,
    Deny,
    MessageContext,
    ToolCallContext,
    ToolResultContext,
)


class RemoteRaised(Exception):
    """A hook or tool raised in its actor; ``str()`` is the remote text (G7, G18).

    Not a ``HelmlogError``: it stands for an exception of user code, raised
    here only so that the caller's walker or pipeline turns it into exactly
    the text it would have built inline.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def raised_text(exc: BaseException) -> str:
    """What a raise reads as inline: ``str(exc)``, else the type's name."""
    return str(exc) or type(exc).__name__


# -- what a PolicyActor hosts -----------------------------------------------


class LinkInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One hosted link: its name and which hooks it has."""

    name: str
    on_tool_call: bool = False
    on_tool_result: bool = False
    on_message: bool = False


class ChainInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The chain a ``PolicyActor`` hosts, in declaration order."""

    links: tuple[LinkInfo, ...]


# -- hook calls -------------------------------------------------------------


class ToolCallIn(msgspec.Struct, frozen=True, kw_only=True, tag="tool-call"):
    """A ``ToolCallContext`` for the hosted link at ``link`` (G13)."""

    link: int
    tool_name: str
    tool_source: str | None = None
    tool_call_id: str
    iteration: int
    args: Any = None
    history: tuple[Message, ...] = ()
    identity: dict[str, Any] | None = None


class ToolResultIn(msgspec.Struct, frozen=True, kw_only=True, tag="tool-result"):
    """A ``ToolResultContext`` for the hosted link at ``link`` (G21)."""

    link: int
    tool_name: str
    tool_source: str | None = None
    tool_call_id: str
    iteration: int
    args: Any = None
    history: tuple[Message, ...] = ()
    identity: dict[str, Any] | None = None
    result: Any = None
    error: bool = False


class MessageIn(msgspec.Struct, frozen=True, kw_only=True, tag="message"):
    """A ``MessageContext`` for the hosted link at ``link`` (G28)."""

    link: int
    phase: str
    content: str
    history: tuple[Message, ...] = ()
    identity: dict[str, Any] | None = None


HookCall = ToolCallIn | ToolResultIn | MessageIn
Context = ToolCallContext | ToolResultContext | MessageContext


def _identity(identity: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if identity is None else dict(identity)


def call_in(link: int, ctx: Context) -> HookCall:
    """The message for one hook call on the hosted link at ``link``."""
    if isinstance(ctx, ToolCallContext):
        return ToolCallIn(
            link=link,
            tool_name=ctx.tool_name,
            tool_source=ctx.tool_source,
            tool_call_id=ctx.tool_call_id,
            iteration=ctx.iteration,
            args=ctx.args,
            history=ctx.history,
            identity=_identity(ctx.identity),
        )
    if isinstance(ctx, ToolResultContext):
        return ToolResultIn(
            link=link,
            tool_name=ctx.tool_name,
            tool_source=ctx.tool_source,
            tool_call_id=ctx.tool_call_id,
            iteration=ctx.iteration,
            args=ctx.args,
            history=ctx.history,
            identity=_identity(ctx.identity),
            result=ctx.result,
            error=ctx.error,
        )
    return MessageIn(
        link=link,
        phase=ctx.phase,
        content=ctx.content,
        history=ctx.history,
        identity=_identity(ctx.identity),
    )


def context_of(msg: HookCall) -> Context:
    """The context the hosted hook receives, as the walker would have built it."""
    if isinstance(msg, ToolCallIn):
        return ToolCallContext(
            tool_name=msg.tool_name,
            tool_source=msg.tool_source,
            tool_call_id=msg.tool_call_id,
            iteration=msg.iteration,
            args=msg.args,
            history=msg.history,
            identity=msg.identity,
        )
    if isinstance(msg, ToolResultIn):
        return ToolResultContext(
            tool_name=msg.tool_name,
            tool_source=msg.tool_source,
            tool_call_id=msg.tool_call_id,
            iteration=msg.iteration,
            args=msg.args,
            history=msg.history,
            identity=msg.identity,
            result=msg.result,
            error=msg.error,
        )
    return MessageContext(
        phase=msg.phase,
        content=msg.content,
        history=msg.history,
        identity=msg.identity,
    )


# -- hook answers -----------------------------------------------------------


class AllowOut(msgspec.Struct, frozen=True, kw_only=True, tag="allow"):
    """An ``Allow``: a pass (``value`` None) or a transform, with ``why`` and
    the link's ``from_`` declaration (G93)."""

    value: Any = None
    why: str | None = None
    from_: dict[str, str] | None = None


class DenyOut(msgspec.Struct, frozen=True, kw_only=True, tag="deny"):
    """A ``Deny`` and its reason."""

    reason: str


class AskOut(msgspec.Struct, frozen=True, kw_only=True, tag="ask"):
    """An ``Ask``: question, detail, component id."""

    question: str
    detail: Any = None
    component_id: str | None = None


class NotAnOutcome(msgspec.Struct, frozen=True, kw_only=True, tag="not-an-outcome"):
    """The hook returned something else; only its type's name crosses (G6)."""

    type_name: str | None = None


class Raised(msgspec.Struct, frozen=True, kw_only=True, tag="raised"):
    """The hook or tool raised; ``text`` is ``str(exc) or type(exc).__name__``."""

    text: str


HookReply = AllowOut | DenyOut | AskOut | NotAnOutcome | Raised


def reply_of(out: Any) -> HookReply:
    """A hook's return value as its answer message."""
    if isinstance(out, Allow):
        return AllowOut(value=out.value, why=out.why, from_=out.from_)
    if isinstance(out, Deny):
        return DenyOut(reason=out.reason)
    if isinstance(out, Ask):
        return AskOut(
            question=out.question, detail=out.detail, component_id=out.component_id
        )
    return NotAnOutcome(type_name=None if out is None else type(out).__name__)


class _UncheckedAllow(Allow):
    """An allow as a hosted hook answered it, for the walker to judge (G94)."""

    __slots__ = ()

    def __init__(self, value: Any, why: Any, from_: Any) -> None:
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "why", why)
        object.__setattr__(self, "from_", from_)


@functools.lru_cache(maxsize=256)
def _stand_in_type(type_name: str) -> type:
    return type(type_name, (), {"__slots__": ()})


def outcome_of(reply: HookReply) -> Any:
    """What the hook returned, rebuilt for the caller's walker.

    Raises:
        RemoteRaised: the hook raised; its text is the remote one (G7).
    """
    if isinstance(reply, AllowOut):
        try:
            return Allow(reply.value, reply.why, reply.from_)
        except ValueError:
            # G94: an answer that breaks the verb's rules crosses as it was,
            # and the caller's walker refuses it with the reason an inline
            # hook would get.
            return _UncheckedAllow(reply.value, reply.why, reply.from_)
    if isinstance(reply, DenyOut):
        return Deny(reply.reason)
    if isinstance(reply, AskOut):
        return Ask(reply.question, reply.detail, reply.component_id)
    if isinstance(reply, Raised):
        raise RemoteRaised(reply.text)
    # G6: the walker names what it got by its type's name; a stand-in of that
    # name makes its refusal read exactly as it would inline.
    return None if reply.type_name is None else _stand_in_type(reply.type_name)()


# -- isolated tools ---------------------------------------------------------


class ExecuteIn(msgspec.Struct, frozen=True, kw_only=True):
    """Run the executor's tool ``tool_name`` with ``args`` (credentials resolved)
    as the call ``tool_call_id`` (``""`` from a client that predates it)."""

    tool_name: str
    args: dict[str, Any]
    tool_call_id: str = ""


class Returned(msgspec.Struct, frozen=True, kw_only=True, tag="returned"):
    """The tool returned ``value``."""

    value: Any = None


class AskedHuman(msgspec.Struct, frozen=True, kw_only=True, tag="asked-human"):
    """The tool called ``ask_human``: the run pauses on the caller's side (G69)."""

    question: str
    detail: Any = None


ExecuteReply = Returned | AskedHuman | Raised


# -- encoding ---------------------------------------------------------------

_encoder = msgspec.msgpack.Encoder()
_chain_decoder = msgspec.msgpack.Decoder(ChainInfo)
_call_decoder = msgspec.msgpack.Decoder(HookCall)
_hook_reply_decoder = msgspec.msgpack.Decoder(HookReply)
_execute_decoder = msgspec.msgpack.Decoder(ExecuteIn)
_execute_reply_decoder = msgspec.msgpack.Decoder(ExecuteReply)


def encode(message: msgspec.Struct) -> bytes:
    """msgpack-encode one message (``TypeError`` for a value msgspec cannot)."""
    return _encoder.encode(message)


def encode_reply(message: HookReply | ExecuteReply) -> bytes:
    """Encode an answer; one whose values cannot be encoded becomes ``Raised``."""
    try:
        return _encoder.encode(message)
    except (TypeError, ValueError, OverflowError) as exc:
        # Fails closed: the caller reads a raise, never a value it cannot check.
        return _encoder.encode(
            Raised(text=f"its answer cannot cross the actor boundary: {exc}")
        )


def decode_chain(data: bytes) -> ChainInfo:
    """The inverse of ``encode`` for a ``ChainInfo``."""
    return _chain_decoder.decode(data)


def decode_call(data: bytes) -> HookCall:
    """The inverse of ``encode`` for a hook call."""
    return _call_decoder.decode(data)


def decode_hook_reply(data: bytes) -> HookReply:
    """The inverse of ``encode_reply`` for a hook's answer."""
    return _hook_reply_decoder.decode(data)


def decode_execute(data: bytes) -> ExecuteIn:
    """The inverse of ``encode`` for an ``ExecuteIn``."""
    return _execute_decoder.decode(data)


def decode_execute_reply(data: bytes) -> ExecuteReply:
    """The inverse of ``encode_reply`` for an executor's answer."""
    return _execute_reply_decoder.decode(data)
