"""The auditor's guide (docs/evidence.md) runs as written, rewrite and all.

Pattern: every ``$`` line of the guide's console blocks runs, in order, as a
         real subprocess (``helmlog``, ``python -m helmlog_evidence``) on a
         real Redis; agents between the steps run in process with the key
         from the environment; then the key holder rewrites a session, signs
         it again and rebuilds the log, and the guide's own failure line is
         what verification ``--since`` the kept checkpoint prints.
Role:    e2e test for docs/evidence.md and ``helmlog evidence``.

Laws: issue 30 items 1, 4 and 5 (a docs section whose commands a test runs;
a rewritten and re-signed history caught by ``--since``), R18.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import (
    HeadSigner,
    Message,
    MessageCommitted,
    TurnEnded,
    TurnStarted,
    open_event_store,
)
from helmlog.events.lowlevel import DIGEST_START, advance_digest, seal
from helmlog.runtime.providers import scripted
from helmlog_evidence import SigningKey

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "evidence.md"
DOCS_URL = "redis://localhost:6379/0"

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]


def guide_commands() -> list[str]:
    """The ``$`` lines of the guide's console blocks, in order."""
    blocks = re.findall(r"```console\n(.*?)```", GUIDE.read_text(), re.S)
    return [
        line[2:] for block in blocks for line in block.splitlines() if line[:2] == "$ "
    ]


def guide_failure_line() -> str:
    """The failure the guide shows for a rewritten log."""
    (line,) = re.findall(r"```text\n(FAILED consistency.*)\n```", GUIDE.read_text())
    return line


def run(command: str, cwd: Path, url: str, env: dict[str, str]) -> str:
    """One guide line as a subprocess; its stdout. A failure raises."""
    words = shlex.split(command.replace(DOCS_URL, url).split(" > ")[0])
    exe = {"helmlog": str(Path(sys.executable).parent / "helmlog")}
    words[0] = sys.executable if words[0] == "python" else exe.get(words[0], words[0])
    done = subprocess.run(
        words, cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    if " > " in command:
        (cwd / command.split(" > ")[1]).write_text(done.stdout)
    if done.returncode != 0:
        raise AssertionError(
            f"{command} exited {done.returncode}: {done.stdout}{done.stderr}"
        )
    return done.stdout


def passing(call: object) -> object:
    """Every call passes."""
    return allow()


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order}: shipped"


async def a_session(url: str) -> str:
    """One governed run on the store, signing with the environment's key."""
    store = open_event_store(url)
    try:
        agent = (
            Agent.create(provider=scripted(["shipped"]), model="m", store=store)
            .tool(lookup)
            .tool_middleware(
                ToolMiddleware(name="pass", on_tool_call=lambda c: allow())
            )
            .build()
        )
        await agent.run("where is order 7?")
        assert agent.session_id is not None
        return agent.session_id
    finally:
        await store.close()


async def rewrite(url: str, session_id: str, key: SigningKey) -> None:
    """What a key holder would do: replace a session's events, sign its head
    again with the same key, and rebuild the log from the streams."""
    raw = aioredis.Redis.from_url(url)
    await raw.delete(
        f"helmlog:{{{session_id}}}:events",
        f"helmlog:{{{session_id}}}:head",
        "helmlog:{evidence}:log",
        "helmlog:{evidence}:leaves",
    )
    await raw.aclose()
    store = open_event_store(url, signer=HeadSigner(key))
    try:
        batch = [
            TurnStarted(turn=1),
            MessageCommitted(message=Message(role="user", content="nothing happened")),
            TurnEnded(turn=1, final_content="nothing to see"),
        ]
        _e, records = seal(session_id, batch, after_seq=0, prev_hash="")
        _seq, digest = advance_digest((0, DIGEST_START), records)
        last = records[-1]
        head = HeadSigner(key).sign(
            session_id, last.seq, last.hash, digest, keyed=False
        )
        _e, signed = seal(session_id, [head], after_seq=last.seq, prev_hash=last.hash)
        await store.append_sealed(session_id, [*records, *signed], 0)
        await store.repair_log()  # type: ignore[attr-defined]
    finally:
        await store.close()


async def test_the_auditors_guide_runs_as_written_and_catches_a_rewrite(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keygen, signing from the environment, a kept checkpoint, a bundle
    verified offline ``--since`` it; after a rewrite re-signed by the key
    holder, the same verification fails as the guide says (issue 30 item 5)."""
    import os

    keygen, signing, checkpoint, export, check = guide_commands()
    env = dict(os.environ)
    run(keygen, tmp_path, redis_url, env)
    assert 0o600 == (tmp_path / "keys" / "acme-2026.key").stat().st_mode & 0o777
    name, value = signing.removeprefix("export ").split("=", 1)
    env[name] = str(tmp_path / value)
    monkeypatch.setenv(name, str(tmp_path / value))
    first = [await a_session(redis_url) for _ in range(2)]
    run(checkpoint, tmp_path, redis_url, env)
    assert "\n2\n" in (tmp_path / "kept.checkpoint").read_text()
    later = await a_session(redis_url)
    for session in (first[0], later):
        run(export.replace("SESSION", session), tmp_path, redis_url, env)
        out = run(check, tmp_path, redis_url, env)
        assert out.startswith(f"verified: session {session} — ")
    key = SigningKey.parse((tmp_path / value).read_text())
    await rewrite(redis_url, first[0], key)
    run(export.replace("SESSION", first[0]), tmp_path, redis_url, env)
    with pytest.raises(AssertionError) as failed:
        run(check, tmp_path, redis_url, env)
    assert f"exited 1: {guide_failure_line()}\n" in str(failed.value)
