"""The refund desk, as an agent ``helmlog serve`` can run with no model account.

Pattern: the demo's desk (``helmlog._demo._desk``: one rule at each moment)
         on a model chosen from the environment: an OpenAI-compatible
         endpoint when ``OPENAI_API_KEY`` or ``HELMLOG_OPENAI_BASE_URL`` is
         set (``HELMLOG_MODEL`` names the model), else ``desk_model``, a
         scripted model that reads "refund order N for $X" and proposes that
         refund, so the image's default command answers a first request.
Role:    the face; the Dockerfile's ``CMD`` and the manifests serve
         ``helmlog.examples.desk:desk``.

Why a rule-reading model and not a script: a served desk meets requests in
any order; a fixed script would run out on the second session.
"""

from __future__ import annotations

import os
import re

from helmlog import Agent
from helmlog.events import EventStore
from helmlog.runtime.providers import (
    Provider,
    ProviderRequest,
    Reply,
    ToolCallRequest,
    openai_chat,
    scripted,
)

from .._demo._desk import build_agent

REFUND = re.compile(
    r"refund\s+order\s+#?(?P<order>\d+)\s+for\s+\$?(?P<amount>[\d,]+(?:\.\d+)?)",
    re.IGNORECASE,
)


def desk_reply(request: ProviderRequest) -> Reply | str:
    """The scripted desk's answer: refund what the last user message asks for,
    then report the tool's message (a refusal reads as one too)."""
    last = request.messages[-1] if request.messages else None
    if last is not None and last.role == "tool":
        return last.content
    asked = next(
        (m.content for m in reversed(request.messages) if m.role == "user"), ""
    )
    found = REFUND.search(asked)
    if found is None:
        return 'I handle refunds: ask me to "refund order 7 for $250".'
    args = {
        "order": int(found["order"]),
        "amount": float(found["amount"].replace(",", "")),
    }
    call_id = f"refund-{len(request.messages)}"
    return Reply(tool_calls=[ToolCallRequest(id=call_id, name="refund", args=args)])


def desk_model() -> Provider:
    """The model the desk runs on: the configured endpoint, else the script."""
    base_url = os.environ.get("HELMLOG_OPENAI_BASE_URL")
    if base_url or os.environ.get("OPENAI_API_KEY"):
        return openai_chat(os.environ.get("HELMLOG_MODEL"), base_url=base_url)
    return scripted(respond=desk_reply)


def desk(store: EventStore) -> Agent:
    """``--agent helmlog.examples.desk:desk``: the refund desk on ``store``."""
    return build_agent(store, desk_model())
