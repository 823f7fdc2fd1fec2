"""Typed output: the type an agent's answer must parse to, and the parse.

Pattern: ``output_type`` compiled once, at build, into an ``OutputType``: a
         check from answer text to a value or an error the model can act on,
         and the ``OutputSchema`` sent to providers with structured output.
         Four kinds: msgspec Struct, dataclass, Pydantic model, JSON Schema.
Role:    runtime layer; the builder compiles it, ``Loop.finish`` checks each
         answer the output rules accepted.

Laws: G92 (parsed after the output rules; a failure goes back to the model),
G43 (an error names paths and expectations, never the draft's values).
Why Pydantic is looked up in ``sys.modules``: when none is loaded no value can
be a Pydantic model, and helmlog does not depend on it.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ._errors import AgentBuildError
from ._validation import (
    _extra_fields,
    _join,
    _missing_fields,
    _path,
    _rule_text,
    compile_schema,
    msgspec_issue,
    pydantic_issues,
)
from .providers import OutputSchema

DEFAULT_MAX_OUTPUT_RETRIES = 2
"""Times an answer that fails the output type goes back to the model."""

RETRY_PROMPT = (
    "Your answer was rejected: it is not valid `{name}` output ({error}). "
    "Fix the errors and answer again with only the JSON."
)
"""What the model reads after a rejected answer (Pydantic AI's retry prompt,
in spirit: the errors, then "fix them and try again")."""

_MAX_ISSUES = 5
_ROOT = "$"
_NAME = re.compile(r"[^A-Za-z0-9_-]")
# Keywords ``_rule_text`` words itself; any other falls back to jsonschema's
# message, which quotes the value, so it is named by its keyword instead.
_WORDED = frozenset(
    {
        "type",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
    }
)

Check = Callable[[str], tuple[Any, str | None]]


@dataclasses.dataclass(frozen=True, slots=True)
class OutputType:
    """A compiled ``output_type``: its name, its check and its schema.

    ``check(text)`` returns ``(value, None)`` for an answer that fits, else
    ``(None, error)``: the issues, by path, without the answer's values.
    """

    target: Any
    name: str
    spec: OutputSchema
    check: Check


def compile_output(target: Any) -> OutputType:
    """``output_type`` as an ``OutputType``.

    Raises:
        AgentBuildError: not one of the four kinds, or a type msgspec or
            jsonschema cannot use; the message names the problem.
    """
    base = _pydantic_model_base()
    if isinstance(target, type) and base is not None and issubclass(target, base):
        return _pydantic(target)
    if isinstance(target, type) and (
        issubclass(target, msgspec.Struct) or dataclasses.is_dataclass(target)
    ):
        return _msgspec(target)
    if isinstance(target, Mapping):
        return _json_schema(target)
    raise AgentBuildError(
        "output_type= takes a msgspec Struct, a dataclass, a Pydantic model (a "
        f"class) or a JSON Schema dict, got {_shown(target)}"
    )


def retry_prompt(output: OutputType, error: str) -> str:
    """The user message that sends a rejected answer's error back (G92)."""
    return RETRY_PROMPT.format(name=output.name, error=error)


# -- the four kinds ------------------------------------------------------------


def _msgspec(target: type) -> OutputType:
    try:
        decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(target)
        schema = _inlined(msgspec.json.schema(target))
    except (TypeError, ValueError, NameError) as exc:  # NameError: a bad annotation
        raise AgentBuildError(
            f"output_type={target.__name__}: msgspec cannot decode it ({exc})"
        ) from None

    def check(text: str) -> tuple[Any, str | None]:
        try:
            return decoder.decode(text), None
        except msgspec.ValidationError as exc:
            return None, _without_enum_value(msgspec_issue(_ROOT, exc))
        except msgspec.DecodeError as exc:
            return None, _not_json(exc)

    return _made(target, target.__name__, schema, check)


def _pydantic(target: type) -> OutputType:
    errors: Any = sys.modules["pydantic"].ValidationError
    validate: Callable[[str], Any] = target.model_validate_json  # type: ignore[attr-defined]
    try:
        schema = dict(target.model_json_schema())  # type: ignore[attr-defined]
    # Pydantic's schema refusals are ``PydanticUserError``s, RuntimeErrors.
    except (TypeError, ValueError, RuntimeError) as exc:
        raise AgentBuildError(
            f"output_type={target.__name__}: Pydantic gives it no JSON schema "
            f"({type(exc).__name__})"
        ) from None

    def check(text: str) -> tuple[Any, str | None]:
        try:
            return validate(text), None
        except errors as exc:
            return None, _joined(pydantic_issues(_ROOT, exc))

    return _made(target, target.__name__, schema, check)


def _json_schema(target: Mapping[str, Any]) -> OutputType:
    schema = dict(target)
    try:
        msgspec.json.encode(schema)
        validator = compile_schema(schema, "output")
    except (TypeError, ValueError) as exc:
        raise AgentBuildError(
            f"output_type= is not a valid JSON Schema: {exc}".replace(
                "Tool 'output': input_schema is not a valid JSON schema ", ""
            )
        ) from None
    title = schema.get("title")
    name = title if isinstance(title, str) and title else "output"

    def check(text: str) -> tuple[Any, str | None]:
        try:
            value = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            return None, _not_json(exc)
        issues: list[str] = []
        for error in validator.iter_errors(value):
            where = _path([_ROOT, *error.absolute_path])
            keyword = str(error.validator)
            if keyword == "required":
                issues.extend(
                    f"'{_join(where, f)}' is required but missing"
                    for f in _missing_fields(error)
                )
            elif keyword == "additionalProperties" and error.validator_value is False:
                issues.extend(
                    f"'{_join(where, f)}' is not allowed here (additionalProperties)"
                    for f in _extra_fields(error)
                )
            elif keyword in _WORDED:
                issues.append(f"'{where}': {_rule_text(error)}")
            else:
                issues.append(f"'{where}': does not satisfy the schema ({keyword})")
        if issues:
            return None, _joined(issues)
        return value, None

    return _made(schema, name, schema, check)


# -- helpers -----------------------------------------------------------------------


def _made(target: Any, name: str, schema: dict[str, Any], check: Check) -> OutputType:
    wire = _NAME.sub("_", name)[:64] or "output"
    description = schema.get("description")
    spec = OutputSchema(
        wire, schema, description if isinstance(description, str) else ""
    )
    return OutputType(target=target, name=name, spec=spec, check=check)


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """msgspec's ``{"$ref": "#/$defs/X", "$defs": {...}}`` with ``X`` as the
    root: native structured output wants an object at the root."""
    ref = schema.get("$ref")
    defs = dict(schema.get("$defs") or {})
    if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
        return schema
    root = dict(defs.pop(ref.removeprefix("#/$defs/")))
    if defs:
        root["$defs"] = defs
    return root


def _pydantic_model_base() -> type | None:
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None)
    return base if isinstance(base, type) else None


def _not_json(exc: msgspec.DecodeError) -> str:
    # msgspec's texts name a byte offset, never the bytes.
    return f"'{_ROOT}': not JSON ({exc})"


def _without_enum_value(issue: str) -> str:
    """msgspec quotes the value of a failed enum or ``Literal``; drop it."""
    head, sep, text = issue.partition(": ")
    if text.startswith("invalid enum value"):
        text = "invalid enum value (not one the type allows)"
    return head + sep + text


def _joined(issues: list[str]) -> str:
    shown = issues[:_MAX_ISSUES]
    more = len(issues) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _shown(value: Any) -> str:
    if isinstance(value, type):
        return f"the class {value.__name__}"
    return f"a {type(value).__name__}"
