"""``helmlog whatif`` re-judges sessions recorded on a real Redis (issue 13).

Sessions of the refund desk are recorded through ``RedisEventStore``; the
command re-judges them under a changed ``--agent`` factory (its model and
tools raise if touched), one by one or ``--all [--since]``, printing the
summary table or one JSON document, and refuses bad input with exit 2.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from helmlog.cli import app
from helmlog.events import open_event_store
from tests.unit.runtime.whatif_agents import TOUCHED, record

pytestmark = pytest.mark.redis

runner = CliRunner()
TIGHT = "tests.unit.runtime.whatif_agents:tight"
SAME = "tests.unit.runtime.whatif_agents:same"


async def _record(url: str, *amounts: float) -> list[str]:
    store = open_event_store(url)
    try:
        return [await record(store, (a,)) for a in amounts]
    finally:
        await store.close()


def _run(*args: str) -> Any:
    TOUCHED.clear()
    result = runner.invoke(app, ["whatif", *args])
    assert [] == TOUCHED  # no model and no tool was called
    return result


def test_whatif_cli_reports_the_calls_a_tightened_ceiling_flips(redis_url: str) -> None:
    """Issue 13: exit 1 when a decision flips; the JSON names each flip."""
    low, high = asyncio.run(_record(redis_url, 100, 400))
    result = _run(low, high, "--store", redis_url, "--agent", TIGHT, "--json")
    assert 1 == result.exit_code, result.output
    doc = json.loads(result.stdout)
    assert (2, 1, 1) == (
        doc["whatif"]["sessions"],
        doc["whatif"]["flipped"],
        doc["whatif"]["flips"]["allow-to-deny"],
    )
    (flipped,) = [s for s in doc["sessions"] if s["divergence"]]
    assert (high, "c1", "ceiling") == (
        flipped["session_id"],
        flipped["divergence"]["tool_call_id"],
        flipped["divergence"]["middleware"],
    )
    table = _run(low, high, "--store", redis_url, "--agent", TIGHT)
    assert 1 == table.exit_code
    assert f"session {high} diverges at seq" in table.stdout
    assert "what-if summary" in table.stdout


def test_whatif_cli_all_since_and_an_identical_policy(redis_url: str) -> None:
    """``--all`` re-judges every session (``--since`` those active since a
    time); the recording policy flips nothing: exit 0."""
    ids = asyncio.run(_record(redis_url, 100, 700))
    result = _run("--all", "--store", redis_url, "--agent", SAME, "--json")
    assert 0 == result.exit_code, result.output
    doc = json.loads(result.stdout)
    assert set(ids) <= {s["session_id"] for s in doc["sessions"]}
    assert 0 == doc["whatif"]["flipped"]
    later = _run("--all", "--since", "2h", "--store", redis_url, "--agent", SAME)
    assert 0 == later.exit_code, later.output
    future = _run(
        "--all", "--since", "2999-01-01", "--store", redis_url, "--agent", SAME
    )
    assert 0 == future.exit_code
    cells = [line.split("│") for line in future.stdout.splitlines()]
    counts = {row[1].strip(): row[2].strip() for row in cells if len(row) == 4}
    assert ("0", "0") == (counts["sessions"], counts["decisions"])


def test_whatif_cli_refuses_bad_input_with_typed_errors(redis_url: str) -> None:
    """Issue 13: an unknown session, a factory that does not import, and a
    tampered stream each exit 2 naming the error; nothing is re-judged."""
    (sid,) = asyncio.run(_record(redis_url, 100))
    unknown = _run("no-such-session", "--store", redis_url, "--agent", SAME)
    assert 2 == unknown.exit_code
    assert "UnknownSessionError" in unknown.stderr
    factory = _run(sid, "--store", redis_url, "--agent", "no_such_module:make")
    assert 2 == factory.exit_code
    assert "AgentFactoryError" in factory.stderr
    client = redis.Redis.from_url(redis_url)
    try:
        key = f"helmlog:{{{sid}}}:events"
        first = client.xrange(key, count=2)[1][0]
        client.xdel(key, first)
    finally:
        client.close()
    tampered = _run(sid, "--store", redis_url, "--agent", SAME)
    assert 2 == tampered.exit_code
    assert "StreamTamperedError" in tampered.stderr
    usage = _run("--store", redis_url, "--agent", SAME)
    assert 2 == usage.exit_code
