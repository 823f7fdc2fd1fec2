"""Recorded calls: serve a session's recorded executions to the pipeline.

Pattern: a test double that is production code (Temporal's replayer): a
         ``CallRecorder`` that keeps what the pipeline files, checks each
         dispatch against the record, and tool copies whose ``execute`` hands
         back the recorded result, or raises ``NotRecorded``.
Role:    runtime layer; what-if (``whatif/``) runs the one pipeline over a
         recorded session with these; exported through ``lowlevel``.

Laws: G51 (only ``execute`` is served), G18/G25 (a recorded raise is served
as a raise), G69–G70, R7 (an unknown outcome serves nothing).
Why ``NotRecorded`` is a ``BaseException``: like ``ask_human``'s signal it
must pass every ``except Exception`` (G18) so no step guesses a result.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from helmlog.events import MiddlewareDecision

from ._tools import Tool
from .pause._pause import AskHumanSignal, running_tool

NotRecordedReason = Literal["not-dispatched", "other-arguments", "outcome-unknown"]


class RecordedCall(msgspec.Struct, frozen=True, kw_only=True):
    """What a session's record holds of one call's execution.

    ``args`` are the arguments it was dispatched with (``tool.dispatched``);
    ``result``/``error`` what ``stream.tool_end`` reported. ``question`` is
    set when the tool asked a person (``ask_human``, with ``detail``);
    ``known=False`` for a call whose outcome is unknown (R7).
    """

    args: Any
    result: Any = None
    error: bool = False
    question: str | None = None
    detail: Any = None
    known: bool = True


class NotRecorded(BaseException):
    """The pipeline asked for an execution the record does not hold.

    ``reason``: ``"not-dispatched"`` (the record never ran this call),
    ``"other-arguments"`` (it ran with other arguments) or
    ``"outcome-unknown"`` (it ran, and its result was never recorded, R7).
    ``arguments`` are those the pipeline would have dispatched (not ``args``:
    an exception's ``args`` is its own).
    """

    def __init__(self, tool_call_id: str, reason: NotRecordedReason, args: Any) -> None:
        super().__init__(f"call {tool_call_id}: {reason}")
        self.tool_call_id = tool_call_id
        self.reason: NotRecordedReason = reason
        self.arguments = args


class RecordedToolError(Exception):
    """A recorded raise, served again: its text is the recorded error text."""


class RecordedCalls:
    """A ``CallRecorder`` over a session's recorded executions, and its tools.

    ``expect(call_id, recorded)`` names the call the pipeline is about to
    walk and what the record holds of it (``None``: never dispatched);
    ``rows`` are the rows filed since, and ``dispatched_args`` the arguments
    the pipeline dispatched with. ``tools(registered)`` gives copies of the
    tools whose ``execute`` serves the expected call's recorded result.
    """

    __slots__ = ("_call", "_call_id", "dispatched_args", "rows")

    def __init__(self) -> None:
        self._call_id = ""
        self._call: RecordedCall | None = None
        self.rows: list[MiddlewareDecision] = []
        self.dispatched_args: Any = None

    def expect(self, tool_call_id: str, recorded: RecordedCall | None) -> None:
        """Serve ``recorded`` for the call about to be walked; forget the last."""
        self._call_id = tool_call_id
        self._call = recorded
        self.rows = []
        self.dispatched_args = None

    # -- CallRecorder -------------------------------------------------------

    async def file(self, rows: list[MiddlewareDecision]) -> None:
        """Keep the rows a walk filed (nothing is recorded)."""
        self.rows.extend(rows)

    async def dispatched(
        self, tool: Tool, tool_call_id: str, args: Any, attempt: int
    ) -> None:
        """Check the dispatch against the record; raise ``NotRecorded`` if unheld."""
        self.dispatched_args = args
        call = self._call
        if call is None or tool_call_id != self._call_id:
            raise NotRecorded(tool_call_id, "not-dispatched", args)
        if call.args != args:
            raise NotRecorded(tool_call_id, "other-arguments", args)
        if not call.known:
            raise NotRecorded(tool_call_id, "outcome-unknown", args)

    # -- the served tools ---------------------------------------------------

    def tools(self, registered: Mapping[str, Tool]) -> dict[str, Tool]:
        """Copies of ``registered`` whose ``execute`` serves the record.

        Everything else of each tool (schema, validation, check-in,
        credentials, source) is the tool's own, so the pipeline's steps
        judge as they would live.
        """
        served: dict[str, Tool] = {}
        for name, tool in registered.items():
            twin = copy.copy(tool)
            twin.execute = self._serve
            twin.threaded = False  # the record answers at once: no worker thread
            served[name] = twin
        return served

    def _serve(self, **_kwargs: Any) -> Any:
        call = self._call
        if call is None or running_tool().get() != self._call_id:
            # Invariant: ``dispatched`` refused every call the record lacks.
            raise NotRecorded(running_tool().get() or "", "not-dispatched", None)
        if call.question is not None:
            raise AskHumanSignal(call.question, call.detail)
        if call.error:
            raise RecordedToolError(str(call.result))
        # Decoded for this what-if alone; every hook gets its own copy (G8).
        return call.result
