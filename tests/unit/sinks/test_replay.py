"""Replay serves a run as a watcher saw it, redaction included (R6, G86)."""

from __future__ import annotations

from helmlog import Agent, conversation_redaction
from helmlog.runtime.providers import scripted
from helmlog.runtime.testing import Recorder
from helmlog.sinks import replay


async def test_g86_replay_under_the_policy_serves_what_a_watcher_saw() -> None:
    """G86/R6: replayed with the agent's policy, no named value reaches a sink."""
    policy = conversation_redaction()
    live = Recorder()
    agent = (
        Agent.create(provider=scripted(["the secret answer"]), model="m", redact=policy)
        .watch(live)
        .build()
    )
    assert "the secret answer" == await agent.run("my secret question")
    assert agent.session_id is not None
    records = await agent.store.read(agent.session_id)

    later = Recorder()
    await replay(records, later, redact=policy)
    assert live.types == later.types
    assert "secret" not in repr(later.events)
    assert all(e.replayed for e in later.events)

    unredacted = Recorder()
    await replay(records, unredacted)
    assert "my secret question" in repr(unredacted.events)  # the stream kept it (G87)
