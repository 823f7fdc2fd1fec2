"""``helmlog evidence`` as an operator and an auditor run it, on real stores.

Pattern: real subprocesses (``helmlog evidence ...``, ``python -m
         helmlog_evidence``) over a real Redis and a real 3-master Redis
         Cluster, whose sessions a real agent recorded with a signing key;
         bundles tampered on disk; exit codes and first failures asserted.
Role:    e2e tests for ``helmlog/_commands/_evidence.py``.

Laws: issue 30 items 1, 4 and 5 (keygen writes a 0600 private key; exit 0
verified, 1 naming the first failure, 2 on bad input), R18.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import HeadSigner, open_event_store
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog_evidence import (
    Checkpoint,
    SigningKey,
    decode_bundle,
    encode_bundle,
    open_note,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]

HELMLOG = str(Path(sys.executable).parent / "helmlog")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HELMLOG, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def audit(bundle: Path, vkey: Path) -> subprocess.CompletedProcess[str]:
    args = ["verify", str(bundle), "--public-key", str(vkey)]
    return subprocess.run(
        [sys.executable, "-P", "-m", "helmlog_evidence", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def passing(call: object) -> object:
    """Every call passes."""
    return allow()


async def recorded(url: str, key: SigningKey, turns: int = 2) -> str:
    """A session of ``turns`` governed turns on the store, signed by ``key``."""
    store = open_event_store(url, signer=HeadSigner(key))
    script: list[Reply | str] = []
    for turn in range(turns):
        call = ToolCallRequest(id=f"c{turn}", name="refund", args={"order": turn})
        script += [Reply(tool_calls=[call]), f"done {turn}"]
    try:
        agent = (
            Agent.create(provider=scripted(script), model="m", store=store)
            .tool(refund)
            .tool_middleware(ToolMiddleware(name="pass", on_tool_call=passing))
            .build()
        )
        sid = None
        for turn in range(turns):
            await agent.run(f"refund {turn}", session_id=sid)
            sid = agent.session_id
        assert sid is not None
        return sid
    finally:
        await store.close()


def test_keygen_writes_a_pair_and_never_overwrites(tmp_path: Path) -> None:
    """``keygen --out DIR``: NAME.key (0600, signer-key format) and NAME.vkey
    (verifier-key format); a second run into the same folder exits 2."""
    done = cli("evidence", "keygen", "--out", "k", "--name", "ops-1", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    private = tmp_path / "k" / "ops-1.key"
    key = SigningKey.parse(private.read_text())
    assert 0o600 == private.stat().st_mode & 0o777
    assert key.public.text() + "\n" == (tmp_path / "k" / "ops-1.vkey").read_text()
    again = cli("evidence", "keygen", "--out", "k", "--name", "ops-1", cwd=tmp_path)
    assert 2 == again.returncode and "never overwrites" in again.stderr


@pytest.mark.parametrize("kind", ["redis", "cluster"])
async def test_export_verify_and_every_tampering_on_a_real_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A recorded session's bundle verifies (``helmlog evidence verify`` and
    the standalone verifier); an edited event, a dropped event, a truncated
    proof and a wrong key each exit 1 naming the first failure; the printed
    checkpoint verifies under the key (issue 30 items 4 and 5)."""
    url: str = request.getfixturevalue(
        "redis_cluster_url" if kind == "cluster" else "redis_url"
    )
    key = SigningKey.generate("ops")
    (tmp_path / "ops.key").write_text(key.text())
    vkey = tmp_path / "ops.vkey"
    vkey.write_text(key.public.text() + "\n")
    await recorded(url, key)
    sid = await recorded(url, key, turns=3)
    out = tmp_path / "s.json"
    done = cli(
        "evidence", sid, "--store", url, "--key", "ops.key", "--out", "s.json",
        cwd=tmp_path,
    )  # fmt: skip
    assert 0 == done.returncode, done.stderr
    ok = cli("evidence", "verify", "s.json", "--public-key", str(vkey), cwd=tmp_path)
    assert 0 == ok.returncode, ok.stdout + ok.stderr
    assert ok.stdout.startswith(f"verified: session {sid} "), ok.stdout
    bundle = decode_bundle(out.read_bytes())
    records = bundle.records

    def tampered(name: str, changed: object) -> Path:
        path = tmp_path / name
        path.write_bytes(encode_bundle(changed))  # type: ignore[arg-type]
        return path

    at = next(i for i, r in enumerate(records) if b"refund" in r.data)
    edited = msgspec.structs.replace(
        records[at], data=records[at].data.replace(b"refund", b"REFUND", 1)
    )
    cases = {
        "edited": (
            msgspec.structs.replace(
                bundle, records=[*records[:at], edited, *records[at + 1 :]]
            ),
            f"FAILED hash at seq {at + 1}",
        ),
        "dropped": (
            msgspec.structs.replace(bundle, records=records[:1] + records[2:]),
            "FAILED order at seq 2",
        ),
        "short-proof": (
            msgspec.structs.replace(bundle, inclusion=bundle.inclusion[:-1]),
            "FAILED inclusion",
        ),
    }
    for name, (changed, expected) in cases.items():
        failed = audit(tampered(f"{name}.json", changed), vkey)
        said = failed.stdout[: len(expected)]
        assert (1, expected) == (failed.returncode, said), name
    stranger = tmp_path / "stranger.vkey"
    stranger.write_text(SigningKey.generate("ops").public.text())
    wrong = audit(out, stranger)
    assert (1, "FAILED head-signature") == (wrong.returncode, wrong.stdout[:21])
    printed = cli(
        "evidence", "checkpoint", "--store", url, "--key", "ops.key", cwd=tmp_path
    )
    opened = open_note(printed.stdout, [key.public])
    assert 5 == Checkpoint.parse(opened.text).size  # type: ignore[union-attr]


async def test_a_session_without_a_signed_head_is_refused(
    tmp_path: Path, redis_url: str
) -> None:
    """Exporting a session recorded without a key exits 2, saying why."""
    store = open_event_store(redis_url)
    try:
        agent = Agent.create(provider=scripted(["hi"]), model="m", store=store).build()
        await agent.run("hello")
        sid = agent.session_id
        assert sid is not None
    finally:
        await store.close()
    key = tmp_path / "k.key"
    key.write_text(SigningKey.generate("ops").text())
    done = cli(
        "evidence", sid, "--store", redis_url, "--key", str(key), "--out", "x.json",
        cwd=tmp_path,
    )  # fmt: skip
    assert 2 == done.returncode and "has no signed head" in done.stderr
