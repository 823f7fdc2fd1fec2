"""S9 — structured content stays correct on the served side.

Pattern: a served ``customer`` tool that declares an output schema, called by
         the ``mcp`` 2.x ``Client`` (which validates structured content
         against the schema it listed) and FastMCP 4's ``Client``; after-tool
         rules that rewrite its result consistently, or break it.
Role:    unit tests for ``gateway/_structured.py`` and the result shaping of
         ``gateway/_serve.py``.
Emits:   nothing.

Laws: S9 (a result released under an advertised ``outputSchema`` is valid
for it; a rewrite that breaks it is refused with a recorded reason), S4,
S7 (``mcp_client`` tools carry the server's output schema), G43 (the
refusal names the path and the expectation, never the value).

Why real clients: the failure the issue reports is theirs (``Tool customer
has an output schema but did not return structured content``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastmcp import Client as FastMCPClient
from pydantic import BaseModel

from helmlog import Tool, ToolMiddleware, allow
from helmlog.gateway import mcp_client, mcp_serve

from .helpers import MODES, connected, rows

CUSTOMER = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
    "required": ["name", "email"],
}
SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}}}


class Customer(BaseModel):
    name: str
    email: str


def _lookup(id: int) -> Customer:
    return Customer(name="Ada", email="ada@example.com")


def customer(execute: Any = _lookup) -> Tool:
    return Tool(
        "customer", "Look a customer up.", SCHEMA, execute, output_schema=CUSTOMER
    )


def scrub(value: Any) -> ToolMiddleware:
    return ToolMiddleware(
        name="pii-scrub", on_tool_result=lambda r: allow(value(r.result), "scrubbed")
    )


@pytest.mark.parametrize("mode", MODES)
async def test_s9_a_model_result_is_valid_structured_content(mode: Any) -> None:
    """S9: the schema is listed; a model's fields are the structured content,
    its JSON the text block; the client's own schema check passes."""
    served = mcp_serve([customer()], name="crm")
    async with connected(served, mode) as c:
        listed = await c.list_tools()
        result = await c.call_tool("customer", {"id": 7})
    assert [CUSTOMER] == [t.output_schema for t in listed.tools]
    expected = {"name": "Ada", "email": "ada@example.com"}
    assert (expected, False) == (result.structured_content, result.is_error)
    assert [expected] == [json.loads(b.text) for b in result.content]  # type: ignore[union-attr]


async def test_s9_fastmcp_reads_the_structured_result() -> None:
    """S9: FastMCP 4's client (over Streamable HTTP) validates and parses the
    structured content against the schema it listed."""
    served = mcp_serve([customer()], name="crm")
    async with served.http_server() as url, FastMCPClient(url) as c:
        result = await c.call_tool("customer", {"id": 7})
    expected = {"name": "Ada", "email": "ada@example.com"}
    assert expected == result.structured_content
    assert ("Ada", "ada@example.com") == (result.data.name, result.data.email)


async def test_s9_a_consistent_rewrite_rewrites_the_structured_content() -> None:
    """S9: a transform sees the structured value and returns one; both blocks
    carry it."""
    masked = {"name": "Ada", "email": "[redacted]"}
    served = mcp_serve(
        [customer()],
        name="crm",
        tool_middleware=[scrub(lambda v: {**v.model_dump(), "email": "[redacted]"})],
    )
    async with connected(served) as c:
        result = await c.call_tool("customer", {"id": 7})
    assert (masked, False) == (result.structured_content, result.is_error)
    assert [masked] == [json.loads(b.text) for b in result.content]  # type: ignore[union-attr]


async def test_s9_a_rewrite_that_breaks_the_schema_is_refused_and_recorded() -> None:
    """S9, G43: the result is withheld with a reason naming the link, the path
    and the schema's expectation; the refusal is a row of the session."""
    served = mcp_serve(
        [customer()],
        name="crm",
        tool_middleware=[scrub(lambda v: {"name": "Ada", "email": None})],
    )
    async with connected(served) as c:
        result = await c.call_tool("customer", {"id": 7})
    reason = (
        "The result of tool 'customer' was withheld: as changed by middleware "
        "'pii-scrub', it does not match the tool's output schema (at email, "
        "schema keyword 'type' (\"string\"))."
    )
    assert (True, None) == (result.is_error, result.structured_content)
    assert [reason] == [b.text for b in result.content]  # type: ignore[union-attr]
    assert [("pii-scrub", "allow"), ("output-schema", "deny")] == [
        (r.middleware, r.outcome) for r in await rows(served)
    ]
    assert reason == (await rows(served))[-1].why


async def test_s9_text_is_not_structured_content() -> None:
    """S9: a rewrite to text under an object schema is refused, even as JSON text."""
    served = mcp_serve(
        [customer()],
        name="crm",
        tool_middleware=[scrub(lambda v: '{"name": "Ada", "email": "x"}')],
    )
    async with connected(served) as c:
        result = await c.call_tool("customer", {"id": 7})
    assert result.is_error
    assert "at the root, schema keyword 'type'" in result.content[0].text  # type: ignore[union-attr]


async def test_s9_the_tool_s_own_invalid_result_is_refused() -> None:
    """S9: a result the tool itself got wrong is withheld too (no link named)."""
    served = mcp_serve([customer(lambda id: {"name": "Ada"})], name="crm")
    async with connected(served) as c:
        result = await c.call_tool("customer", {"id": 7})
    assert [
        "The result of tool 'customer' was withheld: it does not match the tool's "
        "output schema (at the root, schema keyword 'required' "
        '(["name", "email"])).'
    ] == [b.text for b in result.content]  # type: ignore[union-attr]


async def test_s9_a_tool_error_carries_no_structured_content() -> None:
    """S9, S4: a raise is a tool error; the schema does not apply to it."""

    def broken(id: int) -> Any:
        raise RuntimeError("crm down")

    served = mcp_serve([customer(broken)], name="crm")
    async with connected(served) as c:
        result = await c.call_tool("customer", {"id": 7})
    assert (True, None) == (result.is_error, result.structured_content)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "array"},
            "Tool 'customer': output_schema must describe an object "
            '(``"type": "object"``), as MCP requires',
        ),
        (
            {"type": "object", "properties": {"a": {"type": "nope"}}},
            "Tool 'customer': output_schema is not a valid JSON schema",
        ),
    ],
)
def test_s9_a_bad_output_schema_is_refused_at_mcp_serve(
    schema: dict[str, Any], message: str
) -> None:
    """S9: a schema MCP cannot carry, or no schema at all, is a ``ValueError``."""
    bad = Tool("customer", "c", SCHEMA, _lookup, output_schema=schema)
    with pytest.raises(ValueError) as raised:
        mcp_serve([bad], name="crm")
    assert str(raised.value).startswith(message)


async def test_s7_mcp_client_tools_carry_the_server_s_output_schema() -> None:
    """S7, S9: a served tool's output schema reaches the client's ``Tool``."""
    async with mcp_client("crm", server=mcp_serve([customer()], name="crm")) as tools:
        assert [CUSTOMER] == [t.output_schema for t in tools]
