"""The ``helmlog`` commands, each module one group, all on one Typer app.

Pattern: ``_app`` holds the app and the wiring commands share; each other
         module registers its commands with ``@app.command()`` when
         imported; this package imports them in the order ``--help`` lists
         them (Typer lists commands in registration order).
Role:    the face (private); ``helmlog.cli`` re-exports ``app`` and runs it.
Emits:   nothing itself.

Groups: ``_demo`` (demo), ``_record`` (replay, verify, tail, watch),
``_approvals`` (asks, approve, decline), ``_serving`` (serve, recover,
mcp-proxy), ``_whatif`` (whatif).

Laws: R18 (the command line), and each module's own.

Why commands stay thin: the scenario, the stores and the renderers live in
modules a test can call directly (``helmlog._demo``, ``_record``, ``_asks``,
``_watch``, ``_whatif``, ``_recover``); a command only wires them to options.
"""

from __future__ import annotations

# isort: off
# Each registers its commands as it is imported: this is --help's order.
from . import _demo, _record, _approvals, _serving, _whatif

# isort: on
from ._app import app

__all__ = ["app"]

COMMAND_MODULES = (_demo, _record, _approvals, _serving, _whatif)
"""The command modules, in the order their commands were registered."""
