"""The Pydantic AI section of docs/integrations.md runs as written.

Pattern: tests/e2e/test_docs_examples.py's approach for one section: its
         ```python blocks run in order in one namespace, and what they print
         is the ```text block the section shows.
Role:    the migration page's Pydantic AI code, kept honest (issue 27 item 7).

Why one line is swapped: the page shows the model a reader names
(``"openai:gpt-5-mini"``, which needs a key and a network); the test puts
Pydantic AI's own ``FunctionModel`` in its place, scripted to propose the
refund the page's run approves. The swapped line must be on the page.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

PAGE = Path(__file__).resolve().parents[3] / "docs" / "integrations.md"
MODEL_LINE = 'model = "openai:gpt-5-mini"'
PYTHON = re.compile(r"```python\n(.*?)```", re.S)
TEXT = re.compile(r"```text\n(.*?)```", re.S)


def _section() -> str:
    text = PAGE.read_text()
    start = text.index("\n## Pydantic AI\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _model() -> FunctionModel:
    replies = [
        ModelResponse(
            parts=[
                ToolCallPart(
                    "refund", {"order_id": "7", "amount": 800}, tool_call_id="call-1"
                )
            ]
        ),
        ModelResponse(parts=[TextPart("Refunded order 7.")]),
    ]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return replies.pop(0)

    return FunctionModel(respond)


def test_the_pydantic_ai_section_runs_and_prints_what_it_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 27 item 7: the agent as written, the two governance lines, the ask
    and its approval through ``DeferredToolResults`` run; the output is the
    page's."""
    section = _section()
    blocks = PYTHON.findall(section)
    (expected,) = TEXT.findall(section)
    assert 3 == len(blocks)
    assert MODEL_LINE in blocks[0]
    namespace: dict[str, Any] = {"__name__": "docs_integrations_pydantic_ai"}
    for i, code in enumerate(blocks):
        if i == 0:
            code = code.replace(MODEL_LINE, "model = __docs_model__")
            namespace["__docs_model__"] = _model()
        exec(
            compile(code, f"docs/integrations.md (Pydantic AI {i + 1})", "exec"),
            namespace,
        )
    assert expected == capsys.readouterr().out
