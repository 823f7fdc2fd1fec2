"""Tools: ``@tool`` from a typed signature, ``Tool`` from a JSON schema.

Pattern: a value object plus a validator compiled once per tool.
Role:    runtime layer; the pipeline validates arguments here after the
         before-tool chain, then calls ``execute``.

Laws: G25, G55, G56 (``check_in``), G57 (credentials), G58 (``@tool``), issue
12 item 4 (signatures read in ``_signature.py``; texts in ``_validation.py``),
R7 (a cancel during a sync tool is deferred, ``_limits.py``), issue 27 item 4
(``Tool.from_langchain``/``from_openai_agents``/``from_pydantic_ai``).
Why per-field validation, not one ``convert``: the model must read every
problem at once to fix its call in one try; ``convert`` stops at the first.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import msgspec

from helmlog.events import shape
from helmlog.events.lowlevel import compact_json

from ._signature import Param, read_params, schema_for
from ._validation import (
    compile_schema,
    msgspec_issue,
    pydantic_issues,
    quick_check,
    schema_issues,
)
from .pause._pause import running_tool

log = logging.getLogger("helmlog")

Execute = Callable[..., Any | Awaitable[Any]]
CheckIn = bool | Callable[[Mapping[str, Any]], Any] | None


class Tool:
    """A tool the model may call.

    Args:
        name: the name the model calls it by.
        description: what it does, for the model.
        input_schema: a JSON schema (an ``object`` with ``properties``),
            validated in full (``jsonschema``; its ``$schema`` draft, else
            2020-12).
        execute: called with the validated arguments as keywords; may be async.
        source: where it came from (``None`` for the agent's own tools; an MCP
            client's name for tools it brought), seen as ``tool_source``.
        check_in: ``None`` (no gate), ``True`` (always ask a person), or a
            predicate over the validated arguments (G56).
        idempotent: safe to run again after a failover (R7).
        credentials: names of secrets resolved before ``execute`` (G57); the
            values arrive as the keyword ``credentials``.
        inline: a plain (sync) ``execute`` that returns at once may run on
            the event loop's thread; by default it runs in a worker thread,
            so a blocking tool never stalls other sessions and a turn can be
            cancelled (R23). An async ``execute`` always runs on the loop.
        output_schema: a JSON schema (an ``object``) for what ``execute``
            returns, or ``None``; served over MCP as the tool's
            ``outputSchema`` (S9), and carried by ``mcp_client`` tools.
    """

    def __init__(
        self,
        name: str,
        description: str,
        input_schema: Mapping[str, Any],
        execute: Execute,
        source: str | None = None,
        *,
        check_in: CheckIn = None,
        idempotent: bool = False,
        credentials: Iterable[str] = (),
        inline: bool = False,
        output_schema: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("Tool needs a non-empty name")
        if not callable(execute):
            raise ValueError(f"Tool '{name}': execute must be callable")
        if not isinstance(input_schema, Mapping):
            raise ValueError(
                f"Tool '{name}': input_schema must be a JSON schema object"
            )
        if output_schema is not None and not isinstance(output_schema, Mapping):
            raise ValueError(
                f"Tool '{name}': output_schema must be a JSON schema object or None"
            )
        if check_in is not None and check_in is not True and not callable(check_in):
            raise ValueError(
                f"Tool '{name}': check_in must be None, True or a predicate"
            )
        self.name = name
        self.description = description or ""
        self.input_schema: Mapping[str, Any] = dict(input_schema)
        self.execute = execute
        self.source = source
        self.check_in = check_in
        self.idempotent = idempotent
        self.credentials: tuple[str, ...] = tuple(credentials)
        self.inline = bool(inline)
        self.output_schema: Mapping[str, Any] | None = (
            dict(output_schema) if output_schema is not None else None
        )
        # A sync execute not declared inline runs in a worker thread.
        self.threaded = not inline and not _is_async(execute)
        self._params: tuple[Param, ...] | None = None
        self._validator = compile_schema(self.input_schema, name)
        # Compiled once per tool: valid arguments skip the full validator.
        self._quick = quick_check(self.input_schema)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, source={self.source!r})"

    # -- tools written for other frameworks (issue 27 item 4) ----------------

    @classmethod
    def from_langchain(cls, tool: Any) -> Tool:
        """A LangChain tool (``@tool``, a ``BaseTool``) as a helmlog tool: its
        name, description and schema kept; LangChain runs it.

        Raises:
            ImportError: LangChain is not installed (``helmlog[langchain]``).
        """
        return _across("langchain", tool)

    @classmethod
    def from_openai_agents(cls, tool: Any) -> Tool:
        """An OpenAI Agents SDK ``FunctionTool`` as a helmlog tool: its name,
        description and schema kept; the SDK runs it.

        Raises:
            ImportError: the SDK is not installed (``helmlog[openai-agents]``).
        """
        return _across("openai_agents", tool)

    @classmethod
    def from_pydantic_ai(cls, tool: Any) -> Tool:
        """A Pydantic AI ``Tool`` (or a plain function it would take) as a
        helmlog tool: its name, description and schema kept; Pydantic AI
        runs it.

        Raises:
            ImportError: Pydantic AI is not installed (``helmlog[pydantic-ai]``).
        """
        return _across("pydantic_ai", tool)

    # -- validation -------------------------------------------------------

    def validate(self, args: Any) -> tuple[dict[str, Any] | None, list[str]]:
        """Check arguments; return ``(kwargs, [])`` or ``(None, issues)``."""
        # A dict without the ABC's check (a Python frame in 3.11).
        if type(args) is not dict and not isinstance(args, Mapping):
            return None, [f"arguments: expected an object, got {shape(args)}"]
        if self._params is not None:
            return self._validate_typed(args)
        return self._validate_schema(args)

    def _validate_typed(
        self, args: Mapping[str, Any]
    ) -> tuple[dict[str, Any] | None, list[str]]:
        assert self._params is not None
        issues: list[str] = []
        out: dict[str, Any] = {}
        given = 0  # arguments that name a parameter
        for p in self._params:
            if p.name not in args:
                if p.required:
                    issues.append(f"'{p.name}' is required but missing")
                continue
            given += 1
            if p.adapter is not None:
                try:
                    out[p.name] = p.adapter.validate_python(args[p.name])
                except ValueError as exc:  # pydantic.ValidationError
                    if not hasattr(exc, "errors"):
                        raise
                    issues.extend(pydantic_issues(p.name, exc))
                continue
            try:
                out[p.name] = msgspec.convert(args[p.name], type=p.annotation)
            except msgspec.ValidationError as exc:
                issues.append(msgspec_issue(p.name, exc))
        if given != len(args):  # some argument names no parameter
            known = {p.name for p in self._params}
            for extra in args:
                if extra not in known:
                    issues.append(f"'{extra}' is not a parameter of this tool")
        return (None, issues) if issues else (out, [])

    def _validate_schema(
        self, args: Mapping[str, Any]
    ) -> tuple[dict[str, Any] | None, list[str]]:
        if self._quick is not None and self._quick(args):
            return dict(args), []
        issues = schema_issues(self._validator, args)
        return (None, issues) if issues else (dict(args), [])


def tool(
    fn: Execute | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    source: str | None = None,
    check_in: CheckIn = None,
    idempotent: bool = False,
    credentials: Iterable[str] = (),
    inline: bool = False,
    output_schema: Mapping[str, Any] | None = None,
) -> Any:
    """Make a ``Tool`` from a typed function (G58); usable bare or with options.

    Each parameter's type is its schema: a msgspec-convertible type, a
    Pydantic model (or a container of them), or ``Annotated[T,
    Field(description=...)]`` / ``Annotated[T, msgspec.Meta(...)]`` with
    constraints. A parameter's description comes from its annotation, else
    from the docstring's Google-style ``Args:`` section, which is left out
    of the tool's description.
    """

    def make(func: Execute) -> Tool:
        skip = ("credentials",) if credentials else ()
        params, doc = read_params(func, skip)
        tool_name = name or func.__name__
        t = Tool(
            tool_name,
            description if description is not None else doc,
            schema_for(params, tool_name),
            func,
            source,
            check_in=check_in,
            idempotent=idempotent,
            credentials=credentials,
            inline=inline,
            output_schema=output_schema,
        )
        t._params = params
        return t

    if fn is not None:
        return make(fn)
    return make


CredentialResolver = Callable[[str], str | None]


def with_credentials(
    tool: Tool,
    kwargs: dict[str, Any],
    resolver: CredentialResolver | None,
) -> tuple[dict[str, Any] | None, str | None]:
    """The call's keywords with its declared secrets, or ``(None, refusal)`` (G57).

    A resolver that raises resolves nothing — the call is refused, never run
    without its credential — and the failure is logged, not swallowed.
    """
    if not tool.credentials:
        return kwargs, None
    secrets: dict[str, str] = {}
    for name in tool.credentials:
        value: str | None = None
        if resolver is not None:
            try:
                value = resolver(name)
            except Exception:  # fail closed: an unresolved credential refuses
                log.warning(
                    "credential resolver failed for %r of tool %s",
                    name,
                    tool.name,
                    exc_info=True,
                )
        if not isinstance(value, str) or not value:
            return None, (
                f"Tool '{tool.name}' was not executed: its credential "
                f"'{name}' could not be resolved."
            )
        secrets[name] = value
    return {**kwargs, "credentials": secrets}, None


async def call_execute(tool: Tool, kwargs: dict[str, Any], call_id: str) -> Any:
    """Run ``execute`` marked as a running tool (so ``ask_human`` works, G69).

    Exceptions propagate: each caller decides what a raise means to it.
    """
    running = running_tool()
    token = running.set(call_id)
    try:
        if tool.threaded:
            result = await _in_thread(tool, kwargs)
        else:
            result = tool.execute(**kwargs)
        # A JSON value is never awaitable: no ABC check for it.
        if type(result) not in _NEVER_AWAITABLE and inspect.isawaitable(result):
            result = await result
        return result
    finally:
        running.reset(token)


_NEVER_AWAITABLE = frozenset((dict, list, str, int, float, bool, type(None), tuple))


_CANCEL_DEFERRED: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "helmlog_cancel_deferred", default=None
)


def deferred_cancels() -> contextvars.ContextVar[list[bool] | None]:
    """Where a run notes a cancellation that arrived while a tool ran in its
    worker thread; the loop raises it at its next step boundary (R23, R7)."""
    return _CANCEL_DEFERRED


async def _in_thread(tool: Tool, kwargs: dict[str, Any]) -> Any:
    """Run a sync ``execute`` in a worker thread, to its end.

    The thread runs in a copy of this context, so the running-tool mark (and
    ``ask_human``) holds there too. A thread cannot be stopped, so a
    cancellation that arrives meanwhile waits for it: under a run that defers
    cancellations (the loop's) it is noted and raised at the loop's next step
    boundary, after the call's outcome is recorded; elsewhere it is raised
    once the tool has returned.
    """
    work = asyncio.ensure_future(asyncio.to_thread(tool.execute, **kwargs))
    cancelled = False
    while not work.done():
        try:
            await asyncio.wait((work,))  # never raises the tool's own error
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        deferred = _CANCEL_DEFERRED.get()
        task = asyncio.current_task()
        if deferred is None or task is None:
            raise asyncio.CancelledError
        task.uncancel()
        deferred.append(True)
    return work.result()  # the tool's own raise propagates as its error


def _across(framework: str, tool: Any) -> Tool:
    """``helmlog.integrations.<framework>.tool_from(tool)``, imported when
    first asked for: the runtime names no layer above it, and a framework is
    imported only by its own integration (an optional extra)."""
    module = importlib.import_module(f"helmlog.integrations.{framework}")
    made = module.tool_from(tool)
    if not isinstance(made, Tool):  # pragma: no cover - the integration's contract
        raise TypeError(
            f"helmlog.integrations.{framework}.tool_from returned {shape(made)}, "
            "not a helmlog Tool"
        )
    return made


def _is_async(execute: Any) -> bool:
    """Whether ``execute`` is a coroutine function (or an object whose
    ``__call__`` is one)."""
    if inspect.iscoroutinefunction(execute):
        return True
    call = type(execute).__dict__.get("__call__")
    return call is not None and inspect.iscoroutinefunction(call)


NO_VALUE_TEXT = "(this tool returned no value)"


def render_result(value: Any) -> str:
    """What the model reads of a verdict (G25): str verbatim, None, else JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return NO_VALUE_TEXT
    return compact_json(value)


def invalid_arguments_text(tool_name: str, issues: list[str]) -> str:
    """G55's refusal text."""
    lines = "".join(f"\n- {issue}" for issue in issues)
    return (
        f"Invalid arguments for tool '{tool_name}' — the call was not executed.{lines}"
        "\nFix the arguments to match the tool's input schema and call it again."
    )


def unknown_tool_text(name: str, registered: Iterable[str]) -> str:
    """G53's refusal text."""
    names = ", ".join(registered) or "none"
    return f"Unknown tool: {name}. Available tools: {names}."
