"""A FastMCP 4 server whose tools return pydantic models, for the proxy's tests.

Pattern: a script module: one FastMCP 4 server (``fastmcp``, on the SDK's v2
         line) with a ``customer`` tool returning a model (so it declares an
         ``outputSchema`` and answers ``structuredContent``) and a plain one.
Role:    the upstream of ``test_proxy_structured.py`` as a stdio subprocess
         (``python -m`` this) or on Streamable HTTP (``--http PORT``); the
         ``POLICY`` the CLI loads in ``test_proxy_clients.py``.
Emits:   nothing.

Laws: none itself; P27 and S9 are tested against it (issue 26 items 3, 5).

Why FastMCP 4: the reported failure ("Tool customer has an output schema but
did not return structured content") was a FastMCP tool behind the proxy.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from fastmcp import FastMCP
from pydantic import BaseModel

from helmlog import ToolMiddleware, allow

SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")

server = FastMCP("customers")


class Customer(BaseModel):
    """A customer record; ``ssn`` is what a governance link scrubs."""

    name: str
    ssn: str
    tier: str


@server.tool
def customer(name: str) -> Customer:
    """A customer's record (it holds an SSN)."""
    return Customer(name=name, ssn="123-45-6789", tier="gold")


@server.tool
def greet(name: str) -> str:
    """A greeting (a wrapped primitive)."""
    return f"hello {name}, ssn 123-45-6789"


def scrub(value: Any) -> Any:
    """The PII scrub: an SSN masked in every string of the value."""
    if isinstance(value, str):
        return SSN.sub("***-**-****", value)
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def _scrubbed(result: Any) -> Any:
    value = scrub(result.result)
    return allow() if value == result.result else allow(value, "an SSN masked")


def _as_text(result: Any) -> Any:
    return allow(f"record: {scrub(str(result.result))}", "rendered as text")


#: Sees the structured value (a dict for ``customer``) and returns the new one.
SCRUB = ToolMiddleware(name="pii-scrub", on_tool_result=_scrubbed)
#: Turns any result into text: for ``customer`` that breaks its schema.
AS_TEXT = ToolMiddleware(name="as-text", on_tool_result=_as_text)

#: What ``helmlog mcp-proxy --policy tests.unit.gateway.fastmcp_upstream:POLICY``
#: loads: the structured-aware PII scrub as governance.
POLICY: dict[str, Any] = {"governance": [SCRUB]}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run(
            transport="http", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False
        )
    else:
        server.run(show_banner=False)
