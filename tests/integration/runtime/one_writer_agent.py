"""The refund desk every writer of the one-writer tests builds (R20).

Run as a script, it is a second client process: ``python -m
tests.integration.runtime.one_writer_agent <store-url>`` reads one checkpoint's JSON
per line on stdin, resumes it (approved by ``eve@ops``) on its own store
connection, and prints one line per checkpoint: ``ok`` or the refusal's
``code reason``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from helmlog import Agent, HelmlogError, ToolMiddleware, allow, ask, tool
from helmlog.events import EventStore, open_event_store
from helmlog.runtime import check_in_approved
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest, scripted

ANSWER = "Refunded order 7."


@tool
def refund(order: int, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount:.2f} on order {order}"


def four_eyes(call: Any) -> Any:
    return ask("Refund over $500?", call.args) if call.args["amount"] > 500 else allow()


def desk_model(request: ProviderRequest) -> Reply:
    """Propose the refund after the user speaks; answer after the tool does."""
    if request.messages[-1].role == "user":
        call = ToolCallRequest(id="c1", name="refund", args={"order": 7, "amount": 900})
        return Reply(tool_calls=[call])
    return Reply(content=ANSWER)


def build(store: EventStore) -> Agent:
    """The same governed agent in every process and on every host."""
    return (
        Agent.create(provider=scripted(respond=desk_model), model="m", store=store)
        .tool(refund)
        .tool_middleware(ToolMiddleware(name="four-eyes", on_tool_call=four_eyes))
        .build()
    )


async def _serve(url: str) -> None:
    store = open_event_store(url)
    try:
        agent = build(store)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            try:
                out = await agent.resume(line.strip(), check_in_approved(by="eve@ops"))
                print("ok" if out == ANSWER else f"unexpected {out!r}", flush=True)
            except HelmlogError as exc:
                print(f"{exc.code} {getattr(exc, 'reason', '')}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1]))
