"""The LangChain section of docs/integrations.md runs as written.

Pattern: tests/e2e/test_docs_examples.py's approach for one section: its
         ```python blocks run in order in one namespace, and what they print
         is the ```text block the section shows.
Role:    the migration page's LangChain code, kept honest (issue 27 item 7).

Why one line is swapped: the page shows the model a reader writes
(``init_chat_model("openai:...")``, which needs a key and a network); the
test puts LangChain's own fake chat model in its place, scripted to propose
the refund the page's run approves. The swapped line must be on the page.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
)
from langchain_core.messages import AIMessage

PAGE = Path(__file__).resolve().parents[3] / "docs" / "integrations.md"
MODEL_LINE = 'model = init_chat_model("openai:gpt-5-mini")'
PYTHON = re.compile(r"```python\n(.*?)```", re.S)
TEXT = re.compile(r"```text\n(.*?)```", re.S)


class DocsChat(FakeMessagesListChatModel):
    """LangChain's list-of-replies fake model, with a no-op tool binding."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> DocsChat:
        return self


def _section() -> str:
    text = PAGE.read_text()
    start = text.index("\n## LangChain\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_langchain_section_runs_and_prints_what_it_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 27 item 7: the agent as written, the governance lines, the ask and
    its approval through ``Command(resume=...)`` run; the output is the page's."""
    section = _section()
    blocks = PYTHON.findall(section)
    (expected,) = TEXT.findall(section)
    assert 3 == len(blocks)
    assert MODEL_LINE in blocks[0]
    model = DocsChat(
        responses=[
            AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": "refund",
                        "args": {"order_id": "7", "amount": 800},
                        "id": "call-1",
                    }
                ],
            ),
            AIMessage(content="Refunded order 7."),
        ]
    )
    namespace: dict[str, Any] = {"__name__": "docs_integrations_langchain"}
    for i, code in enumerate(blocks):
        if i == 0:
            code = code.replace(MODEL_LINE, "model = __docs_model__")
            namespace["__docs_model__"] = model
        exec(
            compile(code, f"docs/integrations.md (LangChain {i + 1})", "exec"),
            namespace,
        )
    assert expected == capsys.readouterr().out
