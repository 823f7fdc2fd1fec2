"""A tasks-extension client for the tests, on the SDK's own client extension seam.

Pattern: a ``ClientExtension`` (``io.modelcontextprotocol/tasks``) whose
         ``ResultClaim`` parses a ``resultType: "task"`` answer and, through
         ``Client.call_tool``, polls ``tasks/get`` until the task ends; plus
         the ``tasks/get`` request itself (``Mcp-Name`` is its ``taskId``).
Role:    imported by ``test_serve_tasks.py``: the client side of S10.
Emits:   nothing.

Laws: S10 (a client that declares the extension may be answered with a
task; ``tasks/get`` reads it until it completes).

Why written here: the ``mcp`` 2.3 SDK declares and routes extensions but
does not implement the tasks extension; its claim seam is the real client
machinery a tasks client is built on.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio
import mcp.types as types
from mcp.client import ClaimContext, Client, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from pydantic import ConfigDict, Field

TASKS = "io.modelcontextprotocol/tasks"


class TaskHandle(types.Result):
    """A ``CreateTaskResult``: the task a call was answered with."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str
    status_message: str | None = Field(default=None, alias="statusMessage")


class TaskState(types.Result):
    """A ``tasks/get`` answer: the task as it stands, its result once completed."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    task_id: str = Field(alias="taskId")
    status: str
    status_message: str | None = Field(default=None, alias="statusMessage")
    created_at: str = Field(alias="createdAt")
    last_updated_at: str = Field(alias="lastUpdatedAt")
    result: dict[str, Any] | None = None


class TaskRef(types.RequestParams):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId")


class GetTask(types.Request[TaskRef, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTask(types.Request[TaskRef, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


async def get_task(session: ClientSession, task_id: str) -> TaskState:
    """One ``tasks/get``."""
    return await session.send_request(
        GetTask(params=TaskRef(task_id=task_id)), TaskState
    )


async def wait_task(
    session: ClientSession, task_id: str, *, timeout_s: float = 30.0
) -> types.CallToolResult:
    """Poll ``tasks/get`` until the task completes; its ``CallToolResult``."""
    with anyio.fail_after(timeout_s):
        while True:
            state = await get_task(session, task_id)
            if state.status == "completed":
                assert state.result is not None
                return types.CallToolResult.model_validate(state.result)
            assert "working" == state.status, state
            await anyio.sleep(0.02)


class Tasks(ClientExtension):
    """Declares the tasks extension; a task answer is polled to its result."""

    identifier = TASKS

    def __init__(self) -> None:
        self.handles: list[TaskHandle] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self._wait)]

    async def _wait(
        self, handle: TaskHandle, ctx: ClaimContext
    ) -> types.CallToolResult:
        self.handles.append(handle)
        return await wait_task(ctx.session, handle.task_id)


def client(target: Any, tasks: Tasks | None = None, **kwargs: Any) -> Client:
    """An ``mcp`` 2.x ``Client`` on ``target`` that declares the tasks extension."""
    return Client(target, extensions=[tasks or Tasks()], cache=None, **kwargs)
