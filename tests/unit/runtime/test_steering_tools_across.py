"""``Tool.from_langchain`` and its kin: the lazy hook to each integration.

Pattern: each classmethod on the real framework's own tool type; a fresh
         interpreter shows that importing the runtime imports no framework
         and no integration (the hook imports by name, when first asked).
Role:    unit tests for ``runtime/_tools.py``'s bridge to
         ``helmlog.integrations.<framework>.tool_from``.
Emits:   nothing.

Laws: issue 27 item 4 (tools across, name and description kept), the layer
rule (``runtime`` names nothing above it; a framework is an optional extra).
"""

from __future__ import annotations

import subprocess
import sys

from helmlog import Tool


def lookup_order(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}"


def test_from_langchain_keeps_name_and_description() -> None:
    """Issue 27 item 4: a LangChain ``@tool`` becomes a helmlog ``Tool``."""
    from langchain_core.tools import tool as lc_tool

    made = Tool.from_langchain(lc_tool(lookup_order))
    assert ("lookup_order", "Look an order up.") == (made.name, made.description)
    assert "order_id" in made.input_schema["properties"]


def test_from_openai_agents_keeps_name_and_description() -> None:
    """Issue 27 item 4: an Agents SDK ``function_tool`` becomes a ``Tool``."""
    from agents import function_tool

    made = Tool.from_openai_agents(function_tool(lookup_order))
    assert ("lookup_order", "Look an order up.") == (made.name, made.description)
    assert "order_id" in made.input_schema["properties"]


def test_from_pydantic_ai_keeps_name_and_description() -> None:
    """Issue 27 item 4: a Pydantic AI ``Tool`` becomes a helmlog ``Tool``."""
    from pydantic_ai import Tool as PydanticTool

    made = Tool.from_pydantic_ai(PydanticTool(lookup_order))
    assert ("lookup_order", "Look an order up.") == (made.name, made.description)
    assert "order_id" in made.input_schema["properties"]


def test_importing_the_runtime_imports_no_framework() -> None:
    """Layers: the hook imports the integration by name, when first asked."""
    code = (
        "import sys, helmlog.runtime, helmlog.runtime.lowlevel; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langchain', 'langchain_core', 'agents', 'pydantic_ai') "
        "or m.startswith('helmlog.integrations')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "[]" == done.stdout.strip()
