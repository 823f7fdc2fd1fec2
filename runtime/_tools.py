"""Tools: ``@tool`` from a typed signature, ``Tool`` from a JSON schema.

Pattern: a value object plus a validator compiled once per tool.
Role:    runtime layer; the dispatch pipeline validates arguments here after
         the before-tool chain, then calls ``execute``.
Emits:   nothing.

Laws: G55 (validation judges the arguments the chain produced; one issue per
line: ``'<field>' is required but missing``, ``arguments: expected an object,
got <shape>``), G56 (``check_in``), G57 (declared credentials), G58 (``@tool``
is named for the function, described by its docstring, its signature is the
input schema), G25 (what the model reads of a result).

Why msgspec per field rather than one ``convert`` of the whole object: the
model must read every problem at once to fix its call in one try; a single
``convert`` stops at the first.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, get_type_hints

import msgspec

from helmlog.events import compact_json, shape

from ._pause import running_tool

log = logging.getLogger("helmlog")

Execute = Callable[..., Any | Awaitable[Any]]
CheckIn = bool | Callable[[Mapping[str, Any]], Any] | None

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list, tuple),
    "null": (type(None),),
}


class _Param(msgspec.Struct, frozen=True):
    name: str
    annotation: Any
    required: bool
    default: Any = None


class Tool:
    """A tool the model may call.

    Args:
        name: the name the model calls it by.
        description: what it does, for the model.
        input_schema: a JSON schema (an ``object`` with ``properties``).
        execute: called with the validated arguments as keywords; may be async.
        source: where it came from (``None`` for the agent's own tools; an MCP
            client's name for tools it brought), seen as ``tool_source``.
        check_in: ``None`` (no gate), ``True`` (always ask a person), or a
            predicate over the validated arguments (G56).
        idempotent: safe to run again after a failover (R7).
        credentials: names of secrets resolved before ``execute`` (G57); the
            values arrive as the keyword ``credentials``.
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
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("Tool needs a non-empty name")
        if not callable(execute):
            raise ValueError(f"Tool '{name}': execute must be callable")
        if not isinstance(input_schema, Mapping):
            raise ValueError(
                f"Tool '{name}': input_schema must be a JSON schema object"
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
        self._params: tuple[_Param, ...] | None = None

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, source={self.source!r})"

    # -- validation -------------------------------------------------------

    def validate(self, args: Any) -> tuple[dict[str, Any] | None, list[str]]:
        """Check arguments; return ``(kwargs, [])`` or ``(None, issues)``."""
        if not isinstance(args, Mapping):
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
        known = {p.name for p in self._params}
        for p in self._params:
            if p.name not in args:
                if p.required:
                    issues.append(f"'{p.name}' is required but missing")
                continue
            try:
                out[p.name] = msgspec.convert(args[p.name], type=p.annotation)
            except msgspec.ValidationError as exc:
                issues.append(f"'{p.name}': {_field_message(exc)}")
        for extra in args:
            if extra not in known:
                issues.append(f"'{extra}' is not a parameter of this tool")
        return (None, issues) if issues else (out, [])

    def _validate_schema(
        self, args: Mapping[str, Any]
    ) -> tuple[dict[str, Any] | None, list[str]]:
        issues: list[str] = []
        schema = self.input_schema
        props: Mapping[str, Any] = schema.get("properties") or {}
        for field in schema.get("required") or ():
            if field not in args:
                issues.append(f"'{field}' is required but missing")
        for field, value in args.items():
            spec = props.get(field)
            if spec is None:
                if schema.get("additionalProperties") is False:
                    issues.append(f"'{field}' is not a parameter of this tool")
                continue
            issue = _schema_issue(spec, value)
            if issue:
                issues.append(f"'{field}': {issue}")
        return (None, issues) if issues else (dict(args), [])


def _field_message(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    return text[0].lower() + text[1:] if text else "invalid value"


def _schema_issue(spec: Mapping[str, Any], value: Any) -> str | None:
    kind = spec.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    if kinds:
        ok = False
        for k in kinds:
            types = _JSON_TYPES.get(k)
            if types is None:
                ok = True
                break
            if isinstance(value, bool) and k in ("integer", "number"):
                continue
            if isinstance(value, types):
                ok = True
                break
        if not ok:
            return f"expected {' or '.join(kinds)}, got {shape(value)}"
    enum = spec.get("enum")
    if enum is not None and value not in enum:
        return f"expected one of {compact_json(list(enum))}"
    return None


def _stated(default: Any) -> Any:
    """G58: the schema states a parameter's default when JSON can hold it."""
    try:
        msgspec.json.encode(default)
        msgspec.defstruct("_Default", [("value", Any, default)])
    except (TypeError, msgspec.EncodeError):
        # Not JSON, or a mutable default msgspec refuses: leave it unstated.
        return msgspec.field(default_factory=lambda: None)
    return default


def _schema_for(params: tuple[_Param, ...], name: str) -> dict[str, Any]:
    fields = [
        (p.name, p.annotation)
        if p.required
        else (p.name, p.annotation, _stated(p.default))
        for p in params
    ]
    struct = msgspec.defstruct(name, fields)
    schema = msgspec.json.schema(struct)
    defs = schema.pop("$defs", {})
    body = dict(defs.pop(name, schema))
    body.pop("title", None)
    if defs:
        body["$defs"] = defs
    return body


def tool(
    fn: Execute | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    source: str | None = None,
    check_in: CheckIn = None,
    idempotent: bool = False,
    credentials: Iterable[str] = (),
) -> Any:
    """Make a ``Tool`` from a typed function (G58); usable bare or with options."""

    def make(func: Execute) -> Tool:
        sig = inspect.signature(func)
        hints = get_type_hints(func)
        params: list[_Param] = []
        for p in sig.parameters.values():
            if p.name == "credentials" and credentials:
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            params.append(
                _Param(
                    p.name,
                    hints.get(p.name, Any),
                    p.default is inspect.Parameter.empty,
                    None if p.default is inspect.Parameter.empty else p.default,
                )
            )
        tool_name = name or func.__name__
        t = Tool(
            tool_name,
            description if description is not None else inspect.getdoc(func) or "",
            _schema_for(tuple(params), tool_name),
            func,
            source,
            check_in=check_in,
            idempotent=idempotent,
            credentials=credentials,
        )
        t._params = tuple(params)
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
    token = running_tool().set(call_id)
    try:
        result = tool.execute(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result
    finally:
        running_tool().reset(token)


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
