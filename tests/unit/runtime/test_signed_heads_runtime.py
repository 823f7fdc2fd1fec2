"""Signed heads from real runs: each turn's end and each pause carry one.

Pattern: real agents (scripted provider) on a store that signs, then the
         session's bundle built from the store and verified offline with
         ``helmlog_evidence`` alone; resume, replay and what-if on signed
         sessions; a session activated under a key it was not signed with.
Role:    unit tests for ``runtime/_journal.py`` (signing, R19's check) and
         ``Agent.create(signer=...)``.

Laws: R19 (activation checks the latest signed head under the configured
public keys; a head by another key is ``StreamTamperedError(reason=
"signature")``), G59/G60 (a paused session resumes), issue 30 items 1, 4, 6.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helmlog import (
    Agent,
    StreamTamperedError,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    is_ask_pause,
    tool,
)
from helmlog.events import (
    HeadSigned,
    HeadSigner,
    MemoryEventStore,
    session_bundle,
)
from helmlog.runtime.lowlevel import whatif
from helmlog.runtime.providers import scripted
from helmlog.sinks import replay
from helmlog_evidence import SigningKey, verify

from .helpers import call, calls

KEY = SigningKey.generate("runtime-test")


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def agent_on(
    store: MemoryEventStore, *replies: Any, signer: Any = None, asking: bool = False
) -> Agent:
    rule = (
        ToolMiddleware(name="approve", on_tool_call=lambda c: ask("ok?"))
        if asking
        else ToolMiddleware(name="pass", on_tool_call=lambda c: allow())
    )
    builder = Agent.create(
        provider=scripted(list(replies)), model="m", store=store, signer=signer
    )
    return builder.tool(refund).tool_middleware(rule).build()


async def types_of(store: MemoryEventStore, session_id: str) -> list[str]:
    return [r.type for r in await store.read(session_id)]


async def test_each_turn_end_is_followed_by_its_signed_head_and_verifies() -> None:
    """A run's last stored event is its signed head, right after the turn's
    end; the session's bundle verifies with the public key (issue 30 item 1)."""
    store = MemoryEventStore()
    agent = agent_on(
        store, calls(call("c1", "refund", order=1)), "done", "again", signer=KEY
    )
    await agent.run("refund 1")
    sid = agent.session_id
    assert sid is not None
    await agent.run("and again", session_id=sid)
    kinds = await types_of(store, sid)
    assert 2 == kinds.count(HeadSigned.type)
    assert [HeadSigned.type, "agent.turn_end"] == [kinds[-1], kinds[-2]]
    bundle = await session_bundle(store, sid, KEY)
    verdict = verify(bundle, [KEY.public])
    assert (True, len(kinds) - 1) == (verdict.ok, verdict.head_seq)


async def test_no_key_means_no_signed_head() -> None:
    """Without a signer nothing changes: no signed head is recorded."""
    store = MemoryEventStore()
    agent = agent_on(store, "done")
    await agent.run("hi")
    assert agent.session_id is not None
    assert HeadSigned.type not in await types_of(store, agent.session_id)


async def test_a_pause_is_signed_and_the_session_resumes(tmp_path: Path) -> None:
    """An ask's pause carries a signed head; resume (G60) goes on and its
    turn's end is signed too; the key may come from a key file."""
    path = tmp_path / "k.key"
    path.write_text(KEY.text())
    store = MemoryEventStore()
    agent = agent_on(
        store,
        calls(call("c1", "refund", order=7)),
        "refunded",
        signer=path,
        asking=True,
    )
    paused = await agent.run("refund 7")
    assert is_ask_pause(paused)
    sid = paused.session_id
    kinds = await types_of(store, sid)
    assert [HeadSigned.type, "pause.request"] == [kinds[-1], kinds[-2]]
    assert "refunded" == await agent.resume(
        paused.checkpoint, check_in_approved(by="dana")
    )
    kinds = await types_of(store, sid)
    assert 2 == kinds.count(HeadSigned.type) and HeadSigned.type == kinds[-1]
    assert verify(await session_bundle(store, sid, KEY), [KEY.public]).ok


async def test_replay_and_whatif_work_on_a_signed_session() -> None:
    """Replay delivers a signed session's events; what-if re-judges it and
    finds nothing flipped (issue 30 item 6)."""
    store = MemoryEventStore()
    agent = agent_on(store, calls(call("c1", "refund", order=1)), "done", signer=KEY)
    await agent.run("refund 1")
    sid = agent.session_id
    assert sid is not None
    records = await store.read(sid)
    seen: list[str] = []

    class Sink:
        def on_event(self, event: Any) -> None:
            seen.append(event.type)

    assert len(records) == await replay(records, Sink())
    assert HeadSigned.type in seen
    report = await whatif(records, agent_on(MemoryEventStore(), "unused"))
    assert ((), (), 1) == (report.flipped, report.diverged, report.decisions)


async def test_r19_a_session_signed_by_another_key_is_refused_before_acting() -> None:
    """R19: an agent that trusts only key B activates a session whose heads
    key A signed: ``StreamTamperedError(reason="signature")``, nothing runs."""
    store = MemoryEventStore()
    first = agent_on(store, "done", signer=KEY)
    await first.run("hi")
    sid = first.session_id
    assert sid is not None
    before = await types_of(store, sid)
    other = SigningKey.generate("runtime-other")
    second = agent_on(store, "never", signer=HeadSigner(other))
    with pytest.raises(StreamTamperedError) as caught:
        await second.run("hi again", session_id=sid)
    assert "signature" == caught.value.reason
    assert before == await types_of(store, sid)
    # With the old key kept as a trusted public key (a rotation), it goes on.
    rotated = agent_on(
        store, "fine", signer=HeadSigner(other, public_keys=[KEY.public])
    )
    assert "fine" == await rotated.run("hi again", session_id=sid)


async def test_signer_takes_a_provider_and_refuses_junk() -> None:
    """``signer=`` takes a key provider; anything else is an AgentBuildError."""
    from helmlog.runtime import AgentBuildError

    store = MemoryEventStore()
    agent = agent_on(store, "done", signer=lambda: KEY)
    await agent.run("hi")
    assert agent.session_id is not None
    assert HeadSigned.type in await types_of(store, agent.session_id)
    with pytest.raises(AgentBuildError, match="signer="):
        agent_on(MemoryEventStore(), "x", signer=42)
