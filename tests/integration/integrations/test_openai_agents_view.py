"""The Agents SDK adapter groups a run's growing input once, with the same result.

Pattern: the SDK's own input items (plain dicts, as ``Runner`` hands them to
         ``call_model_input_filter``) grown call by call, grouped through the
         run's kept grouping (``_regrouped``) and from scratch (``_groups``);
         the model's view built from either must be the same.
Role:    tests for ``helmlog.integrations.openai_agents``'s model view.
Emits:   nothing.

Laws: issue 27 item 2 (the window moment: the model sees helmlog's plan, an
admitted input in place of the user's), item 5 (one record), and the bench
figure (grouping the whole history before every model call was the
adapter's largest cost per call).
"""

from __future__ import annotations

from typing import Any

from helmlog.events import Message, ToolCallRequest
from helmlog.integrations import openai_agents as oa


def _history(n: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "look up c0..c9"}]
    for i in range(n):
        items.append(
            {
                "type": "function_call",
                "call_id": f"c{i}",
                "name": "lookup_order",
                "arguments": f'{{"order_id":"{i}"}}',
            }
        )
        items.append(
            {"type": "function_call_output", "call_id": f"c{i}", "output": f"order {i}"}
        )
    return items


def _plan(items: list[dict[str, Any]], user: str) -> tuple[Message, ...]:
    grouped = [m for m, _ in oa._groups(items) if m is not None]
    return (Message(role="user", content=user), *grouped[1:])


def test_a_run_s_kept_grouping_gives_what_grouping_afresh_gives() -> None:
    """Issue 27 item 2: each call's view equals the view grouped from scratch,
    and the admitted input replaces the user's at every call."""
    run = oa._Run(session=None)  # type: ignore[arg-type]
    for n in range(6):
        items = _history(n)
        plan = _plan(items, "look up [scrubbed]")
        kept = oa._model_view(plan, items, run)
        fresh = oa._model_view(plan, items)
        assert kept == fresh
        assert kept[0] == {"role": "user", "content": "look up [scrubbed]"}
        assert kept[1:] == items[1:]
        assert run.grouped is not None and run.grouped.head is not None
        assert run.grouped.count == len(items)


def test_an_input_that_does_not_extend_the_last_is_grouped_again() -> None:
    """Issue 27 item 2: a changed earlier item (a trimmed or rewritten
    history) is never read from the kept grouping."""
    run = oa._Run(session=None)  # type: ignore[arg-type]
    items = _history(3)
    oa._model_view(_plan(items, "look up c0..c9"), items, run)
    changed = [dict(item) for item in items]
    changed[2]["output"] = "order 0, corrected"
    plan = _plan(changed, "look up c0..c9")
    view = oa._model_view(plan, changed, run)
    assert view == changed
    assert run.grouped is not None
    tool = [m for m, _ in run.grouped.groups if m is not None][2]
    assert tool == Message(
        role="tool",
        content="order 0, corrected",
        tool_call_id="c0",
        tool_name="lookup_order",
    )


def test_a_last_item_whose_json_grew_in_place_is_grouped_again() -> None:
    """Issue 27 item 2: the kept grouping is continued only when the last
    input's items are whole elements of this one's JSON array; a last item
    whose text this one extends (a number, a string grown at its end) is
    not one of them, and its message is grouped again."""
    run = oa._Run(session=None)  # type: ignore[arg-type]
    items: list[Any] = [*_history(1), {"role": "user", "content": "again"}]
    oa._model_view(_plan(items, "look up c0..c9"), items, run)
    grown = [*items[:-1], {"role": "user", "content": "again, and more"}, items[0]]
    plan = _plan(grown, "look up c0..c9")
    assert oa._model_view(plan, grown, run) == oa._model_view(plan, grown)
    assert run.grouped is not None
    users = [m for m, _ in run.grouped.groups if m is not None and m.role == "user"]
    assert [m.content for m in users] == [
        "look up c0..c9",
        "again, and more",
        "look up c0..c9",
    ]


def test_items_that_are_not_json_are_grouped_in_full_every_time() -> None:
    """Issue 27 item 2: an item the cache cannot key (not JSON) still groups."""
    run = oa._Run(session=None)  # type: ignore[arg-type]

    class Opaque:
        type = "reasoning"
        role = None

    items: list[Any] = [*_history(1), Opaque()]
    plan = _plan(_history(1), "look up c0..c9")
    view = oa._model_view(plan, items, run)
    assert view == items
    assert run.grouped is not None and run.grouped.head is None
    calls = [m for m, _ in run.grouped.groups if m is not None][1].tool_calls
    assert calls == (
        ToolCallRequest(id="c0", name="lookup_order", args={"order_id": "0"}),
    )


def test_a_pair_found_equal_is_compared_again_once_the_plan_changes() -> None:
    """Issue 27 item 2 and the bench figure: the run remembers which grouped
    message equals which planned one (the fold's history keeps its objects
    from call to call, so nothing is compared twice), yet a plan that puts
    another message at a position (a redaction, a window) is honoured."""
    run = oa._Run(session=None)  # type: ignore[arg-type]
    items = _history(2)
    plan = _plan(items, "look up c0..c9")  # the record's objects, kept
    assert items == oa._model_view(plan, items, run)
    assert items == oa._model_view(plan, items, run)  # remembered, the same
    redacted = Message(
        role="tool", content="[redacted]", tool_call_id="c0", tool_name="lookup_order"
    )
    changed = (*plan[:2], redacted, *plan[3:])
    view = oa._model_view(changed, items, run)
    output = {"type": "function_call_output", "call_id": "c0", "output": "[redacted]"}
    assert output == view[2]
    assert view[:2] == items[:2] and view[3:] == items[3:]
    assert items == oa._model_view(plan, items, run)  # the record's again


def test_an_unchanged_history_is_handed_back_as_a_new_list_of_the_sdk_s_items() -> None:
    """Issue 27 item 2 and the bench figure: where every message equals its
    planned one, the view is the SDK's own items in order (provider ids and
    items helmlog has no message for stay), in a list of its own, and the
    run's message count matches a grouping from scratch at every call."""
    run = oa._Run(session=None)  # type: ignore[arg-type]
    for n in range(4):
        items: list[Any] = [{"type": "reasoning", "id": "r0"}, *_history(n)]
        plan = _plan(_history(n), "look up c0..c9")
        view = oa._model_view(plan, items, run)
        assert view == items and view is not items
        assert all(a is b for a, b in zip(view, items, strict=True))
        assert run.grouped is not None
        fresh = [m for m, _ in oa._groups(items) if m is not None]
        assert run.grouped.messages == len(fresh) == len(plan)
