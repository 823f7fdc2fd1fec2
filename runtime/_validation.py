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
from collections.abc import Mapping, Sequence
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
