"""What happens inside a turn: its bounds, model calls, tool calls, messages, window.

Pattern: frozen, tagged msgspec Structs on the shared envelope, one per fact
         the loop records.
Role:    events layer; the loop appends these, ``fold`` reads them, sinks
         project them (an ``OtelSink`` span per turn, model and tool call).
Emits:   nothing; these are the emissions.

Laws: R13, R12 (``stream.token`` is never appended), R7 (``tool.dispatched``
right before execution; ``tool.outcome_unknown``), G80/G81, G91, G92
(``output.rejected``), issue 8 item 8 (trace context), R10.

Why one family: their order inside a turn is what the fold, recovery and
the sinks read; the union that decodes them is ``events/_types.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from ._envelope import Event
from ._messages import Message


class TurnStarted(Event, tag="agent.turn_start", frozen=True):
    """A turn began; ``base_seq`` is the seq of the checkpoint it continues.

    ``traceparent``/``tracestate`` are the turn's W3C trace context (the
    caller's, else one the runtime minted); empty in older streams.
    ``trace_minted`` says the runtime minted it: its parent id names the
    turn's own span, which no caller emits (a sink makes it the root).
    ``provider`` is the model provider's name (``gen_ai.provider.name``:
    ``openai``, ``anthropic``, ...); ``""`` when it names none, and in
    older streams.
    """

    type: ClassVar[str] = "agent.turn_start"
    turn: int
    base_seq: int = 0
    identity: Any = None
    traceparent: str = ""
    tracestate: str = ""
    trace_minted: bool = False
    provider: str = ""


class TurnEnded(Event, tag="agent.turn_end", frozen=True):
    """A turn finished with an accepted answer."""

    type: ClassVar[str] = "agent.turn_end"
    turn: int
    final_content: str


class LlmStarted(Event, tag="stream.llm_start", frozen=True):
    """A model call began; ``provider`` as on ``agent.turn_start``.

    ``output_type`` is ``"json"`` when the request asks for a structured
    answer (G92), ``""`` otherwise; ``stream`` whether the provider streams
    its answer to the run (never while drafts are held: G41 keeps that
    record the same either way), for ``gen_ai.output.type`` /
    ``gen_ai.request.stream``.
    """

    type: ClassVar[str] = "stream.llm_start"
    iteration: int
    model: str
    provider: str = ""
    output_type: str = ""
    stream: bool = False


class LlmEnded(Event, tag="stream.llm_end", frozen=True):
    """A model call returned; ``content`` is ``""`` while drafts are held.

    ``model`` is the model that answered, as the provider reported it (issue
    12 item 5); ``""`` when it could not tell, and in older streams, where
    ``stream.llm_start.model`` (the model asked for) is all there is.
    """

    type: ClassVar[str] = "stream.llm_end"
    iteration: int
    content: str
    content_withheld: bool = False
    tool_call_count: int = 0
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    stop_reason: str | None = None
    duration_ms: int = 0
    model: str = ""


class StreamToken(Event, tag="stream.token", frozen=True):
    """A chunk of text for listeners; transient, never appended (R12)."""

    type: ClassVar[str] = "stream.token"
    content: str


class ToolStarted(Event, tag="stream.tool_start", frozen=True):
    """A proposed call entered the pipeline, with the arguments as proposed."""

    type: ClassVar[str] = "stream.tool_start"
    tool_name: str
    tool_call_id: str
    iteration: int
    args: Any = None


class ToolEnded(Event, tag="stream.tool_end", frozen=True):
    """A call left the pipeline: what the tool really returned, or the refusal."""

    type: ClassVar[str] = "stream.tool_end"
    tool_name: str
    tool_call_id: str
    result: Any = None
    error: bool = False
    duration_ms: int = 0


class ToolDispatched(Event, tag="tool.dispatched", frozen=True):
    """Recorded immediately before ``execute`` (R7)."""

    type: ClassVar[str] = "tool.dispatched"
    tool_name: str
    tool_call_id: str
    args: Any = None
    attempt: int = 1


class ToolOutcomeUnknown(Event, tag="tool.outcome_unknown", frozen=True):
    """A dispatched call whose result was never recorded (R7)."""

    type: ClassVar[str] = "tool.outcome_unknown"
    tool_name: str
    tool_call_id: str
    traceparent: str = ""
    tracestate: str = ""


class FatalError(Event, tag="error.fatal", frozen=True):
    """A run ended by raising; content-free by construction (G91)."""

    type: ClassVar[str] = "error.fatal"
    code: str
    phase: str | None = None
    middleware: str | None = None
    retryable: bool = False


class OutputRejected(Event, tag="output.rejected", frozen=True):
    """An answer the output rules accepted failed the agent's output type (G92).

    ``iteration`` is the model call that wrote it, ``attempt`` counts this
    turn's rejections (1, 2, ...), ``error`` says where and why it failed —
    paths and expectations, never the draft or a value of it (G43) — and
    ``retrying`` whether it went back to the model; when it did not, the
    turn's ``error.fatal`` (``ERR_OUTPUT_INVALID``) follows.
    """

    type: ClassVar[str] = "output.rejected"
    iteration: int
    attempt: int
    error: str
    retrying: bool = True


class MessageCommitted(Event, tag="message.committed", frozen=True):
    """A message joined the session's history."""

    type: ClassVar[str] = "message.committed"
    message: Message


class WindowRefusal(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A message the window strategy would not remove, and why (G81)."""

    reason: str
    turn_index: int
    message_index: int


class WindowCompacted(Event, tag="window.compacted", frozen=True):
    """The window strategy engaged at one iteration (G80)."""

    type: ClassVar[str] = "window.compacted"
    strategy: str
    iteration: int
    keep_recent_turns: int
    removed_message_count: int
    window_chars_before: int
    window_chars_after: int
    turns_before: int
    turns_after: int
    refusals: tuple[WindowRefusal, ...] = ()
    dropped_observations: tuple[str, ...] = ()
