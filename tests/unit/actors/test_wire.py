"""The host wire: operations, results and errors cross as typed msgspec data (R12).

Pattern: round trips through the same encoders the hosts and clients use.
Role:    unit tests for ``actors/_wire.py`` (no Ray, no server).
Emits:   nothing.
"""

from __future__ import annotations

import pytest

from helmlog import check_in_approved
from helmlog.actors import HostError, HostUnavailableError
from helmlog.actors._wire import (
    Op,
    Result,
    decode_decision,
    decode_ops,
    decode_results,
    decode_state,
    encode_decision,
    encode_ops,
    encode_results,
    encode_state,
    output_of,
    wire_error,
)
from helmlog.events import (
    Checkpoint,
    CheckpointError,
    Message,
    SessionState,
    StreamTamperedError,
)
from helmlog.runtime import RecoveryRequiredError


def _raised(exc: Exception) -> Exception:
    """What a client rebuilds from what a host sent for ``exc``."""
    result = Result(id=1, error=wire_error(exc, "s1"))
    (back,) = decode_results(encode_results([result]))
    with pytest.raises(Exception) as info:
        output_of(back)
    return info.value


def test_r12_a_helmlog_error_raised_on_a_host_is_rebuilt_as_itself() -> None:
    """R12: class, code, data and text survive; tuples stay tuples."""
    err = _raised(RecoveryRequiredError(session_id="s1", call_ids=("c1", "c2")))
    assert isinstance(err, RecoveryRequiredError)
    assert ("s1", ("c1", "c2"), "ERR_RECOVERY_REQUIRED") == (
        err.session_id,
        err.call_ids,
        err.code,
    )
    assert str(RecoveryRequiredError(session_id="s1", call_ids=("c1", "c2"))) == str(
        err
    )
    stale = _raised(CheckpointError("stale", "moved on"))
    assert ("stale", "moved on") == (stale.reason, stale.detail)  # type: ignore[attr-defined]


def test_r19_a_stream_tampered_error_crosses_the_wire_as_itself() -> None:
    """R19/R12: a host's refusal of a tampered stream reaches the client typed,
    with its session, first bad seq and reason, and not retryable."""
    sent = StreamTamperedError(session_id="s1", seq=12, reason="truncated")
    err = _raised(sent)
    assert isinstance(err, StreamTamperedError)
    assert ("s1", 12, "truncated", False, "ERR_STREAM_TAMPERED", str(sent)) == (
        err.session_id,
        err.seq,
        err.reason,
        err.retryable,
        err.code,
        str(err),
    )


def test_r12_value_and_type_errors_cross_and_others_become_host_errors() -> None:
    """ValueError/TypeError keep their class; anything else is a HostError
    naming the type and the session, never an arbitrary imported class."""
    assert ValueError is type(_raised(ValueError("bad")))
    other = _raised(KeyError("k"))
    assert isinstance(other, HostError)
    assert ("s1", "builtins.KeyError") == (other.session_id, other.error_type)


def test_r22_host_unavailable_carries_its_session_and_is_retryable() -> None:
    """R22: the error of a dead host names the session and says retry."""
    err = HostUnavailableError(session_id="s9", host=1, cause="ActorDiedError")
    assert ("s9", 1, True, "ERR_HOST_UNAVAILABLE") == (
        err.session_id,
        err.host,
        err.retryable,
        err.code,
    )


def test_r12_ops_results_and_state_round_trip() -> None:
    """An op with its checkpoint and decision, a result with its lazily
    decoded state, come back equal."""
    cp = Checkpoint(
        kind="conversation",
        session_id="s1",
        seq=7,
        history=(Message(role="user", content="hi"),),
    )
    check_in, _answer = encode_decision(check_in_approved(by="dana@ops", note="ok"))
    op = Op(
        id=3,
        kind="resume",
        session_id="s1",
        checkpoint=cp,
        check_in=check_in,
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        tracestate="vendor=1",
    )
    (back,) = decode_ops(encode_ops([op]))
    assert op == back
    decision = decode_decision(back)
    assert ("dana@ops", "ok", True) == (decision.by, decision.note, decision.approved)
    _none, raw = encode_decision({"card": "visa"})
    assert {"card": "visa"} == decode_decision(
        Op(id=4, kind="resume", session_id="s", answer=raw)
    )

    state = SessionState(session_id="s1", last_seq=7)
    result = Result(id=3, answer="done", checkpoint=cp, state=encode_state(state))
    (got,) = decode_results(encode_results([result]))
    assert ("done", cp, state) == (
        output_of(got),
        got.checkpoint,
        decode_state(got.state),
    )
