"""A tool's ``outputSchema`` kept honest: structured content or a recorded refusal.

Pattern: a compiled schema (``OutputSchema``) and the one rule that applies
         it to what a call is about to return (``judge``): valid structured
         content, or a refusal whose text names the schema's expectation.
Role:    gateway layer; ``mcp_serve`` applies it to every served tool that
         declares an output schema (S9). Pure: no I/O, no SDK types.
Emits:   nothing; the caller records the refusal as a ledger row.

Laws: S9 (a result released under an advertised ``outputSchema`` is valid
for it, or the call is refused and the refusal recorded), G43 (a refusal
names paths and expectations, never a value).

Why refuse rather than drop ``structuredContent``: a tool that advertises an
output schema and answers without structured content breaks every current
client (the ``mcp`` 2.x client, FastMCP 4, the Inspector); a refusal is a
tool error, which clients read as one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema
import msgspec
import pydantic_core
from jsonschema.exceptions import SchemaError, best_match

from helmlog.runtime.lowlevel import quick_check, render_result

#: The ``middleware`` name of the ledger row that records a refusal.
OUTPUT_SCHEMA_RULE = "output-schema"


class OutputSchema:
    """One tool's output schema, checked and compiled once.

    Raises:
        ValueError: the schema is not an ``object`` schema (MCP requires
            one) or not a valid JSON schema; the message names the tool.
    """

    def __init__(self, schema: Mapping[str, Any], tool_name: str) -> None:
        if schema.get("type") != "object":
            raise ValueError(
                f"Tool '{tool_name}': output_schema must describe an object "
                '(``"type": "object"``), as MCP requires'
            )
        cls = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )
        try:
            cls.check_schema(dict(schema))
        except SchemaError as exc:
            raise ValueError(
                f"Tool '{tool_name}': output_schema is not a valid JSON schema "
                f"({exc.message[:200]})"
            ) from None
        self.schema: dict[str, Any] = dict(schema)
        self.tool_name = tool_name
        self._validator = cls(self.schema)
        self._quick = quick_check(self.schema)

    def problem(self, value: Any) -> str | None:
        """``None`` when ``value`` is valid; else where and what it breaks.

        The text names the failing path and the schema's keyword and its
        expectation, never the value (G43).
        """
        quick = self._quick
        if quick is not None and isinstance(value, dict) and quick(value):
            return None  # what jsonschema finds too (``test_structured_flat.py``)
        error = best_match(self._validator.iter_errors(value))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "the root"
        expected = json.dumps(error.validator_value, default=str)[:120]
        return f"at {where}, schema keyword '{error.validator}' ({expected})"


def structured(value: Any) -> Any:
    """The JSON form of a tool's result (a model or a struct becomes a dict).

    A ``str`` stays a ``str``: text is not structured content, even when it
    reads as JSON. Pydantic models and dataclasses go through pydantic's
    JSON mode, msgspec structs through msgspec; anything else through the
    runtime's rendering (G25).
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, msgspec.Struct):
        return msgspec.to_builtins(value)
    try:
        return pydantic_core.to_jsonable_python(value)
    except pydantic_core.PydanticSerializationError:
        return json.loads(render_result(value))


def refusal_text(tool_name: str, changed_by: str | None, problem: str) -> str:
    """S9's refusal: which result broke the tool's schema, and where."""
    whose = f"as changed by middleware '{changed_by}', it" if changed_by else "it"
    return (
        f"The result of tool '{tool_name}' was withheld: {whose} does not match "
        f"the tool's output schema ({problem})."
    )


def judge(
    schema: OutputSchema, value: Any, changed_by: str | None
) -> tuple[dict[str, Any] | None, str | None]:
    """``(structured_content, None)`` for a valid result, else ``(None, refusal)``.

    ``value`` is what the call would release (after the after-tool walk);
    ``changed_by`` the link whose transform produced it, if one did.
    """
    content = structured(value)
    problem = schema.problem(content)
    if problem is not None:
        return None, refusal_text(schema.tool_name, changed_by, problem)
    assert isinstance(content, dict)  # an "object" schema admits nothing else
    return content, None
