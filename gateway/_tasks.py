"""An ``ask`` that waits as an MCP task: the pause recorded, the task read back.

Pattern: a recorder of a served call's pause (``pause.request``, as an
         agent's) and a reader that derives the task a client polls from
         the session's stream alone (``TaskView``); the wire shapes of the
         2026-07-28 tasks extension (``io.modelcontextprotocol/tasks``).
Role:    gateway layer; ``mcp_serve`` answers a task-declaring client's
         asking call with a task, serves ``tasks/get|update|cancel`` from
         the reader, and resumes the pause in ``ServedTools.resume``.
Emits:   ``pause.request`` (the ask), ``pause.resume`` and ``stream.tool_end``
         (what the client receives when the task completes).

Laws: S10 (a task is the session's ordinary durable pause: in the asks
index, decided by ``decide_pending``; its state is read from the stream, so
it outlives the serving process), G59 (the pause's record), R9 (the
stream stores the pause's digests, never a MAC), R7.

Why one serving session per task: a session has one pending pause at a
time (R1), and a task outlives the connection that made it; its stream is
therefore its own, named by the task id with the paused call.
"""

from __future__ import annotations

import dataclasses
import datetime
import hmac
from collections.abc import Mapping
from typing import Any, Literal

import mcp.types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

from helmlog.events import (
    Checkpoint,
    CheckpointError,
    EventStore,
    PausedCall,
    PauseRequested,
    PauseResumed,
    ToolDispatched,
    ToolEnded,
    read_verified,
    shape,
)
from helmlog.events.lowlevel import digest, pause_content_digest
from helmlog.runtime import CheckInDecision, DecisionRequiredError
from helmlog.runtime.lowlevel import SERVED, CallRules, CallSite, Journal, Paused

#: The 2026-07-28 tasks extension's identifier (SEP-2663).
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

#: The ``_meta`` key of a call that fetches a decided ask's outcome (S4):
#: its value is the ask's id, which the pending tool error names.
ASK_META = "helmlog/ask"

#: How often a client is asked to poll ``tasks/get``, in ms.
POLL_INTERVAL_MS = 1000

#: ``SERVED`` with asks that pause: for a call whose client takes a task.
#: ``check_in`` and ``ask_human`` still refuse (S5).
TASK_RULES: CallRules = dataclasses.replace(SERVED, name="served-task", asks=True)

TaskStatus = Literal["working", "input_required", "completed", "cancelled", "failed"]


class TaskParams(types.RequestParams):
    """The params of ``tasks/get``, ``tasks/update`` and ``tasks/cancel``."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    task_id: str = Field(alias="taskId", min_length=1, max_length=512)


def declared(ctx: ServerRequestContext[Any]) -> bool:
    """Whether this request may be answered with a task (S10).

    The client declared the tasks extension, and the connection speaks a
    revision whose ``tools/call`` result may be a task (2026-07-28): a
    handshake-era client may declare it too (the MCP Inspector 2.12 does),
    and the SDK cannot send it a task there, so it gets S4's tool error.
    """
    if ctx.session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return bool(extensions) and TASKS_EXTENSION in (extensions or {})


def task_id(session_id: str, tool_call_id: str) -> str:
    """The task a paused call is: its serving session and the call that waits."""
    return f"{session_id}/{tool_call_id}"


def not_found(task: str, why: str = "Task not found") -> MCPError:
    """The extension's error for a task id this server does not hold."""
    del task  # never echoed: an id is a capability to poll
    return MCPError(types.INVALID_PARAMS, f"Failed to retrieve task: {why}")


def iso(ms: int) -> str:
    """An event timestamp (ms since the epoch) as the extension's ISO 8601."""
    at = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def waiting_text(question: str, middleware: str | None) -> str:
    """What a task waiting on a person says (its ``statusMessage``)."""
    who = f"middleware '{middleware}'" if middleware else "a rule"
    return (
        f"waiting for a person to decide ({who} asked): {question}; it is pending "
        "in this server's asks (helmlog asks / the approvals page)"
    )


def pending_text(ask_id: str, question: str, middleware: str | None) -> str:
    """S4: what a client without tasks receives for a call that waits on a person.

    It names the ask (its id), where a person decides it, and how the
    client reads the outcome once decided; the tool runs at most once.
    """
    who = f"middleware '{middleware}'" if middleware else "a rule"
    session_id = ask_id.partition("/")[0]
    return (
        f"{who} asked a person to decide: {question} The call waits as ask "
        f"'{ask_id}': a person decides it on the approvals page or with "
        f"`helmlog approve {session_id}` (`helmlog asks` lists it), and the "
        "tool then runs once. Its outcome: this call again with _meta "
        f'{{"{ASK_META}": "{ask_id}"}}, or tasks/get of that id with the '
        f"{TASKS_EXTENSION} extension."
    )


def tool_error(text: str) -> types.CallToolResult:
    """S4: a tool error whose one text block is ``text``."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=True
    )


def check_pause(journal: Journal, cp: Checkpoint, key: bytes | None) -> Any:
    """R9 for a served pause: the checkpoint names this stream's pending pause.

    The bindings (seq, call, arguments' digest) must match the verified
    fold, and with a chain key the checkpoint's MAC must verify.
    """
    f = journal.folder
    if cp.kind != "pause":
        raise CheckpointError("stale", "a conversation checkpoint cannot be resumed")
    if cp.seq in f.resolved_pauses:
        raise CheckpointError(
            "replayed", f"the pause at seq {cp.seq} was already resolved"
        )
    p = f.pending
    if p is None or p.seq != cp.seq:
        raise CheckpointError("stale", f"no pending pause at seq {cp.seq}")
    if cp.tool_call_id != p.tool_call_id or cp.args_digest != p.args_digest:
        raise CheckpointError("tampered", "a binding disagrees with the session stream")
    if key:
        expected = cp.expected_mac(key, p.content_digest or None)
        if not cp.mac or not hmac.compare_digest(cp.mac.encode(), expected.encode()):
            raise CheckpointError("tampered", "the checkpoint's MAC does not verify")
    return p


def decision_event(pending: Any, decision: Any, now_ms: int) -> PauseResumed:
    """The ``pause.resume`` a person's ``decision`` on ``pending`` records.

    Raises:
        DecisionRequiredError: ``decision`` is not a ``CheckInDecision``
            (G61, before anything is appended).
    """
    if not isinstance(decision, CheckInDecision):
        raise DecisionRequiredError(
            gate=pending.kind,
            middleware=pending.middleware,
            tool_name=pending.tool_name,
            received="nothing" if decision is None else shape(decision),
        )
    return PauseResumed(
        kind=pending.kind,
        tool_call_id=pending.tool_call_id,
        approved=decision.approved,
        by=decision.by,
        note=decision.note,
        paused_duration_ms=max(0, now_ms - pending.timestamp),
        component_id=pending.component_id,
    )


def pause_event(journal: Journal, site: CallSite, paused: Paused) -> PauseRequested:
    """The served call's pause, recorded as an agent records one (G59, R9).

    The stream holds the arguments' and the pause's digests; the pause's
    MAC is computed when a checkpoint is signed (``decide_pending``), never
    stored. The caller flushes it before handing the task out: a task is
    created only once ``tasks/get`` would find it (SEP-2663). The caller's
    identity (S2) is recorded on the pause, so a resume restores it (S10).
    """
    f = journal.folder
    caller = None if site.identity is None else dict(site.identity)
    identity = caller if caller is not None else f.identity
    ask = paused.ask
    call = PausedCall(
        kind=paused.kind,
        args=paused.args,
        middleware=ask.middleware,
        link_index=paused.link_index,
        iteration=site.iteration,
        question=ask.question,
        component_id=ask.component_id,
        turn=f.turn,
        identity=identity,
    )
    timeout_s = ask.timeout_s
    return PauseRequested(
        kind=paused.kind,
        tool_name=site.tool_name,
        tool_call_id=site.tool_call_id,
        middleware=ask.middleware,
        link_index=paused.link_index,
        question=ask.question,
        detail=ask.detail,
        component_id=ask.component_id,
        args=paused.args,
        args_digest=digest(paused.args),
        iteration=site.iteration,
        content_digest=pause_content_digest(
            history=tuple(f.history),
            original_input=f.original_input,
            tool_name=site.tool_name,
            call=call,
        ),
        timeout_ms=None if timeout_s is None else max(1, round(timeout_s * 1000)),
        tool_source=site.tool_source,
        identity=caller,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class TaskView:
    """A task as its session's stream says it stands.

    ``status`` is ``working`` while the pause waits on a person or the
    approved call runs, ``completed`` once ``stream.tool_end`` holds what
    the client receives (a refusal on decline is a completed tool error).
    """

    task_id: str
    status: TaskStatus
    created_ms: int
    updated_ms: int
    message: str | None = None
    result: Mapping[str, Any] | None = None
    decided: PauseResumed | None = None
    #: The paused call: its tool, its arguments' digest, its caller (S2).
    tool_name: str = ""
    args_digest: str = ""
    identity: Any = None

    def wire(self, *, result_type: str) -> dict[str, Any]:
        """The extension's ``Task`` (``DetailedTask`` with a final result)."""
        out: dict[str, Any] = {
            "resultType": result_type,
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": iso(self.created_ms),
            "lastUpdatedAt": iso(self.updated_ms),
            "ttlMs": None,
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if self.message is not None:
            out["statusMessage"] = self.message
        if self.result is not None:
            out["result"] = dict(self.result)
        return out


async def read_task(store: EventStore, task: str, prefix: str) -> TaskView:
    """Derive the task ``task`` from its session's verified stream.

    ``prefix`` is ``mcp-<name>-``: a task id names a session of this server
    and, after a ``/``, the call that waits.

    Raises:
        MCPError: ``INVALID_PARAMS`` for an id that names no task here.
    """
    session_id, slash, call_id = task.partition("/")
    if not slash or not session_id.startswith(prefix) or not call_id:
        raise not_found(task)
    records = await read_verified(store, session_id)
    created: int | None = None
    updated = 0
    view_status: TaskStatus = "working"
    message: str | None = None
    result: Mapping[str, Any] | None = None
    decided: PauseResumed | None = None
    asked: PauseRequested | None = None
    for record in records:
        ev = record.decode()
        if getattr(ev, "tool_call_id", None) != call_id:
            continue
        at = int(getattr(ev, "timestamp", 0) or 0)
        if isinstance(ev, PauseRequested):
            created = at if created is None else created
            asked = asked or ev
            view_status, message, decided = (
                "working",
                waiting_text(ev.question, ev.middleware),
                None,
            )
        elif isinstance(ev, PauseResumed):
            decided = ev
            message = _verdict(ev)
        elif isinstance(ev, ToolDispatched):
            message = f"{_verdict(decided)}; the tool is running"
        elif isinstance(ev, ToolEnded):
            view_status, result = "completed", ev.result
            message = _verdict(decided)
        else:
            continue
        updated = max(updated, at)
    if created is None or asked is None:
        raise not_found(task)
    return TaskView(
        task_id=task,
        status=view_status,
        created_ms=created,
        updated_ms=updated,
        message=message,
        result=result if isinstance(result, Mapping) else None,
        decided=decided,
        tool_name=asked.tool_name,
        args_digest=asked.args_digest,
        identity=asked.identity,
    )


def _verdict(decided: PauseResumed | None) -> str:
    """A person's decision, as a task's ``statusMessage`` tells it."""
    if decided is None:
        return "no person was asked"
    verdict = "approved" if decided.approved else "declined"
    return f"{verdict} by {decided.by}" if decided.by else verdict
