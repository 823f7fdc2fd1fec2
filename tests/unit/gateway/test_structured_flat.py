"""A flat output schema's quick check agrees with jsonschema on every value.

Pattern: property tests (Hypothesis): JSON-like values against flat object
         schemas (each property a bare ``type``, some required), the
         ``OutputSchema`` verdict compared with jsonschema's own
         Draft 2020-12 validator; schemas outside the flat form keep
         jsonschema whole.
Role:    differential tests of ``gateway/_structured.py``'s use of the
         runtime's ``quick_check`` (the one flat-schema check).
Emits:   nothing.

Laws: S9, P27 (a result is valid for the advertised schema exactly when
jsonschema says so, and a refusal's text is jsonschema's), G43.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.exceptions import best_match

from helmlog.gateway._structured import OutputSchema
from helmlog.runtime.lowlevel import quick_check

TYPES = ["string", "boolean", "null", "integer", "number", "array", "object"]
NAMES = ["result", "name", "n", "ok"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, 1.0, -3.0, 2.5, 1e20])
    | st.text(max_size=5)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from([*NAMES, "other"]), inner, max_size=4)
    ),
    max_leaves=8,
)


@st.composite
def flat_schemas(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=4))
    properties = {}
    for name in names:
        sub: dict[str, Any] = {"type": draw(st.sampled_from(TYPES))}
        if draw(st.booleans()):
            sub["title"] = name.title()
        properties[name] = sub
    required = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if draw(st.booleans()):
        schema["title"] = "Output"
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans())
    return schema


def _jsonschema_problem(schema: dict[str, Any], value: Any) -> str | None:
    error = best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    return None if error is None else error.message


@settings(max_examples=400, deadline=None)
@given(flat_schemas(), values)
def test_s9_p27_a_flat_schemas_quick_check_is_jsonschemas_verdict(
    schema: dict[str, Any], value: Any
) -> None:
    """S9, P27: on a flat schema the quick check runs, and whether a value
    is refused is jsonschema's verdict."""
    checked = OutputSchema(schema, "tool")
    assert checked._quick is not None
    wrong = _jsonschema_problem(schema, value)
    problem = checked.problem(value)
    assert (wrong is None) == (problem is None)


@settings(max_examples=200, deadline=None)
@given(flat_schemas(), values)
def test_s9_an_invalid_values_refusal_text_is_unchanged(
    schema: dict[str, Any], value: Any
) -> None:
    """G43: a value the quick check does not pass is judged by jsonschema
    whole: the same text as with no quick check at all."""
    checked = OutputSchema(schema, "tool")
    slow = OutputSchema(schema, "tool")
    slow._quick = None
    assert slow.problem(value) == checked.problem(value)


def test_s9_other_schemas_keep_jsonschema_whole() -> None:
    """S9: a schema with any other keyword, a typed union, a nested schema
    or a named draft is not flat: jsonschema checks it whole."""
    others = [
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}},
        {"type": "object", "$schema": "http://json-schema.org/draft-07/schema#"},
    ]
    assert [None] * len(others) == [OutputSchema(s, "tool")._quick for s in others]
    assert [None] * len(others) == [quick_check(s) for s in others]
