"""The scripted provider: replies written in advance, for demos and tests.

Pattern: a test double that is also a real adapter (the embedded default).
Role:    runtime layer; ``helmlog demo`` and most tests drive the loop with it.
Emits:   nothing itself; with ``stream=True`` it reports word chunks.

Laws: G90 (one reply per call in order, a ``str`` is ``Reply(content=...)``,
a ``dict`` is ``Reply(output=...)``, a structured answer as JSON, G92,
``RuntimeError`` containing ``exhausted`` when none is left; ``reply=`` repeats
one; ``respond=`` computes each; ``stream=True`` gives word chunks, a word
plus the whitespace after it), G89 (``requests`` holds deep copies).

Why deep copies: a test asserts what the model was sent at the time; a later
mutation anywhere must not rewrite that evidence.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from helmlog.events import Message

from .._context import clone
from ._base import OutputSchema, ProviderRequest, Reply, TokenSink, ToolSpec

ReplyLike = Reply | str | Mapping[str, Any]
Responder = Callable[[ProviderRequest], ReplyLike | Awaitable[ReplyLike]]

_WORD = re.compile(r"\S+\s*|\s+")


def _as_reply(value: object) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(content=value)
    if isinstance(value, Mapping):
        return Reply(output=dict(value))
    raise TypeError(
        "a scripted reply must be a Reply, a str or a dict (a structured answer), "
        f"got {type(value).__name__}"
    )


def _copy_message(m: Message) -> Message:
    if not m.tool_calls:
        return m  # frozen all the way down: sharing it is copying it
    calls = tuple(
        type(c)(id=c.id, name=c.name, args=clone(c.args)) for c in m.tool_calls
    )
    return Message(
        role=m.role,
        content=m.content,
        tool_calls=calls,
        tool_call_id=m.tool_call_id,
        tool_name=m.tool_name,
    )


def copy_request(request: ProviderRequest) -> ProviderRequest:
    """A deep copy of a request: every mutable part (arguments, schemas) cloned.

    Messages are frozen; only a tool call's ``args`` and a tool's schema can
    be mutated, so only those are copied — several times cheaper than
    ``copy.deepcopy`` of the whole request on every model call.
    """
    output = request.output
    return dataclasses.replace(
        request,
        messages=tuple(_copy_message(m) for m in request.messages),
        tools=tuple(
            ToolSpec(t.name, t.description, clone(dict(t.input_schema)))
            for t in request.tools
        ),
        output=None
        if output is None
        else OutputSchema(output.name, clone(dict(output.schema)), output.description),
    )


def word_chunks(text: str) -> list[str]:
    """Split text into chunks of a word plus the whitespace after it."""
    return _WORD.findall(text)


class ScriptedProvider:
    """Replies from a script, a single repeated reply, or a function."""

    provider_name = "helmlog.scripted"  # no vendor: a custom value (semconv)

    def __init__(
        self,
        replies: Iterable[ReplyLike] | None = None,
        *,
        reply: ReplyLike | None = None,
        respond: Responder | None = None,
        stream: bool = False,
    ) -> None:
        given = sum(x is not None for x in (replies, reply, respond))
        if given != 1:
            raise ValueError(
                "scripted() takes exactly one of: replies, reply=, respond="
            )
        self._script = [_as_reply(r) for r in replies] if replies is not None else None
        self._reply = _as_reply(reply) if reply is not None else None
        self._respond = respond
        self.stream = stream
        self.requests: list[ProviderRequest] = []
        self._next = 0

    @property
    def remaining(self) -> int | None:
        """Replies left in the script (``None`` for ``reply=``/``respond=``)."""
        return None if self._script is None else len(self._script) - self._next

    async def call(
        self, request: ProviderRequest, on_token: TokenSink | None = None
    ) -> Reply:
        self.requests.append(copy_request(request))
        if self._script is not None:
            if self._next >= len(self._script):
                raise RuntimeError(
                    f"scripted provider exhausted: all {len(self._script)} replies "
                    f"were used and call {self._next + 1} asked for another"
                )
            out = self._script[self._next]
            self._next += 1
        elif self._reply is not None:
            out = self._reply
        else:
            assert self._respond is not None
            produced = self._respond(copy_request(request))
            if inspect.isawaitable(produced):
                produced = await produced
            out = _as_reply(produced)
        if self.stream and on_token is not None and out.content:
            for chunk in word_chunks(out.content):
                on_token(chunk)
        return out


def scripted(
    replies: Iterable[ReplyLike] | None = None,
    *,
    reply: ReplyLike | None = None,
    respond: Responder | None = None,
    stream: bool = False,
) -> ScriptedProvider:
    """A provider that answers from a script (see ``ScriptedProvider``)."""
    return ScriptedProvider(replies, reply=reply, respond=respond, stream=stream)
