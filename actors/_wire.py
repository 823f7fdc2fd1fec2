"""What hosts and clients exchange: typed, msgspec-encoded batches of operations.

Pattern: a small wire protocol of frozen Structs: ``Op``s go to a host as ONE
         actor call; each comes back as a ``Result`` (an answer, a pause, a
         typed error, or nothing) in groups as they finish; ``HostInfo`` and
         ``HostUsage`` describe a host.
Role:    actors layer; the ``ClusterAgent`` encodes, the ``SessionHost``
         answers, the client rebuilds what the agent would return or raise.

Laws: R12 (never pickled helmlog objects: a ``WireError`` carries class,
``code`` and data), R17 (the rebuilt error is the one the host raised).
Why the state is ``msgspec.Raw``: most callers never read it, so it is
decoded on first use. Only ``HelmlogError``, ``ValueError`` and ``TypeError``
are rebuilt by class; the wire never builds an arbitrary type.
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

import msgspec

from helmlog.events import Checkpoint, HelmlogError, SessionState
from helmlog.runtime import AskPause, CheckInDecision, MiddlewareAsk
from helmlog.runtime.lowlevel import pause_kind

from ._errors import HostError
from ._failover import DEFAULT_FACTS_SWEEP_S

OpKind = Literal["run", "resume", "recover", "snapshot", "ping"]

# A Raw field cannot be optional: msgpack's nil stands for "none".
NIL = msgspec.Raw(b"\xc0")


class DecisionIn(msgspec.Struct, frozen=True, kw_only=True):
    """A ``CheckInDecision`` on the wire."""

    approved: bool
    by: str
    at: int
    note: str | None = None


class Op(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One operation on one session, as a client sends it to the session's host.

    Attributes:
        id: the client's number for it, echoed by its ``Result``.
        kind: ``run`` (fresh when ``checkpoint`` is ``None``), ``resume``,
            ``recover``, ``snapshot`` (the session's served state) or ``ping``
            (a bare round trip).
        session_id: the session (placement was computed from it).
        message: a run's message.
        checkpoint: what a continued run continues from, or what a resume
            answers; ``None`` for a fresh run.
        identity: a run's identity, as given.
        traceparent: the caller's W3C trace context for a run or resume
            (``tracestate`` beside it), as given.
        check_in: a resume's ``CheckInDecision``.
        answer: a resume's ``ask_human`` answer (msgpack), when not a check-in.
        state: whether the result should carry the session's served state.
    """

    id: int
    kind: OpKind
    session_id: str
    message: str | None = None
    checkpoint: Checkpoint | None = None
    identity: dict[str, Any] | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    check_in: DecisionIn | None = None
    answer: msgspec.Raw = NIL
    state: bool = True


class PauseOut(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An ``AskPause`` on the wire (its checkpoint is the result's)."""

    kind: str
    question: str
    detail: msgspec.Raw = NIL
    middleware: str | None = None
    component_id: str | None = None
    tool_name: str
    tool_call_id: str


class WireError(msgspec.Struct, frozen=True, kw_only=True):
    """An error raised on a host: its class, its args and its data."""

    cls: str
    code: str = ""
    args: list[Any] = []
    data: dict[str, Any] = {}
    tuples: list[str] = []


class Result(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a host answers for one ``Op``.

    Attributes:
        id: the ``Op``'s id.
        answer: the turn's answer.
        pause: the pause the turn stopped at (its checkpoint is ``checkpoint``).
        checkpoint: where the call left the conversation (``agent.checkpoint()``).
        state: the session's served state, encoded (``msgspec.Raw``), when
            asked; ``NIL`` otherwise.
        error: what the operation raised instead.
        nothing: a ``recover`` that found nothing to finish.
    """

    id: int
    answer: str | None = None
    pause: PauseOut | None = None
    checkpoint: Checkpoint | None = None
    state: msgspec.Raw = NIL
    error: WireError | None = None
    nothing: bool = False


class HostInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a host is, for a client joining its cluster to check."""

    name: str
    index: int
    n_hosts: int
    store_url: str
    key_digest: str
    factory_key: str
    max_resident: int
    idle_s: float
    facts_sweep_s: float = DEFAULT_FACTS_SWEEP_S
    # The redaction of the factory's agent (G86), so a client that watches
    # its sessions' streams serves watchers what the host's journal would:
    # the policy's field names (``None``: no policy) and its placeholder.
    redact_fields: list[str] | None = None
    redact_placeholder: str = ""


class HostUsage(msgspec.Struct, frozen=True, kw_only=True):
    """How much a host holds: resident sessions, busy ones, traced bytes."""

    resident: int
    busy: int
    evicted: int
    failover_finished: int
    facts_published: int = 0
    traced_bytes: int = 0
    batches: int = 0
    groups: int = 0
    ops: int = 0


_encoder = msgspec.msgpack.Encoder()
_ops_decoder = msgspec.msgpack.Decoder(list[Op])
_results_decoder = msgspec.msgpack.Decoder(list[Result])
_state_decoder = msgspec.msgpack.Decoder(SessionState)
_detail_encoder = msgspec.msgpack.Encoder(enc_hook=str)


def encode_ops(ops: list[Op]) -> bytes:
    """A batch of operations, as one message."""
    return _encoder.encode(ops)


def decode_ops(data: bytes) -> list[Op]:
    """The inverse of ``encode_ops``."""
    return _ops_decoder.decode(data)


def encode_results(results: list[Result]) -> bytes:
    """A group of results, as one message."""
    return _encoder.encode(results)


def decode_results(data: bytes) -> list[Result]:
    """The inverse of ``encode_results``."""
    return _results_decoder.decode(data)


def encode_state(state: SessionState) -> msgspec.Raw:
    """A served state, encoded once, to ride inside a ``Result``."""
    return msgspec.Raw(_encoder.encode(state))


def decode_state(raw: msgspec.Raw) -> SessionState:
    """A state a ``Result`` carried."""
    return _state_decoder.decode(raw)


def result_of(op_id: int, out: str | AskPause | None, cp: Checkpoint | None) -> Result:
    """A host's answer to one operation (``None``: nothing to recover)."""
    if out is None:
        return Result(id=op_id, nothing=True, checkpoint=cp)
    if isinstance(out, AskPause):
        ask = out.ask
        pause = PauseOut(
            kind=out.kind,
            question=ask.question,
            detail=msgspec.Raw(_detail_encoder.encode(ask.detail)),
            middleware=ask.middleware,
            component_id=ask.component_id,
            tool_name=out.tool_name,
            tool_call_id=out.tool_call_id,
        )
        # Invariant: a run that returns a pause leaves the pause's checkpoint.
        return Result(id=op_id, pause=pause, checkpoint=out.checkpoint)
    return Result(id=op_id, answer=out, checkpoint=cp)


def output_of(result: Result) -> str | AskPause | None:
    """What the in-process agent would have returned; raises what it raised."""
    if result.error is not None:
        raise error_from(result.error)
    if result.pause is not None:
        p = result.pause
        assert result.checkpoint is not None
        detail = msgspec.msgpack.decode(p.detail)
        return AskPause(
            kind=pause_kind(p.kind),
            ask=MiddlewareAsk(p.question, detail, p.middleware, p.component_id),
            tool_name=p.tool_name,
            tool_call_id=p.tool_call_id,
            checkpoint=result.checkpoint,
        )
    if result.nothing:
        return None
    assert result.answer is not None
    return result.answer


def encode_decision(decision: Any) -> tuple[DecisionIn | None, msgspec.Raw]:
    """A resume's decision: a ``CheckInDecision`` or an ``ask_human`` answer."""
    if isinstance(decision, CheckInDecision):
        return (
            DecisionIn(
                approved=decision.approved,
                by=decision.by,
                at=decision.at,
                note=decision.note,
            ),
            NIL,
        )
    return None, msgspec.Raw(_detail_encoder.encode(decision))


def decode_decision(op: Op) -> Any:
    """The inverse of ``encode_decision``."""
    d = op.check_in
    if d is not None:
        return CheckInDecision(approved=d.approved, by=d.by, at=d.at, note=d.note)
    return msgspec.msgpack.decode(op.answer)


# -- errors -------------------------------------------------------------------

_BUILTIN: dict[str, type[Exception]] = {
    "ValueError": ValueError,
    "TypeError": TypeError,
}


def wire_error(exc: BaseException, session_id: str) -> WireError:
    """An error a host raised, as data."""
    cls = type(exc)
    if isinstance(exc, HelmlogError):
        fields = vars(exc)
        return WireError(
            cls=f"{cls.__module__}:{cls.__qualname__}",
            code=exc.code,
            args=[_plain(a) for a in exc.args],
            data={k: _plain(v) for k, v in fields.items()},
            tuples=[k for k, v in fields.items() if isinstance(v, tuple)],
        )
    if type(exc) in (ValueError, TypeError):
        return WireError(cls=cls.__name__, args=[str(exc)])
    return WireError(
        cls="HostError",
        code=HostError.code,
        data={
            "session_id": session_id,
            "error_type": f"{cls.__module__}.{cls.__qualname__}",
            "detail": str(exc),
        },
    )


def error_from(wire: WireError) -> Exception:
    """The typed error a ``WireError`` describes, rebuilt on this side."""
    builtin = _BUILTIN.get(wire.cls)
    if builtin is not None:
        return builtin(*wire.args)
    if wire.cls == "HostError":
        return HostError(**wire.data)
    module, _, qualname = wire.cls.partition(":")
    target: Any = None
    try:
        target = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        target = None
    if not (isinstance(target, type) and issubclass(target, HelmlogError)):
        return HostError(
            session_id=str(wire.data.get("session_id", "")),
            error_type=wire.cls,
            detail=str(wire.args[0]) if wire.args else wire.code,
        )
    # Rebuilt with its data, without calling an __init__ whose keywords the
    # wire does not know (the same rule as HelmlogError.__reduce__).
    err = target.__new__(target)
    err.args = tuple(wire.args)
    err.__dict__.update(wire.data)
    for key in wire.tuples:
        err.__dict__[key] = tuple(err.__dict__[key])
    return err


def _plain(value: Any) -> Any:
    """A value msgpack can carry as itself (tuples become lists), else its str."""
    if value is None or isinstance(value, str | int | float | bool | bytes):
        return value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)
