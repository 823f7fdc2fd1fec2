"""Agents and rules for the cluster tests, importable by Ray workers."""

from __future__ import annotations

from typing import Any

from helmlog import Agent, Tool, ToolMiddleware, allow, ask, ask_human, deny, tool
from helmlog.events import EventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted


class RefundBudget:
    """A rule with state: three refunds in all, across every session."""

    name = "refund-budget"

    def __init__(self) -> None:
        self.left = 3

    def on_tool_call(self, call: Any) -> Any:
        if self.left == 0:
            return deny("the refund budget is spent")
        self.left -= 1
        return allow(None, f"{self.left} refunds left in the budget")


def budget() -> RefundBudget:
    """The policy factory (runs inside the PolicyActor)."""
    return RefundBudget()


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded order {order}"


@tool
def pick_card(order: int) -> str:
    """Ask the customer which card to refund to."""
    ask_human("Which card should the refund go to?", {"order": order})


def refund_agent(store: EventStore, *, tools: list[Tool], links: list[Any]) -> Agent:
    """One refund per session, on whatever tools and links it is handed."""
    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="refund", args={"order": 7})]
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


def card_agent(store: EventStore, *, tools: list[Tool]) -> Agent:
    """A session whose tool asks a person (ask_human)."""
    model = scripted(
        [
            Reply(
                tool_calls=[
                    ToolCallRequest(id="c1", name="pick_card", args={"order": 7})
                ]
            ),
            "Refunded to the card you chose.",
        ]
    )
    passthrough = ToolMiddleware(name="audit", on_tool_result=lambda r: allow())
    return (
        Agent.create(provider=model, model="m", store=store)
        .tool(*tools)
        .tool_middleware(passthrough)
        .build()
    )


@tool
async def slow_refund(order: int) -> str:
    """A refund whose host will die while it runs."""
    import asyncio

    await asyncio.sleep(600)  # not a wait: a tool that hangs until its host dies
    return f"refunded order {order}"


def slow_agent(store: EventStore) -> Agent:
    """Calls ``slow_refund`` once; answers once any tool message is in view.

    The model's reply depends only on what it is sent, so the host that takes
    the session over (built by this same factory) continues it correctly.
    """

    def respond(request: Any) -> Reply | str:
        if any(m.role == "tool" for m in request.messages):
            return "I could not confirm the refund."
        call = ToolCallRequest(id="c1", name="slow_refund", args={"order": 7})
        return Reply(tool_calls=[call])

    model = scripted(respond=respond)
    return (
        Agent.create(provider=model, model="m", store=store).tool(slow_refund).build()
    )


def desk_agent(store: EventStore) -> Agent:
    """Echoes a message; a message that starts with "refund" calls the slow
    refund (its host will die), and a tool result in view ends the turn.

    Stateless like ``slow_agent``: a host that re-activates a session (after
    eviction or a restart) continues it correctly.
    """

    def respond(request: Any) -> Reply | str:
        if request.messages[-1].role == "tool":
            return "I could not confirm the refund."
        said = [m.content for m in request.messages if m.role == "user"][-1]
        if said.startswith("refund"):
            call = ToolCallRequest(id="c1", name="slow_refund", args={"order": 7})
            return Reply(tool_calls=[call])
        return f"echo: {said}"

    model = scripted(respond=respond)
    return (
        Agent.create(provider=model, model="m", store=store).tool(slow_refund).build()
    )


def second_person(call: Any) -> Any:
    """Every refund waits for a second person."""
    return ask(f"Refund order {call.args['order']}?", detail={"order": 7})


def asking_agent(store: EventStore) -> Agent:
    """Calls ``refund`` once, which pauses for a second person (an ask)."""

    def respond(request: Any) -> Reply | str:
        if request.messages[-1].role == "tool":
            return "Refunded."
        call = ToolCallRequest(id="c1", name="refund", args={"order": 7})
        return Reply(tool_calls=[call])

    gate = ToolMiddleware(name="four-eyes", on_tool_call=second_person)
    return (
        Agent.create(provider=scripted(respond=respond), model="m", store=store)
        .tool(refund)
        .tool_middleware(gate)
        .build()
    )


def off_store_agent(store: EventStore) -> Agent:
    """Builds its agent on a store of its own: a factory the hosts refuse."""
    from helmlog.events import MemoryEventStore

    return Agent.create(
        provider=scripted(["never"]), model="m", store=MemoryEventStore()
    ).build()


@tool
def whose_call() -> str:
    """Say which call this run of the tool is (the pipeline's running call id)."""
    from helmlog.runtime.lowlevel import running_tool

    return f"call {running_tool().get()}"


def call_id_agent(store: EventStore, *, tools: list[Tool]) -> Agent:
    """A session that runs ``whose_call`` once, as call ``c-42``."""
    model = scripted(
        [
            Reply(tool_calls=[ToolCallRequest(id="c-42", name="whose_call", args={})]),
            "Done.",
        ]
    )
    return Agent.create(provider=model, model="m", store=store).tool(*tools).build()


def refuse_blocked_input(message: Any) -> Any:
    """An input rule: the word ``blocked`` is refused."""
    return deny("blocked input") if "blocked" in message.content else allow()


def gated_agent(store: EventStore) -> Agent:
    """A chatty session whose input chain refuses ``blocked``."""
    from helmlog import MessageMiddleware

    model = scripted(["one", "two", "three", "four"])
    gate = MessageMiddleware(name="gate", on_message=refuse_blocked_input)
    return (
        Agent.create(provider=model, model="m", store=store)
        .message_middleware(gate)
        .build()
    )
