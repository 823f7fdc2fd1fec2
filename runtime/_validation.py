"""Argument validation: the issues a model reads when its call does not fit.

Pattern: validators compiled once per tool (``jsonschema`` for a JSON schema;
         msgspec or a Pydantic ``TypeAdapter`` per typed parameter), each
         turning its failures into one line per issue.
Role:    runtime layer; ``Tool.validate`` calls these after the before-tool
         chain, for ``Tool(...)``, ``@tool`` and MCP tools.

Laws: G55 (one issue per line, in the schema's order), issue 12 item 4 (JSON
Schema in full; every issue names the argument's path and the rule broken).
Why our own texts: ``jsonschema``'s quote the whole offending value and name
no rule; the model needs the path and the keyword. Formats are checked: a
``"format"`` is the tool author asking for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jsonschema
import msgspec
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator

from helmlog.events import shape
from helmlog.events.lowlevel import compact_json

_MESSAGE_LIMIT = 160
_AT_PATH = re.compile(r"^(.*) - at `\$(.*)`$", re.DOTALL)


def compile_schema(schema: Mapping[str, Any], tool_name: str) -> Validator:
    """A validator for ``schema`` (its ``$schema`` draft, else 2020-12).

    Raises:
        ValueError: the schema is not a valid JSON schema; names the tool.
    """
    cls = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    try:
        cls.check_schema(dict(schema))
    except SchemaError as exc:
        where = _path(exc.absolute_path) or "the root"
        raise ValueError(
            f"Tool '{tool_name}': input_schema is not a valid JSON schema "
            f"({_short(exc.message)}, at {where})"
        ) from None
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


# What a flat object schema may hold for ``quick_check`` to decide it: the
# keywords it checks, and annotations (no assertion in any draft).
_QUICK_ROOT = frozenset(
    {"type", "properties", "required", "additionalProperties", "title", "description"}
)
_QUICK_PROPERTY = frozenset({"type", "title", "description", "default", "examples"})


def _is_type(kind: str) -> Callable[[Any], bool] | None:
    """A strict subset of JSON Schema's ``type`` (every draft): what it
    accepts, the validator accepts too (``1.0`` as an integer is left to it)."""
    checks: dict[str, Callable[[Any], bool]] = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "null": lambda v: v is None,
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    return checks.get(kind)


def _any_value(_: Any) -> bool:
    return True


QuickCheck = Callable[[Mapping[str, Any]], bool]


def quick_check(schema: Mapping[str, Any]) -> QuickCheck | None:
    """A check compiled once per tool that proves arguments valid without the
    full validator, for the common flat schema (``{"type": "object",
    "properties": {name: {"type": ...}}, "required": [...],
    "additionalProperties": bool}``); ``None`` for any other schema.

    ``True`` means the validator would report no issue; ``False`` means
    "ask the validator" (it words the issues, G55), never "invalid".
    Why: the full validator costs tens of microseconds per call, among
    the largest steps of a governed call's own work (issue 27).
    """
    if not set(schema) <= _QUICK_ROOT or schema.get("type") != "object":
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    closed = schema.get("additionalProperties", True)
    if not isinstance(properties, Mapping) or not isinstance(closed, bool):
        return None
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, sub in properties.items():
        if not isinstance(sub, Mapping) or not set(sub) <= _QUICK_PROPERTY:
            return None
        kind = sub.get("type")
        if kind is None:
            check: Callable[[Any], bool] | None = _any_value
        else:
            check = _is_type(kind) if isinstance(kind, str) else None
        if check is None:
            return None
        checks[name] = check
    must = tuple(required)

    def valid(args: Mapping[str, Any]) -> bool:
        for key, value in args.items():
            check = checks.get(key)
            if check is None:
                if closed is False:
                    return False
            elif not check(value):
                return False
        return all(key in args for key in must)

    return valid


def _path(parts: Sequence[Any] | Any) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _join(base: str, field: str) -> str:
    return f"{base}.{field}" if base else field


def _short(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= _MESSAGE_LIMIT:
        return text
    return text[: _MESSAGE_LIMIT - 1] + "…"


def _missing_fields(error: ValidationError) -> list[str]:
    required: Any = error.validator_value
    instance = error.instance
    if not isinstance(required, list) or not isinstance(instance, Mapping):
        return []
    return [f for f in required if isinstance(f, str) and f not in instance]


def _extra_fields(error: ValidationError) -> list[str]:
    instance = error.instance
    if not isinstance(instance, Mapping):
        return []
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    known = set(schema.get("properties") or ())
    patterns = [re.compile(p) for p in schema.get("patternProperties") or ()]
    return [
        f
        for f in instance
        if f not in known and not any(p.search(str(f)) for p in patterns)
    ]


def _rule_text(error: ValidationError) -> str:
    """What the value must be, by keyword (the keyword named in parentheses)."""
    keyword = str(error.validator)
    value: Any = error.validator_value
    texts: dict[str, str] = {
        "minimum": f"must be >= {value}",
        "maximum": f"must be <= {value}",
        "exclusiveMinimum": f"must be > {value}",
        "exclusiveMaximum": f"must be < {value}",
        "multipleOf": f"must be a multiple of {value}",
        "minLength": f"must be at least {value} characters long",
        "maxLength": f"must be at most {value} characters long",
        "pattern": f"must match the pattern {compact_json(value)}",
        "format": f"must be a valid {value}",
        "minItems": f"must hold at least {value} items",
        "maxItems": f"must hold at most {value} items",
        "uniqueItems": "must not hold duplicate items",
        "minProperties": f"must hold at least {value} fields",
        "maxProperties": f"must hold at most {value} fields",
        "const": f"must be {_short(compact_json(value))}",
    }
    if keyword == "type":
        kinds = [value] if isinstance(value, str) else list(value)
        return f"expected {' or '.join(map(str, kinds))}, got {shape(error.instance)}"
    if keyword == "enum":
        return f"expected one of {_short(compact_json(list(value)))}"
    text = texts.get(keyword)
    if text is None:
        return f"{_short(error.message)} ({keyword})"
    return f"{text} ({keyword})"


def schema_issues(validator: Validator, args: Mapping[str, Any]) -> list[str]:
    """G55's issue lines for ``args`` under a compiled schema, in its order."""
    issues: list[str] = []
    for error in validator.iter_errors(args):
        where = _path(error.absolute_path)
        if error.validator == "required":
            issues.extend(
                f"'{_join(where, f)}' is required but missing"
                for f in _missing_fields(error)
            )
        elif error.validator == "additionalProperties" and error.validator_value is (
            False
        ):
            extras = _extra_fields(error)
            if where:
                issues.extend(
                    f"'{_join(where, f)}' is not allowed here (additionalProperties)"
                    for f in extras
                )
            else:
                issues.extend(f"'{f}' is not a parameter of this tool" for f in extras)
        elif where:
            issues.append(f"'{where}': {_rule_text(error)}")
        else:
            issues.append(f"arguments: {_rule_text(error)}")
    return issues


def msgspec_issue(name: str, exc: msgspec.ValidationError) -> str:
    """One typed parameter's issue: msgspec's text, its ``$`` path moved to the name."""
    text = str(exc) or "invalid value"
    where = name
    found = _AT_PATH.match(text)
    if found is not None:
        text, tail = found.group(1), found.group(2)
        where = f"{name}{tail}"
    return f"'{where}': {text[0].lower()}{text[1:]}"


def pydantic_issues(name: str, exc: Any) -> list[str]:
    """One Pydantic parameter's issues: one per error, by path and error type."""
    issues: list[str] = []
    for err in exc.errors(include_url=False, include_input=False):
        where = _path([name, *err.get("loc", ())])
        kind = str(err.get("type", "invalid"))
        if kind == "missing":
            issues.append(f"'{where}' is required but missing")
            continue
        message = _short(str(err.get("msg", "invalid value")))
        issues.append(f"'{where}': {message[0].lower()}{message[1:]} ({kind})")
    return issues
