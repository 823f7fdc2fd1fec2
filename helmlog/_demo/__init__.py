"""The refund desk: the governed, scripted scenario ``helmlog demo`` runs.

Pattern: a worked example — five rules, one at each moment of the loop, and
         a three-turn conversation written in advance that trips every one.
Role:    the face; rules, tool and agent (``_desk``), the script and its model
         (``_script``), running (``_run``) and showing it (``_show``). No
         network, key or server.
Emits:   through the agent, into the store it is given.

Laws it shows: G71, G14, G15, G59–G62, G22, G32–G34, G39, G80 (each rule's
law is told in ``_desk``).

Why the script checks itself: a demo that silently stops tripping a rule
would still exit 0, so a turn that ends otherwise raises ``DemoError``.
Thresholds live in ``_desk``, where the rules read them.
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
