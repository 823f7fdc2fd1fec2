"""Richer tools: Pydantic and Annotated parameters, Args: docs, full JSON Schema.

Pattern: law-named unit tests on ``@tool``/``Tool(...)`` schemas and
         ``Tool.validate``, and whole agent runs (scripted provider) that show
         what the model reads when its arguments break a rule.
Role:    unit tests for ``runtime/_signature.py`` and ``runtime/_validation.py``.
Emits:   nothing.

Laws: G55 (one issue per line, naming the argument by its path and the rule
it broke), G58 (the signature is the schema; the docstring describes the
tool), issue 12 item 4 (Pydantic models, ``Annotated[..., Field(...)]``,
Google-style ``Args:``, JSON Schema in full for ``Tool(...)`` and MCP tools).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pydantic
import pytest

from helmlog import Agent, Tool, tool
from helmlog.gateway import mcp_client, mcp_serve
from helmlog.runtime.providers import Reply, ScriptedProvider, ToolCallRequest, scripted


class Item(pydantic.BaseModel):
    sku: str = pydantic.Field(description="the stock-keeping unit")
    quantity: int = pydantic.Field(ge=1)


class Order(pydantic.BaseModel):
    customer: str
    items: list[Item]


class Line(msgspec.Struct):
    sku: str


ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "minimum": 0, "maximum": 10_000},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "customer": {
            "type": "object",
            "properties": {
                "email": {"type": "string", "format": "email"},
                "name": {"type": "string", "minLength": 1},
            },
            "required": ["email", "name"],
            "additionalProperties": False,
        },
        "lines": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku"],
            },
        },
    },
    "required": ["amount", "currency"],
    "additionalProperties": False,
}


def invalid(name: str, *issues: str) -> str:
    lines = "".join(f"\n- {issue}" for issue in issues)
    return (
        f"Invalid arguments for tool '{name}' — the call was not executed.{lines}"
        "\nFix the arguments to match the tool's input schema and call it again."
    )


def one_call(name: str, **args: Any) -> ScriptedProvider:
    return scripted(
        [Reply(tool_calls=[ToolCallRequest(id="c1", name=name, args=args)]), "Done."]
    )


def tool_read(model: ScriptedProvider) -> str:
    """What the model read of its call, in its second request."""
    return model.requests[1].messages[-1].content


# -- @tool: Pydantic, Annotated, Args: ------------------------------------------


def test_tool_takes_a_pydantic_model_parameter_and_shows_its_schema() -> None:
    """Item 4: a Pydantic model parameter is schemed by Pydantic, $defs merged."""

    @tool
    def place(order: Order) -> str:
        """Place an order."""
        return order.customer

    props = place.input_schema["properties"]
    assert ["order"] == place.input_schema["required"]
    assert {"customer", "items"} == set(props["order"]["properties"])
    assert "#/$defs/Item" == props["order"]["properties"]["items"]["items"]["$ref"]
    item = place.input_schema["$defs"]["Item"]
    assert "the stock-keeping unit" == item["properties"]["sku"]["description"]
    assert 1 == item["properties"]["quantity"]["minimum"]


async def test_tool_hands_execute_the_validated_pydantic_model() -> None:
    """Item 4: execute receives the model instance Pydantic validated."""
    got: list[Any] = []

    @tool
    def place(order: Order) -> str:
        """Place an order."""
        got.append(order)
        return f"placed for {order.customer}"

    model = one_call(
        "place", order={"customer": "ada", "items": [{"sku": "A1", "quantity": 2}]}
    )
    agent = Agent.create(provider=model, model="m").tool(place).build()

    assert "Done." == await agent.run("order")
    assert [Order(customer="ada", items=[Item(sku="A1", quantity=2)])] == got
    assert "placed for ada" == tool_read(model)


def test_pydantic_issues_name_the_nested_path_and_the_rule() -> None:
    """Item 4/G55: a nested Pydantic failure names its path and its error type."""

    @tool
    def place(order: Order) -> str:
        """Place an order."""
        return "placed"

    kwargs, issues = place.validate(
        {"order": {"customer": "ada", "items": [{"sku": "A1", "quantity": 0}, {}]}}
    )

    assert None is kwargs
    assert [
        "'order.items[0].quantity': input should be greater than or equal to 1"
        " (greater_than_equal)",
        "'order.items[1].sku' is required but missing",
        "'order.items[1].quantity' is required but missing",
    ] == issues


def test_annotated_field_gives_a_description_and_a_checked_constraint() -> None:
    """Item 4: Annotated[..., Field(description=, ge=)] is described and enforced."""

    @tool
    def refund(
        order: int,
        amount: Annotated[float, pydantic.Field(description="dollars", ge=0)],
    ) -> str:
        """Refund an order."""
        return f"{order}:{amount}"

    amount = refund.input_schema["properties"]["amount"]
    assert ("dollars", 0) == (amount["description"], amount["minimum"])
    assert ({"order": 7, "amount": 2.5}, []) == refund.validate(
        {"order": 7, "amount": 2.5}
    )
    assert (
        None,
        ["'amount': input should be greater than or equal to 0 (greater_than_equal)"],
    ) == refund.validate({"order": 7, "amount": -1})


def test_annotated_msgspec_meta_gives_a_description_and_a_constraint() -> None:
    """Item 4: Annotated[..., msgspec.Meta(...)] is described and enforced too."""

    @tool
    def refund(amount: Annotated[int, msgspec.Meta(description="cents", ge=0)]) -> str:
        """Refund."""
        return str(amount)

    amount = refund.input_schema["properties"]["amount"]
    assert ("cents", 0) == (amount["description"], amount["minimum"])
    assert (None, ["'amount': expected `int` >= 0"]) == refund.validate({"amount": -5})


def test_args_section_describes_each_parameter_and_leaves_the_description() -> None:
    """Item 4/G58: a Google-style Args: section gives each property's description."""

    @tool
    def refund(order: int, amount: float, reason: str = "") -> str:
        """Refund an order.

        Args:
            order: the order number,
                as printed on the receipt.
            amount (float): how much to refund, in dollars.
            reason: why, for the ledger.

        Returns:
            A confirmation line.
        """
        return "ok"

    props = refund.input_schema["properties"]
    assert {
        "order": "the order number, as printed on the receipt.",
        "amount": "how much to refund, in dollars.",
        "reason": "why, for the ledger.",
    } == {k: v["description"] for k, v in props.items()}
    assert (
        "Refund an order.\n\nReturns:\n    A confirmation line." == refund.description
    )
    assert "" == props["reason"]["default"]


def test_pydantic_field_default_is_a_described_optional_parameter() -> None:
    """Item 4: ``x: int = Field(3, description=...)`` is an optional parameter."""

    @tool
    def page(size: int = pydantic.Field(3, description="rows", le=50)) -> int:
        """Page."""
        return size

    size = page.input_schema["properties"]["size"]
    assert ("rows", 50, 3) == (size["description"], size["maximum"], size["default"])
    assert [] == page.input_schema.get("required", [])
    assert ({}, []) == page.validate({})
    assert ({"size": 9}, []) == page.validate({"size": 9})


def test_msgspec_nested_issue_moves_its_path_into_the_name() -> None:
    """G55: a nested msgspec failure names the argument by its path."""

    @tool
    def ship(lines: list[Line]) -> str:
        """Ship."""
        return "shipped"

    assert (
        None,
        ["'lines[1].sku': expected `str`, got `int`"],
    ) == ship.validate({"lines": [{"sku": "A"}, {"sku": 3}]})


# -- Tool(...): JSON Schema in full ------------------------------------------------


def test_json_schema_rules_are_enforced_and_named() -> None:
    """Item 4/G55: minimum, pattern, format, nested required, items, extras."""
    runs: list[Any] = []
    t = Tool("order", "Order.", ORDER_SCHEMA, lambda **kw: runs.append(kw))

    kwargs, issues = t.validate(
        {
            "amount": -3,
            "currency": "usd",
            "customer": {"email": "not-an-email", "nick": "x"},
            "lines": [{"qty": "two"}],
            "rush": True,
        }
    )

    assert None is kwargs
    assert [
        "'amount': must be >= 0 (minimum)",
        "'currency': must match the pattern \"^[A-Z]{3}$\" (pattern)",
        "'customer.email': must be a valid email (format)",
        "'customer.name' is required but missing",
        "'customer.nick' is not allowed here (additionalProperties)",
        "'lines[0].sku' is required but missing",
        "'lines[0].qty': expected integer, got a str",
        "'rush' is not a parameter of this tool",
    ] == sorted(issues, key=_schema_order)
    assert [] == runs


def _schema_order(issue: str) -> int:
    order = ["'amount'", "'currency'", "'customer.email'", "'customer.name'"]
    order += ["'customer.nick'", "'lines[0].sku'", "'lines[0].qty'", "'rush'"]
    return next(i for i, key in enumerate(order) if issue.startswith(key))


def test_json_schema_passes_valid_arguments_unchanged() -> None:
    """Item 4: arguments that satisfy every rule reach execute as sent."""
    t = Tool("order", "Order.", ORDER_SCHEMA, lambda **kw: kw)
    args = {
        "amount": 10,
        "currency": "EUR",
        "customer": {"email": "ada@example.com", "name": "Ada"},
        "lines": [{"sku": "A1", "qty": 2}],
    }

    assert (args, []) == t.validate(args)


def test_json_schema_combinators_and_refs_are_followed() -> None:
    """Item 4: $ref into $defs, oneOf and maxItems are checked, named by keyword."""
    schema = {
        "type": "object",
        "$defs": {"code": {"type": "string", "maxLength": 4}},
        "properties": {
            "code": {"$ref": "#/$defs/code"},
            "target": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
            "tags": {"type": "array", "maxItems": 1, "uniqueItems": True},
        },
    }
    t = Tool("t", "T.", schema, lambda **kw: kw)

    assert (
        None,
        [
            "'code': must be at most 4 characters long (maxLength)",
            "'tags': must hold at most 1 items (maxItems)",
            "'tags': must not hold duplicate items (uniqueItems)",
            "'target': 1.5 is not valid under any of the given schemas (oneOf)",
        ],
    ) == (None, sorted(t.validate({"code": "ABCDE", "target": 1.5, "tags": [1, 1]})[1]))


async def test_a_broken_rule_is_what_the_model_reads() -> None:
    """G55: the model reads one line per broken rule, and the tool does not run."""
    runs: list[Any] = []
    t = Tool("order", "Order.", ORDER_SCHEMA, lambda **kw: runs.append(kw))
    model = one_call("order", amount=20_000, currency="EUR")
    agent = Agent.create(provider=model, model="m").tool(t).build()

    await agent.run("order")

    assert invalid("order", "'amount': must be <= 10000 (maximum)") == tool_read(model)
    assert [] == runs


def test_an_invalid_schema_is_refused_when_the_tool_is_made() -> None:
    """Item 4: Tool(...) with a schema that is not JSON Schema raises, naming it."""
    with pytest.raises(ValueError) as refused:
        Tool("bad", "Bad.", {"type": "objekt"}, lambda **kw: kw)

    assert str(refused.value).startswith(
        "Tool 'bad': input_schema is not a valid JSON schema ("
    )


async def test_an_mcp_tool_is_validated_by_its_server_s_schema_in_full() -> None:
    """Item 4: a tool brought by mcp_client enforces minimum and pattern client-side."""
    remote_runs: list[Any] = []
    served = mcp_serve(
        [Tool("order", "Order.", ORDER_SCHEMA, lambda **kw: remote_runs.append(kw))],
        name="shop",
    )
    async with mcp_client("shop", server=served) as tools:
        (order,) = tools
        kwargs, issues = order.validate({"amount": -1, "currency": "EURO"})

    assert None is kwargs
    assert [
        "'amount': must be >= 0 (minimum)",
        "'currency': must match the pattern \"^[A-Z]{3}$\" (pattern)",
    ] == issues
    assert [] == remote_runs
