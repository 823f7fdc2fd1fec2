"""The refund desk: the governed, scripted scenario ``helmlog demo`` runs.

Pattern: a worked example — five rules, one at each moment of the loop, and
         a three-turn conversation written in advance that trips every one.
Role:    the face; the first governed agent a new user reads: the rules,
         the tool and the agent (``_desk``), the conversation and the model
         that plays it (``_script``), running it (``_run``) and showing it
         (``_show``). The model is the script (``DemoModel``), so it needs no
         network, no key and no server.
Emits:   through the agent, into the event store it is given;
         ``decision_table`` and ``render_transcript`` draw the result.

Laws it shows: G71 (every moment: input, before-tool, after-tool, window,
output), G14 (the ceiling's deny stops the before-tool walk before four-eyes
runs), G15 (a denial is data: the model reads the reason and the turn goes
on), G59–G62 (four-eyes pauses the run; ``dana@ops`` approves and the call
runs), G22 (the PII strip rewrites what the model reads), G32–G34 (the SSN
scrub rewrites the message before anything is committed, on every turn),
G39 (the codename scrub's verdict is the answer), G80 (the window files its
own records, never rows).

Why the script checks itself: a demo that silently stops tripping a rule
would still exit 0 and teach the wrong thing, so a turn that ends otherwise
than written, or a moment that never spoke, raises ``DemoError`` and the CLI
exits non-zero.

Why the thresholds are not re-exported here: the rules read them from
``_desk`` when they run, so that is where a test moves one.
"""

from __future__ import annotations

from ._desk import build_agent
from ._run import (
    DEFAULT_CONCURRENCY,
    DemoRun,
    DemoSession,
    run_session,
    run_sessions,
)
from ._script import TURNS, DemoError, DemoModel, Turn, demo_agent, the_approval
from ._show import decision_table, render_transcript, summary

__all__ = [
    "DEFAULT_CONCURRENCY",
    "TURNS",
    "DemoError",
    "DemoModel",
    "DemoRun",
    "DemoSession",
    "Turn",
    "build_agent",
    "decision_table",
    "demo_agent",
    "render_transcript",
    "run_session",
    "run_sessions",
    "summary",
    "the_approval",
]
