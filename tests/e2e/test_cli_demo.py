"""``helmlog demo`` runs the governed refund desk with no server (R18).

The demo is the first governed agent a new user runs, so these tests hold it
to what it claims: every moment speaks (input, before-tool, after-tool,
window, output), the ceiling denies, four-eyes asks and ``dana@ops``
approves, the scrubs rewrite, and ``--sessions N`` runs N equal sessions on
one store. It is driven the three ways a user can: ``python -m helmlog.cli``,
the installed ``helmlog`` script, and in-process through Typer's runner.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from helmlog import LOOP_MOMENTS
from helmlog._commands import _demo as demo_command
from helmlog._demo import _desk as demo_desk
from helmlog.cli import app
from helmlog.events import MemoryEventStore, fold

ROOT = Path(__file__).resolve().parents[2]
WIDE = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}

ASK_QUESTION = "Refund $800.00 on order 1003? Refunds over $500 need a second person."
APPROVAL = "approved by dana@ops: customer verified by phone"

# (middleware, moment, outcome, changed, why) of every row of one session, in
# order: three turns, each opening with both message links at input.
EXPECTED_ROWS = [
    # ssn-scrub is input-only and codename-scrub output-only: each is not
    # called at the other phase and files a pass-through row there (G76).
    # turn 1: the SSN is masked; $120 passes both rules; the receipt's email
    # is masked
    ("ssn-scrub", "input", "allow", True, "masked a social security number"),
    ("codename-scrub", "input", "allow", False, None),
    ("refund-ceiling", "before-tool", "allow", False, None),
    ("four-eyes", "before-tool", "allow", False, None),
    ("pii-strip", "after-tool", "allow", True, "masked an email address"),
    ("ssn-scrub", "output", "allow", False, None),
    ("codename-scrub", "output", "allow", False, None),
    # turn 2: $25,000 is denied by the ceiling; four-eyes never runs (G14)
    ("ssn-scrub", "input", "allow", False, None),
    ("codename-scrub", "input", "allow", False, None),
    (
        "refund-ceiling",
        "before-tool",
        "deny",
        False,
        "refunds over $10,000 go to the finance desk",
    ),
    ("ssn-scrub", "output", "allow", False, None),
    ("codename-scrub", "output", "allow", False, None),
    # turn 3: $800 asks a person; dana@ops approves; the answer is rewritten
    ("ssn-scrub", "input", "allow", False, None),
    ("codename-scrub", "input", "allow", False, None),
    ("refund-ceiling", "before-tool", "allow", False, None),
    ("four-eyes", "before-tool", "ask", False, ASK_QUESTION),
    ("four-eyes", "before-tool", "allow", False, APPROVAL),
    ("pii-strip", "after-tool", "allow", True, "masked an email address"),
    ("ssn-scrub", "output", "allow", False, None),
    ("codename-scrub", "output", "allow", True, "rewrote an internal codename"),
]


def table_rows(output: str) -> list[tuple[str, ...]]:
    """The five cells of each line of the printed decision table."""
    rows = []
    for line in output.splitlines():
        cells = tuple(cell.strip() for cell in line.split("│")[1:-1])
        if len(cells) == 5 and cells[0]:
            rows.append(cells)
    return rows


def printed(rows: list[tuple[Any, ...]]) -> list[tuple[str, ...]]:
    """How EXPECTED_ROWS look once printed in the table."""
    return [(m, mo, o, "yes" if c else "no", w or "") for m, mo, o, c, w in rows]


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m helmlog.cli ...`` in a child process, from the repo root."""
    return subprocess.run(
        [sys.executable, "-m", "helmlog.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **WIDE},
        timeout=60,
    )


def demo_json(*args: str) -> dict[str, Any]:
    """The ``--json`` summary of an in-process ``helmlog demo``."""
    result = CliRunner().invoke(app, ["demo", "--json", *args], env=WIDE)
    assert 0 == result.exit_code, result.output
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def ledger(summary: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The first session's rows as (middleware, moment, outcome, changed, why)."""
    return [
        (r["middleware"], r["moment"], r["outcome"], r["changed"], r.get("why"))
        for r in summary["first_session"]["rows"]
    ]


def test_r18_demo_subprocess_prints_every_moment_and_the_approval() -> None:
    """R18/G71: ``python -m helmlog.cli demo`` exits 0 and its table shows every
    moment, the four-eyes ask row and the ``approved by dana@ops`` row."""
    result = run_module("demo")
    assert 0 == result.returncode, result.stderr
    rows = table_rows(result.stdout)
    assert list(LOOP_MOMENTS) == [m for m in LOOP_MOMENTS if m in {r[1] for r in rows}]
    four_eyes = [r for r in rows if r[0] == "four-eyes"]
    assert [
        ("four-eyes", "before-tool", "allow", "no", ""),
        ("four-eyes", "before-tool", "ask", "no", ASK_QUESTION),
        ("four-eyes", "before-tool", "allow", "no", APPROVAL),
    ] == four_eyes


def test_r18_demo_in_process_table_is_the_ledger_plus_window_lines() -> None:
    """R18/G80: in-process, the table's non-window lines are exactly the
    session's ledger rows, and the window lines are records, never rows."""
    result = CliRunner().invoke(app, ["demo"], env=WIDE)
    assert 0 == result.exit_code, result.output
    rows = table_rows(result.stdout)
    assert printed(EXPECTED_ROWS) == [r for r in rows if r[1] != "window"]
    window_lines = [r for r in rows if r[1] == "window"]
    assert [("sliding-window", "window", "compacted", "view")] * 4 == [
        r[:4] for r in window_lines
    ]


def test_r18_installed_script_runs_the_demo() -> None:
    """R18: the ``helmlog`` script the project installs runs ``demo`` and exits 0."""
    script = Path(sys.executable).parent / "helmlog"
    result = subprocess.run(
        [str(script), "demo", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **WIDE},
        timeout=60,
    )
    assert 0 == result.returncode, result.stderr
    assert (1, 3, len(EXPECTED_ROWS)) == tuple(
        json.loads(result.stdout)[k] for k in ("sessions", "turns", "rows")
    )


def test_r18_sessions_5_records_five_times_one_session() -> None:
    """R18: ``--sessions 5`` runs five independent sessions on one store, and
    records five times the turns and rows of one."""
    one = demo_json()
    five = demo_json("--sessions", "5")
    assert (1, 5) == (one["sessions"], five["sessions"])
    assert (5 * one["turns"], 5 * one["rows"]) == (five["turns"], five["rows"])
    assert 5 * one["window_records"] == five["window_records"]
    assert 5 == len(set(five["session_ids"]))


def test_r18_demo_ledger_holds_every_decision_the_scenario_makes() -> None:
    """G14/G15/G22/G32/G39/G62: the demo session's rows are the ceiling's deny,
    four-eyes' ask and dana@ops' approval, the PII strip's after-tool change,
    the SSN scrub's input change and the codename scrub's output change."""
    summary = demo_json()
    assert EXPECTED_ROWS == ledger(summary)
    by_why = {r.get("why"): r for r in summary["first_session"]["rows"]}
    assert (
        "Hi, Ana Ruiz here (SSN [SSN removed]). Order 1001 arrived broken: "
        "please refund the $120."
    ) == by_why["masked a social security number"]["after"]
    assert (
        "Refunded $800.00 on order 1003; receipt to [email removed]."
        == by_why["masked an email address"]["after"]
    )
    answer = summary["first_session"]["answer"]
    assert (
        "Refunded $800.00 on order 1003 under our goodwill programme; a second "
        "person signed it off." == answer
    )


def test_g80_demo_window_engages_and_files_records_not_rows() -> None:
    """G80/G81: the window engages on every model call of turns 2 and 3 and
    files its own records; no ledger row has moment ``window``."""
    summary = demo_json()
    records = summary["first_session"]["window_records"]
    assert [(1, 2, 4), (2, 2, 5), (1, 2, 7), (2, 2, 8)] == [
        (r["iteration"], r["turns_after"], r["turns_before"]) for r in records
    ]
    assert [] == [
        r for r in summary["first_session"]["rows"] if r["moment"] == "window"
    ]


def test_r18_demo_prints_the_recorded_session_ids() -> None:
    """R18: the demo names the sessions it recorded into the store, the first
    being the session whose table it printed."""
    result = CliRunner().invoke(
        app, ["demo", "--sessions", "3", "--store", "memory://"], env=WIDE
    )
    assert 0 == result.exit_code, result.output
    lines = result.stdout.splitlines()
    (recorded,) = [line for line in lines if line.startswith("recorded in memory://: ")]
    ids = recorded.removeprefix("recorded in memory://: ").split(", ")
    assert 3 == len(set(ids))
    assert [f"session {ids[0]}"] == [
        line.strip() for line in lines if line.strip().startswith("session ")
    ]
    summary, elapsed = lines[-1].split("  elapsed: ")
    assert "sessions: 3  turns: 9  rows: 60" == summary
    assert elapsed.endswith("s") and float(elapsed[:-1]) >= 0


def test_r18_demo_records_every_session_into_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R1/R18: ``--sessions 5`` records five independent sessions into the
    store it opened, each stream folding to the whole scenario's ledger."""
    store = MemoryEventStore()
    opened: list[str] = []

    def open_store(url: str) -> MemoryEventStore:
        opened.append(url)
        return store

    monkeypatch.setattr(demo_command, "open_event_store", open_store)
    summary = demo_json("--sessions", "5", "--store", "memory://")
    assert ["memory://"] == opened
    assert sorted(summary["session_ids"]) == sorted(asyncio.run(store.sessions()))
    for session_id in summary["session_ids"]:
        stream = [s.decode() for s in asyncio.run(store.read(session_id))]
        rows = fold(stream).middleware_decisions
        assert EXPECTED_ROWS == [
            (r.middleware, r.moment, r.outcome, r.changed, r.why) for r in rows
        ]


def test_r18_unknown_store_url_exits_non_zero_with_a_clear_error() -> None:
    """R11/R18: an unknown store URL is refused with a readable error, exit 1."""
    result = CliRunner().invoke(app, ["demo", "--store", "nope://x"], env=WIDE)
    assert 1 == result.exit_code
    assert "" == result.stdout
    assert "unknown event store URL 'nope://x'" in result.stderr


def test_r18_demo_that_goes_off_script_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """R18: if a rule stops tripping (four-eyes never asks), the demo says so and
    exits 1 instead of teaching the wrong thing."""
    monkeypatch.setattr(demo_desk, "FOUR_EYES_ABOVE", 1_000)
    result = CliRunner().invoke(app, ["demo"], env=WIDE)
    assert 1 == result.exit_code
    assert "turn 3 was written to pause for a person; it did not" in result.stderr


def test_r18_demo_whose_window_never_engages_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R18/G71: a demo in which a moment stays silent (a window too wide to
    engage) names the silent moment and exits 1."""
    monkeypatch.setattr(demo_desk, "KEEP_RECENT_TURNS", 50)
    result = CliRunner().invoke(app, ["demo"], env=WIDE)
    assert 1 == result.exit_code
    assert "silent: ['window']" in result.stderr


def test_r18_demo_runs_5000_sessions_with_bounded_concurrency() -> None:
    """R18: ``--sessions 5000`` runs in process, at most ``--concurrency`` at once,
    and records 5000 times one session."""
    big = demo_json("--sessions", "5000", "--concurrency", "50")
    assert (5000, 15000, 100000) == (big["sessions"], big["turns"], big["rows"])
    assert 5000 == len(set(big["session_ids"]))


def test_r18_demo_lists_at_most_ten_session_ids_in_its_text_output() -> None:
    """R18: the text output names the first ten ids and how many more; --json all."""
    result = CliRunner().invoke(app, ["demo", "--sessions", "12"], env=WIDE)
    assert 0 == result.exit_code, result.output
    (recorded,) = [
        line for line in result.stdout.splitlines() if line.startswith("recorded in")
    ]
    assert recorded.endswith(", ... (2 more; --json lists them all)")
    assert 10 == len(recorded.split(": ", 1)[1].split(", ")) - 1


def test_r18_demo_cluster_without_redis_server_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """R18: no redis-server anywhere: one line naming the package; exit 1."""
    from helmlog import _embedded

    monkeypatch.setattr(_embedded, "USUAL_PATHS", ())
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(app, ["demo", "--cluster"], env=WIDE)
    assert 1 == result.exit_code
    assert "" == result.stdout
    assert [_embedded.INSTALL_HINT] == result.stderr.splitlines()
    assert "apt-get install redis-server" in _embedded.INSTALL_HINT


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_r18_demo_cluster_runs_on_an_embedded_redis_server(ray_local: None) -> None:
    """R18/R17: ``demo --cluster`` with no --store starts its own redis-server,
    runs the sessions on Ray hosts, records what in process records, and
    stops the server."""
    from helmlog import _embedded

    result = CliRunner().invoke(
        app, ["demo", "--cluster", "--sessions", "20", "--json"], env=WIDE
    )
    assert 0 == result.exit_code, result.output
    summary = json.loads(result.stdout)
    assert (20, 60, 400) == (summary["sessions"], summary["turns"], summary["rows"])
    assert EXPECTED_ROWS == ledger(summary)
    where = summary["store"]
    assert where.startswith("an embedded redis-server (redis://127.0.0.1:")
    port = int(where.split("127.0.0.1:")[1].split("/")[0])
    assert not _embedded.answers(port)  # stopped at exit


@pytest.mark.redis
def test_r11_demo_200_sessions_on_redis_fail_no_turn(redis_url: str) -> None:
    """R11/R18: 200 concurrent sessions on one Redis store never fail a turn
    because a connection pool is full (issue 7: MaxConnectionsError)."""
    summary = demo_json(
        "--sessions", "200", "--concurrency", "200", "--store", redis_url
    )
    assert (200, 600, 4000) == (summary["sessions"], summary["turns"], summary["rows"])


def test_demo_on_memory_says_its_session_ids_end_with_it() -> None:
    """Issue 28 item 4: the default store ends with the demo; stderr says the
    ids printed cannot be read back and names --store to keep them."""
    result = CliRunner().invoke(app, ["demo"], env={**WIDE, "HELMLOG_STORE": ""})
    assert 0 == result.exit_code, result.output
    # (The transient progress bar leaves an empty line on a non-terminal.)
    assert [demo_command.MEMORY_NOTE] == _lines(result.stderr)
    assert "--store redis://HOST:PORT/DB" in demo_command.MEMORY_NOTE


@pytest.mark.redis
def test_demo_on_a_store_that_outlives_it_adds_no_note(redis_url: str) -> None:
    """Issue 28 item 4: on the user's Redis the ids stay readable: no note."""
    result = CliRunner().invoke(app, ["demo", "--store", redis_url], env=WIDE)
    assert (0, []) == (result.exit_code, _lines(result.stderr))


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_the_embedded_redis_note_says_the_ids_will_not_outlive_it() -> None:
    """Issue 28 item 4: with its embedded redis-server (``--cluster``, no
    --store) the demo says the session ids point into a server that stopped."""
    err = Console(file=io.StringIO(), width=300)
    demo_command.say_ids_are_gone(
        err, embedded=True, recorded="redis://127.0.0.1:6399/0"
    )
    text = err.file.getvalue()  # type: ignore[attr-defined]
    assert [demo_command.EMBEDDED_NOTE] == text.splitlines()
    assert "embedded redis-server stopped" in text
    assert "cannot be read back" in text


def test_demo_says_ray_is_starting_before_the_wait() -> None:
    """Issue 28 item 4: ``demo --cluster`` says Ray is starting, and that it
    takes seconds, before it starts it (checked here without starting Ray)."""
    err = Console(file=io.StringIO(), width=300)
    demo_command.say_starting_ray(err)
    (line,) = err.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert line.startswith("starting Ray: a local cluster of 2 session hosts")
    assert "5-40 s" in line
