"""The quick argument check agrees with the full JSON Schema validator.

Pattern: Hypothesis draws a flat object schema (the shape framework tools
         declare: typed properties, ``required``, ``additionalProperties``,
         annotations) and arguments of every JSON kind; the quick check
         compiled for the schema must never call valid what ``jsonschema``
         refuses, and ``Tool.validate`` must give what the validator alone
         gives (the same arguments, or the same issue lines).
Role:    property tests for ``runtime/_validation.py`` (``quick_check``) as
         ``Tool.validate`` uses it.
Emits:   nothing.

Laws: G55 (validation judges the chain's arguments; one line per issue);
issue 27 (the bench figure: the quick check is a cut of a governed call's
cost, so it must not change a verdict).
"""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from helmlog import Tool
from helmlog.runtime._validation import quick_check, schema_issues

KINDS = ["string", "integer", "number", "boolean", "null", "object", "array"]
NAMES = ["a", "b", "order", "x"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.sampled_from([1.0, 0.0, -2.0])
    | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.dictionaries(st.text(max_size=2), inner, max_size=2)
    ),
    max_leaves=4,
)


@st.composite
def flat_schemas(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
    properties: dict[str, Any] = {}
    for name in names:
        sub: dict[str, Any] = {}
        if draw(st.booleans()):
            sub["type"] = draw(st.sampled_from(KINDS))
        if draw(st.booleans()):
            sub["title"] = name.title()
        if draw(st.booleans()):
            sub["description"] = f"the {name}"
        properties[name] = sub
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if names and draw(st.booleans()):
        schema["required"] = draw(st.lists(st.sampled_from(names), unique=True))
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans())
    if draw(st.booleans()):
        schema["title"] = "args"
    return schema


arguments = st.dictionaries(st.sampled_from([*NAMES, "extra"]), json_values, max_size=4)


async def _execute(**_: Any) -> None:
    return None


@settings(max_examples=400, deadline=None)
@given(schema=flat_schemas(), args=arguments)
def test_the_quick_check_never_admits_what_the_validator_refuses(
    schema: dict[str, Any], args: dict[str, Any]
) -> None:
    """G55, issue 27: a quick "valid" is the validator's "no error"."""
    check = quick_check(schema)
    assert check is not None  # every drawn schema is of the flat shape
    validator = jsonschema.Draft202012Validator(schema)
    if check(args):
        assert list(validator.iter_errors(args)) == []


@settings(max_examples=400, deadline=None)
@given(schema=flat_schemas(), args=arguments)
def test_tool_validate_gives_what_the_validator_alone_gives(
    schema: dict[str, Any], args: dict[str, Any]
) -> None:
    """G55: the same arguments admitted, or the same issue lines, in order."""
    tool = Tool("lookup", "Look up.", schema, _execute)
    issues = schema_issues(tool._validator, args)
    expected = (None, issues) if issues else (dict(args), [])
    assert tool.validate(args) == expected


def test_valid_arguments_of_a_flat_schema_are_admitted_by_the_quick_check() -> None:
    """Issue 27: the framework tools' schema shape takes the quick path."""
    schema = {
        "type": "object",
        "title": "lookup_order_args",
        "properties": {"order_id": {"title": "Order Id", "type": "string"}},
        "required": ["order_id"],
        "additionalProperties": False,
    }
    check = quick_check(schema)
    assert check is not None
    assert check({"order_id": "7"}) is True
    assert check({"order_id": 7}) is False  # left to the validator's words
    assert check({}) is False
    assert check({"order_id": "7", "extra": 1}) is False


def test_schemas_beyond_the_flat_shape_get_no_quick_check() -> None:
    """G55: formats, bounds, enums, nesting and drafts stay the validator's."""
    others: list[dict[str, Any]] = [
        {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}},
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}},
        {"type": "object", "properties": {"a": {"enum": [1, 2]}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {}},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"properties": {"a": {"type": "string"}}},
    ]
    for schema in others:
        assert quick_check(schema) is None, schema
