"""The OpenAI Agents SDK section of docs/integrations.md runs as written.

Pattern: tests/e2e/test_docs_examples.py's approach for one section: its
         ```python blocks run in order in one namespace, and what they print
         is the ```text block the section shows.
Role:    the migration page's Agents SDK code, kept honest (issue 27 item 7).

Why one argument is swapped: the page shows the model a reader names
(``model="gpt-5-mini"``, which needs a key and a network); the test puts the
SDK's own scripted test model (``agents.testing.ScriptedModel``) in its
place, proposing the refund the page's run approves. The swapped text must
be on the page.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from agents import set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

PAGE = Path(__file__).resolve().parents[3] / "docs" / "integrations.md"
MODEL_ARG = 'model="gpt-5-mini",'
PYTHON = re.compile(r"```python\n(.*?)```", re.S)
TEXT = re.compile(r"```text\n(.*?)```", re.S)


def _section() -> str:
    text = PAGE.read_text()
    start = text.index("\n## OpenAI Agents SDK\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_openai_agents_section_runs_and_prints_what_it_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 27 item 7: the agent as written, the governance lines, the ask as
    the SDK's interruption and its approval through ``RunState`` run; the
    output is the page's, and the scripted model was used up."""
    set_tracing_disabled(True)
    section = _section()
    blocks = PYTHON.findall(section)
    (expected,) = TEXT.findall(section)
    assert 3 == len(blocks)
    assert MODEL_ARG in blocks[0]
    model = ScriptedModel(
        [
            [function_call("refund", {"order_id": "7", "amount": 800}, call_id="c1")],
            [assistant_message("Refunded order 7.")],
        ]
    )
    namespace: dict[str, Any] = {
        "__name__": "docs_integrations_openai_agents",
        "__docs_model__": model,
    }
    for i, code in enumerate(blocks):
        if i == 0:
            code = code.replace(MODEL_ARG, "model=__docs_model__,")
        where = f"docs/integrations.md (OpenAI Agents SDK {i + 1})"
        exec(compile(code, where, "exec"), namespace)
    assert expected == capsys.readouterr().out
    model.assert_complete()
