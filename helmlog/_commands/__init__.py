"""The ``helmlog`` commands, each module one group, all on one Typer app.

Pattern: ``_app`` holds the app and shared wiring; each module registers
         its commands with ``@app.command()`` when imported, in the order
         ``--help`` lists them.
Role:    the face (private); ``helmlog.cli`` re-exports ``app`` and runs it.
Emits:   nothing itself.

Groups: ``_demo``, ``_record`` (replay, verify, tail, watch), ``_approvals``
(asks, approve, decline), ``_serving`` (serve, recover, mcp-proxy),
``_whatif``. Laws: R18 (the command line), and each module's own.

Why commands stay thin: what they run lives in the layers (gateway, sinks,
runtime) or in modules a test calls directly; a command wires it to options.
"""

from __future__ import annotations

# isort: off
# Each registers its commands as it is imported: this is --help's order.
from . import _demo, _record, _approvals, _serving, _whatif, _evidence

# isort: on
from ._app import app

__all__ = ["app"]

COMMAND_MODULES = (_demo, _record, _approvals, _serving, _whatif, _evidence)
"""The command modules, in the order their commands were registered."""
