"""Chains and agents for the PolicyActor tests, importable by Ray workers."""

from __future__ import annotations

from typing import Any

from helmlog import Agent, Tool, ToolMiddleware, allow, deny, tool
from helmlog.events import EventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted


class Desk:
    """The state two links share: how many refunds the desk has granted."""

    def __init__(self, quota: int) -> None:
        self.quota = quota
        self.granted = 0


class Quota:
    """Before-tool: grants refunds while the shared quota lasts."""

    name = "refund-quota"

    def __init__(self, desk: Desk) -> None:
        self.desk = desk

    def on_tool_call(self, call: Any) -> Any:
        if self.desk.granted >= self.desk.quota:
            return deny(f"the desk's quota of {self.desk.quota} refunds is spent")
        self.desk.granted += 1
        return allow(None, f"refund {self.desk.granted} of {self.desk.quota}")


class Receipt:
    """After-tool: stamps each result with the count the quota link keeps."""

    name = "receipt"

    def __init__(self, desk: Desk) -> None:
        self.desk = desk

    async def on_tool_result(self, result: Any) -> Any:
        stamped = f"{result.result} (desk refund #{self.desk.granted})"
        return allow(stamped, "stamped the desk's refund count")


def desk_chain() -> list[Any]:
    """Two links sharing one ``Desk`` (runs inside the PolicyActor)."""
    desk = Desk(quota=3)
    return [Quota(desk), Receipt(desk)]


class RateServiceDown(RuntimeError):
    """What a rule's dependency raises."""


def _raises(call: Any) -> Any:
    raise RateServiceDown("the rate service is down")


def _returns_text(call: Any) -> Any:
    return "yes, go ahead"


def raising_chain() -> Any:
    """One link that raises in its hook (G7)."""
    return ToolMiddleware(name="rate-check", on_tool_call=_raises)


def non_outcome_chain() -> Any:
    """One link whose hook returns a str, not an outcome (G6)."""
    return ToolMiddleware(name="sloppy-rule", on_tool_call=_returns_text)


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded order {order}"


@tool
def broken_refund(order: int) -> str:
    """A refund whose backend fails."""
    raise ConnectionError(f"the payments backend refused order {order}")


def one_refund_agent(
    store: EventStore, *, tools: list[Tool], links: list[Any], tool_name: str
) -> Agent:
    """One refund call per session, then an answer; links attached in order."""
    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name=tool_name, args={"order": 7})]
            ),
            "Done.",
        ]
    )
    return (
        Agent.create(provider=model, model="m", store=store)
        .tool(*tools)
        .tool_middleware(*links)
        .build()
    )
