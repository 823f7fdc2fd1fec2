"""S7, S8 — the MCP client: provenance on the tools, remote errors as raised tools.

Pattern: law-named unit tests that connect ``mcp_client`` in memory to an
         ``mcp_serve`` result, then drive whole agent runs (scripted provider)
         over the tools it returned.
Role:    unit tests for ``gateway/_client.py`` and, end to end, for an agent
         calling a served tool.
Emits:   nothing.

Laws: S7 (name, description and input schema are the server's; ``source`` is
the client's name), S8 (a server's tool error and a transport failure reach
the after-tool walk as a raised tool, with the exact texts), G78 (one agent-side
rule tells two servers' same-named tools apart by ``tool_source``), S1/S6 (the
served side governs and records the agent's call too).

Why two agents for G78: an agent registers one tool per name, so the two
servers' ``call_aws`` are each given to an agent built with the same rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helmlog import Agent, Tool, ToolMiddleware, allow, deny, tool
from helmlog.events import MemoryEventStore, Message, StoredEvent
from helmlog.gateway import mcp_client, mcp_serve
from helmlog.runtime.providers import Reply, ScriptedProvider, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

from .helpers import rows


@tool
def call_aws(command: str) -> str:
    """Run an AWS CLI command."""
    return f"ran {command}"


def one_call(name: str, **args: Any) -> ScriptedProvider:
    return scripted(
        [Reply(tool_calls=[ToolCallRequest(id="c1", name=name, args=args)]), "Done."]
    )


def tool_message(model: ScriptedProvider) -> Message:
    """The tool message the model read in its second request."""
    return model.requests[1].messages[-1]


def result_spy(seen: list[tuple[Any, bool]]) -> ToolMiddleware:
    def on_result(r: Any) -> Any:
        seen.append((r.result, r.error))
        return allow()

    return ToolMiddleware(name="spy", on_tool_result=on_result)


def agent_with(model: ScriptedProvider, t: Tool, *links: Any) -> Agent:
    return (
        Agent.create(provider=model, model="m", ids=counter_ids())
        .tool(t)
        .tool_middleware(*links)
        .build()
    )


# -- S7 ---------------------------------------------------------------------


async def test_s7_tools_carry_the_server_s_surface_and_the_client_s_name() -> None:
    """S7: name, description, input_schema from the server; ``source`` = client name."""
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    }
    search = Tool("search", "Search the docs.", schema, lambda q: q, "elsewhere")
    served = mcp_serve([search, call_aws], name="docs")
    async with mcp_client("docs-client", server=served) as tools:
        assert [
            ("search", "Search the docs.", schema, "docs-client"),
            (
                "call_aws",
                "Run an AWS CLI command.",
                dict(call_aws.input_schema),
                "docs-client",
            ),
        ] == [(t.name, t.description, t.input_schema, t.source) for t in tools]


async def test_s7_calling_a_client_tool_calls_the_remote_tool() -> None:
    """S7: ``execute`` sends the arguments and returns what the server sent back."""
    served = mcp_serve([call_aws], name="aws")
    async with mcp_client("aws", server=served) as tools:
        assert "ran s3 ls" == await tools[0].execute(command="s3 ls")


async def test_s7_the_default_client_name_is_mcp() -> None:
    """S7: ``mcp_client()`` names its tools' source ``"mcp"``."""
    async with mcp_client(server=mcp_serve([call_aws], name="aws")) as tools:
        assert ["mcp"] == [t.source for t in tools]


# -- S8 ---------------------------------------------------------------------


async def test_s8_a_server_s_tool_error_is_a_raised_tool_for_the_agent() -> None:
    """S8: the after-tool walk sees ``error=True`` and the exact text."""

    @tool
    def flaky() -> str:
        """Fail."""
        raise RuntimeError("throttled")

    seen: list[tuple[Any, bool]] = []
    served = mcp_serve([flaky], name="aws")
    model = one_call("flaky")
    async with mcp_client("aws-prod", server=served) as tools:
        out = await agent_with(model, tools[0], result_spy(seen)).run("go")
    expected = "MCP tool 'flaky' (server 'aws-prod') returned an error: throttled"
    assert "Done." == out
    assert [(expected, True)] == seen
    assert expected == tool_message(model).content


class FailingStore(MemoryEventStore):
    """A store whose every append fails."""

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        raise OSError("disk full")


async def test_s8_a_transport_failure_reads_failed_with_its_message() -> None:
    """S8: an MCP error (the server's ledger refusing) reads ``failed: <message>``."""
    audit = ToolMiddleware(name="audit", on_tool_call=lambda c: allow())
    served = mcp_serve(
        [call_aws], name="aws", tool_middleware=[audit], store=FailingStore()
    )
    seen: list[tuple[Any, bool]] = []
    model = one_call("call_aws", command="s3 ls")
    async with mcp_client("aws-prod", server=served) as tools:
        await agent_with(model, tools[0], result_spy(seen)).run("go")
    sid = served.session_ids[0]
    message = (
        "the serving ledger could not record this call: could not append to "
        f"session '{sid}' in memory://: disk full; the append is not in the "
        "stream and the action was not taken — retry"
    )
    expected = f"MCP tool 'call_aws' (server 'aws-prod') failed: {message}"
    assert [(expected, True)] == seen


async def test_s8_a_closed_client_s_tool_fails_with_the_failed_text() -> None:
    """S8: after ``close()`` a call reads ``failed:`` rather than hanging or passing."""
    client = mcp_client("aws", server=mcp_serve([call_aws], name="aws"))
    tools = await client.connect()
    await client.close()
    seen: list[tuple[Any, bool]] = []
    model = one_call("call_aws", command="s3 ls")
    await agent_with(model, tools[0], result_spy(seen)).run("go")
    assert [
        (
            "MCP tool 'call_aws' (server 'aws') failed: the client is not connected",
            True,
        )
    ] == seen


# -- end to end: G78 over MCP -------------------------------------------------


async def test_g78_an_agent_rule_tells_two_servers_same_named_tools_apart() -> None:
    """G78, S7: one rule on ``tool_source`` denies prod's ``call_aws``, not dev's;
    the served side walks and records its own chain for the call that went through."""
    prod = mcp_serve([call_aws], name="aws-prod")
    served_audit = ToolMiddleware(name="served-audit", on_tool_call=lambda c: allow())
    dev = mcp_serve([call_aws], name="aws-dev", tool_middleware=[served_audit])

    def prod_needs_a_ticket(c: Any) -> Any:
        if c.tool_source == "aws-prod":
            return deny("production AWS calls need a change ticket")
        return allow()

    rule = ToolMiddleware(name="prod-needs-a-ticket", on_tool_call=prod_needs_a_ticket)
    prod_model = one_call("call_aws", command="s3 rm")
    dev_model = one_call("call_aws", command="s3 rm")
    async with (
        mcp_client("aws-prod", server=prod) as prod_tools,
        mcp_client("aws-dev", server=dev) as dev_tools,
    ):
        assert ["call_aws"] == [t.name for t in prod_tools]
        assert ["call_aws"] == [t.name for t in dev_tools]
        assert "Done." == await agent_with(prod_model, prod_tools[0], rule).run("rm")
        assert "Done." == await agent_with(dev_model, dev_tools[0], rule).run("rm")
    assert "production AWS calls need a change ticket" == (
        tool_message(prod_model).content
    )
    assert "ran s3 rm" == tool_message(dev_model).content
    assert [] == prod.session_ids
    assert [("served-audit", "before-tool", "mcp-aws-dev-1")] == [
        (r.middleware, r.moment, r.tool_call_id) for r in await rows(dev)
    ]
