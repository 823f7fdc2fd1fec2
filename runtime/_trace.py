"""W3C trace context for a turn: taken from the caller, continued, or minted.

Pattern: a value object kept as the two W3C header strings (``traceparent``,
         ``tracestate``), resolved once per operation and recorded in the
         event that opens or continues a turn.
Role:    runtime layer; ``Agent.run``/``resume``/``recover`` resolve it, the
         loop records it, ``OtelSink`` parents the turn's spans on it.

Laws: issue 8 item 8 (context travels in the events; a resume or recovery
without one continues the recorded one), R1 (minting at the edge, not in
``fold``).
Why mint: a turn's spans may come from several hosts; only a context fixed in
the record gives them one trace id. A malformed caller value restarts the
trace (W3C) rather than stopping a governed run. No OpenTelemetry import.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from os import urandom as _urandom
from typing import TypeGuard

# version-traceid-parentid-flags; a future version may append fields.
_TRACEPARENT = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[0-9a-zA-Z_.=-]*)?"
)
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
_MAX_TRACESTATE = 512  # W3C: at most 32 members; vendors may cut at 512 chars

Trace = tuple[str, str]
"""``(traceparent, tracestate)``; ``("", "")`` when there is none."""

NO_TRACE: Trace = ("", "")


def valid_traceparent(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a ``traceparent`` W3C Trace Context accepts."""
    if not isinstance(value, str):
        return False
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return False
    version, trace_id, span_id, _flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return False
    return trace_id != _ZERO_TRACE and span_id != _ZERO_SPAN


def random_traceparent() -> str:
    """A fresh ``traceparent``: a random 128-bit trace id and 64-bit parent
    id (``secrets``), sampled. The default source of minted contexts.

    One read of 24 random bytes serves both ids (one per turn, on the hot
    path: bench/turns.py); an all-zero id (never, in practice) is drawn again.
    """
    # ``secrets.token_hex(24)`` is ``os.urandom(24).hex()``, through three
    # more frames.
    ids = _urandom(24).hex()
    trace_id, span_id = ids[:32], ids[32:]
    while trace_id == _ZERO_TRACE:
        trace_id = secrets.token_hex(16)
    while span_id == _ZERO_SPAN:
        span_id = secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01"


def given(traceparent: object, tracestate: object) -> Trace | None:
    """The caller's context when its ``traceparent`` is valid, else ``None``
    (its ``tracestate`` is kept only with a valid ``traceparent``)."""
    if not valid_traceparent(traceparent):
        return None
    state = tracestate if isinstance(tracestate, str) else ""
    return (traceparent, state.strip()[:_MAX_TRACESTATE])


def resolve(
    traceparent: object,
    tracestate: object,
    recorded: Trace,
    mint: Callable[[], str] = random_traceparent,
) -> Trace:
    """The context an operation records: the caller's when valid, else the
    recorded one it continues, else a minted one.

    Args:
        traceparent: what the caller passed (``None`` for nothing).
        tracestate: the caller's ``tracestate``.
        recorded: the context the session's open turn runs under
            (``Folder.trace``), ``NO_TRACE`` for a new turn.
        mint: the agent's source of fresh ``traceparent`` values.
    """
    caller = given(traceparent, tracestate)
    if caller is not None:
        return caller
    return recorded if recorded[0] else (mint(), "")
