"""A governed proxy whose rule asks a person before a customer record is read.

Pattern: a script module: ``POLICY`` (what ``helmlog mcp-proxy --policy``
         loads: the proxy's name and its governance, an asking rule and the
         structured PII scrub) and ``PROXY``, the same proxy in front of the
         FastMCP 4 upstream (``fastmcp_upstream.py``) as a stdio child: what
         ``helmlog approve --agent ...proxy_ask_desk:PROXY`` decides with.
Role:    imported by ``test_proxy_asks.py``; the CLI loads it by name.
Emits:   nothing.

Laws: P14 and S10 (a governance ask is a durable pause, decided by a
person; the deciding process opens its own upstream connection).
"""

from __future__ import annotations

import sys
from typing import Any

from helmlog import ToolMiddleware, allow, ask
from helmlog.events import EventStore
from helmlog.gateway import McpProxy

from .fastmcp_upstream import SCRUB

#: The FastMCP 4 upstream as a stdio child (run from the repository root).
UPSTREAM = [sys.executable, "-m", "tests.unit.gateway.fastmcp_upstream"]


def _four_eyes(call: Any) -> Any:
    if call.tool_name == "customer":
        return ask(f"may the caller read {call.args.get('name')}'s record?")
    return allow()


#: Asks a person before ``customer`` runs; ``greet`` needs no one.
FOUR_EYES = ToolMiddleware(name="four-eyes", on_tool_call=_four_eyes)

#: ``helmlog mcp-proxy --policy tests.unit.gateway.proxy_ask_desk:POLICY``.
POLICY: dict[str, Any] = {"name": "desk", "governance": [FOUR_EYES, SCRUB]}

#: ``--agent tests.unit.gateway.proxy_ask_desk:PROXY``: rebuilt on the
#: command's store (``McpProxy.on_store``), started for the decision only.
PROXY = McpProxy(UPSTREAM, **POLICY)


def build(store: EventStore) -> McpProxy:
    """``--agent ...proxy_ask_desk:build``: the same proxy, built on ``store``."""
    return McpProxy(UPSTREAM, store=store, **POLICY)
