"""The verifier and the pause MAC, in process: one walker, keys kept apart (R19).

Pattern: seal streams with ``seal``, verify them with ``verify_records`` from
         a position, and compare the checkpoints an agent hands out with the
         keyless fold of its stream.
Role:    unit tests for ``events/_chain.py`` and ``events/_checkpoint.py``.
Emits:   nothing.

Laws: R19 (incremental verification from a verified ``(seq, hash)``; the
typed refusal), R9 (the pause MAC uses a key derived for checkpoints, is not
stored, and is added by the agent), R1 (its keyed exception: the fold's pause
checkpoint has ``mac=None``), R3.
"""

from __future__ import annotations

import hashlib
import hmac

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helmlog import (
    Agent,
    AskPause,
    HelmlogError,
    StoreError,
    StreamTamperedError,
    Tool,
    ToolMiddleware,
    ask,
)
from helmlog.events import (
    Event,
    MemoryEventStore,
    Message,
    MessageCommitted,
    TurnStarted,
    fold,
    verify_records,
)
from helmlog.events.lowlevel import (
    binding_mac,
    hash_bytes,
    pause_mac,
    seal,
    sign_checkpoint,
)
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted

KEY = b"operator-secret-key"


def events(n: int) -> list[Event]:
    return [
        MessageCommitted(message=Message(role="user", content=f"m{i}"))
        for i in range(n)
    ]


@given(key=st.binary(min_size=1, max_size=200), data=st.binary(max_size=2_000))
def test_r03_the_chain_hash_is_hmac_sha256_byte_for_byte(
    key: bytes, data: bytes
) -> None:
    """R3: ``hash_bytes`` under a key is HMAC-SHA-256 (keys shorter and longer
    than a block), and SHA-256 without one."""
    expected = hmac.new(key, data, hashlib.sha256).hexdigest()
    assert expected == hash_bytes(data, key)
    assert hashlib.sha256(data).hexdigest() == hash_bytes(data)


def test_r19_stream_tampered_error_is_typed_and_not_retryable() -> None:
    """R19: the refusal is a HelmlogError (not a StoreError) with its data."""
    err = StreamTamperedError(session_id="s1", seq=4, reason="hash")
    assert isinstance(err, HelmlogError) and not isinstance(err, StoreError)
    assert ("ERR_STREAM_TAMPERED", False, "s1", 4, "hash") == (
        err.code,
        err.retryable,
        err.session_id,
        err.seq,
        err.reason,
    )
    assert "hash" in StreamTamperedError.REASONS


def test_r19_verification_continues_from_a_verified_position() -> None:
    """R19: records after a verified ``(seq, hash)`` verify against it alone;
    the returned position is where the next read continues."""
    _, first = seal("s1", events(3), after_seq=0, prev_hash="", key=KEY)
    position = verify_records("s1", first, KEY)
    assert (3, first[-1].hash) == position
    _, more = seal("s1", events(2), after_seq=3, prev_hash=first[-1].hash, key=KEY)
    assert (5, more[-1].hash) == verify_records("s1", more, KEY, after=position)
    assert position == verify_records("s1", [], KEY, after=position)
    # Records that do not follow the verified position are refused.
    with pytest.raises(StreamTamperedError) as caught:
        verify_records("s1", more, KEY, after=(3, "0" * 64))
    assert (4, "chain") == (caught.value.seq, caught.value.reason)
    with pytest.raises(StreamTamperedError) as caught:
        verify_records("s1", more[1:], KEY, after=position)
    assert (4, "order") == (caught.value.seq, caught.value.reason)  # its position


@pytest.mark.parametrize(
    "forge",
    [
        lambda data: hashlib.sha256(data).hexdigest(),
        lambda data: hmac.new(b"another key", data, hashlib.sha256).hexdigest(),
    ],
    ids=["plain-sha256", "another-key"],
)
def test_r19_under_a_chain_key_an_event_forged_without_it_is_refused(
    forge: object,
) -> None:
    """R19/R3: an event whose hash was made without the chain key is refused at
    its seq, however consistently the forger chained it."""
    _, records = seal("s1", events(2), after_seq=0, prev_hash="", key=KEY)
    _, (forged,) = seal(
        "s1", [TurnStarted(turn=2)], after_seq=2, prev_hash=records[-1].hash
    )
    assert callable(forge)
    forged = msgspec.structs.replace(forged, hash=forge(forged.data))
    with pytest.raises(StreamTamperedError) as caught:
        verify_records("s1", [*records, forged], KEY)
    assert (3, "hash") == (caught.value.seq, caught.value.reason)


def test_r09_the_pause_key_is_derived_so_no_stored_hash_is_a_mac() -> None:
    """R9: a pause MAC is made under a key derived for checkpoints: it differs
    from the MAC the chain key itself would give, and from the HMAC of the same
    bytes that a stored hash is."""
    bindings = {
        "session_id": "s1",
        "seq": 9,
        "tool_call_id": "c1",
        "args_digest": "a" * 64,
        "policy_version": "p" * 64,
        "content_digest": "c" * 64,
    }
    derived = pause_mac(KEY, **bindings)  # type: ignore[arg-type]
    assert derived != binding_mac(KEY, **bindings)  # type: ignore[arg-type]
    assert derived == pause_mac(KEY, **bindings)  # type: ignore[arg-type]
    assert derived != pause_mac(b"another key", **bindings)  # type: ignore[arg-type]
    assert derived != hash_bytes(b"helmlog/v1/checkpoint\x00", KEY)


async def test_r01_under_a_chain_key_the_fold_is_keyless_and_the_agent_signs() -> None:
    """R1/R9: the fold of a keyed stream holds the pause checkpoint with
    ``mac=None``; with its MAC added (``sign_checkpoint``) it equals, by
    ``to_json()``, what the agent returned and what its snapshot serves."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    store = MemoryEventStore(chain_key=KEY)
    call = ToolCallRequest(id="c1", name="refund", args={"n": 1})
    agent = (
        Agent.create(
            provider=scripted([Reply(tool_calls=[call])]), model="m", store=store
        )
        .tool(Tool("refund", "Refund.", schema, lambda n: "ok"))
        .tool_middleware(ToolMiddleware(name="ask", on_tool_call=lambda c: ask("ok?")))
        .build()
    )
    out = await agent.run("refund")
    assert isinstance(out, AskPause)
    assert out.checkpoint.mac is not None
    state = fold(r.decode() for r in await store.read(out.checkpoint.session_id))
    assert state.checkpoint is not None and state.checkpoint.mac is None
    signed = sign_checkpoint(state.checkpoint, state.pending, KEY)
    assert signed is not None
    assert out.checkpoint.to_json() == signed.to_json()
    served = agent.last_snapshot().checkpoint
    checkpoint = agent.checkpoint()
    assert served is not None and checkpoint is not None
    assert (signed.to_json(), signed.to_json()) == (
        served.to_json(),
        checkpoint.to_json(),
    )
    assert state.checkpoint == sign_checkpoint(state.checkpoint, state.pending, None)
