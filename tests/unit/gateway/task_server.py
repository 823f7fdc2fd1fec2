"""A governed MCP server whose refunds over 100 wait on a person (``python -m`` this).

Pattern: a script module: ``build(store)`` makes the served tools on a store
         (the ``--agent`` function ``helmlog approve`` takes), and ``-m``
         serves them on stdio over the store named by ``$HELMLOG_STORE``.
Role:    started by ``test_serve_tasks.py`` as a serving process that is
         stopped and started again; ``build`` is what a person's
         ``helmlog approve`` resumes the pause with.
Emits:   the serving sessions' streams, in that store.

Laws: S10 (an ask waits as a task; the pause is the store's, not the
process's), G62/G64 (approved walks on; declined refuses).

Why a module: the serving process, the deciding CLI and the test build the
same tools and rule from one place.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from helmlog import Tool, ToolMiddleware, allow, ask
from helmlog.events import EventStore, MemoryEventStore, open_event_store
from helmlog.gateway import mcp_serve
from helmlog.gateway._serve import ServedTools

REFUND_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer"}},
    "required": ["amount"],
}


def _refund(amount: int) -> str:
    return f"refunded {amount}"


def _four_eyes(call: Any) -> Any:
    if call.args.get("amount", 0) > 100:
        return ask(f"approve a refund of {call.args['amount']}?")
    return allow()


def build(store: EventStore) -> ServedTools:
    """The served refund desk on ``store`` (``--agent`` for ``helmlog approve``)."""
    return mcp_serve(
        [Tool("refund", "Refund an order.", REFUND_SCHEMA, _refund)],
        name="desk",
        tool_middleware=[ToolMiddleware(name="four-eyes", on_tool_call=_four_eyes)],
        store=store,
    )


#: The desk as an ``mcp_serve`` result (``--agent ...task_server:DESK``): a
#: command rebuilds it on the store it opens (``ServedTools.on_store``).
DESK = build(MemoryEventStore())


async def _main() -> None:
    store = open_event_store(os.environ["HELMLOG_STORE"])
    try:
        await build(store).serve_stdio()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(_main())
