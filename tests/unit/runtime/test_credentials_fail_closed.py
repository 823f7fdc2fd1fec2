"""G57 fails closed: a credential resolver that raises refuses the call, not the run."""

from __future__ import annotations

import logging

import pytest

from helmlog import Agent, tool
from helmlog.events import ToolCallRequest
from helmlog.runtime.providers import Reply, scripted


async def test_g57_a_raising_resolver_refuses_the_call_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """G57: the tool is not run, the model reads the refusal, the run answers."""
    ran: list[str] = []

    @tool(credentials=("STRIPE_KEY",))
    def charge(order: int, credentials: dict[str, str]) -> str:
        """Charge an order."""
        ran.append(credentials["STRIPE_KEY"])
        return "charged"

    def resolver(name: str) -> str:
        raise RuntimeError("vault unreachable")

    model = scripted(
        [
            Reply(
                tool_calls=[ToolCallRequest(id="c1", name="charge", args={"order": 7})]
            ),
            "ok",
        ]
    )
    agent = (
        Agent.create(provider=model, model="m", credentials=resolver)
        .tool(charge)
        .build()
    )
    with caplog.at_level(logging.WARNING, logger="helmlog"):
        assert "ok" == await agent.run("charge it")
    assert [] == ran
    expected = (
        "Tool 'charge' was not executed: "
        "its credential 'STRIPE_KEY' could not be resolved."
    )
    assert expected == model.requests[1].messages[-1].content
    assert "vault unreachable" not in model.requests[1].messages[-1].content
    assert any("STRIPE_KEY" in r.getMessage() for r in caplog.records)
