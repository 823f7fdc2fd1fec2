"""The one way a command imports what a ``module:attr`` option names.

Pattern: one function (``import_named``): split the spec, put the current
         directory first on the import path, import, fetch the attribute;
         every failure is an ``AgentFactoryError`` naming what went wrong.
Role:    the face (CLI plumbing); ``--agent`` of approve, decline, serve,
         recover and whatif (``helmlog._asks.load_factory``,
         ``helmlog._whatif.load_agent``) and mcp-proxy's ``--policy``.
Emits:   nothing.

Laws: R18 (the command line). Why one function: each command imported
the spec its own way, so ``whatif --agent stricter:stricter_desk`` failed
where ``approve`` imported the same module from the current directory.
Why any exception while importing is caught: a user's module may fail with
a SyntaxError or its own error; the command reports it in one line.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from helmlog.runtime import AgentFactoryError


def cwd_first_on_path() -> None:
    """Put the current directory first on ``sys.path`` unless it is on it
    already, as ``python -m`` does: a module beside the shell imports without
    ``PYTHONPATH`` (the ``helmlog`` script's own entry is the venv's ``bin``)."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def import_named(spec: str, *, what: str = "function") -> Any:
    """``module:attr`` → the attribute, the current directory importable first.

    ``what`` names the attribute in a message ("function", "attribute").

    Raises:
        AgentFactoryError: ``reason`` "malformed" (not ``module:attr``),
            "import" (the module does not import, whatever it raised) or
            "missing" (the module has no such attribute).
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise AgentFactoryError(
            spec=spec, reason="malformed", detail=f"expected module:{what}"
        )
    cwd_first_on_path()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 — any import failure, named in one line
        raise AgentFactoryError(
            spec=spec,
            reason="import",
            detail=f"cannot import {module_name!r}: {type(exc).__name__}: {exc}",
        ) from None
    if not hasattr(module, attr):
        raise AgentFactoryError(
            spec=spec,
            reason="missing",
            detail=f"{module_name!r} has no {what} {attr!r}",
        )
    return getattr(module, attr)
