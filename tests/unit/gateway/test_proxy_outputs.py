"""The proxy's output schemas (P27) are listed from the upstream once.

Pattern: ``Outputs`` (gateway/proxy/_outputs.py) asked for schemas by many
         first calls at once, against an upstream that counts its
         ``tools/list`` requests and answers after a yield (as a real one does).
Role:    the single-flight of the schema listing; the differential lane tests
         (test_proxy_lane.py) compare SERVER spans, which a listing per
         concurrent first call made depend on timing.
Emits:   nothing.

Laws: P27 (each answer judged by the schema last listed), P25 (the upstream
sees what a client of the proxy caused, no more).
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp.types as types

from helmlog.gateway.proxy._outputs import Outputs

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}


class _CountingUpstream:
    """Answers ``tools/list`` with two tools, after giving the loop a turn."""

    def __init__(self) -> None:
        self.lists = 0

    async def request(self, request: Any, result_type: Any) -> Any:
        assert isinstance(request, types.ListToolsRequest)
        self.lists += 1
        await asyncio.sleep(0)
        tools = [
            types.Tool(name="a", input_schema={"type": "object"}, output_schema=SCHEMA),
            types.Tool(name="b", input_schema={"type": "object"}),
        ]
        return result_type(tools=tools)


async def test_p27_a_burst_of_first_calls_lists_the_upstream_once() -> None:
    outputs = Outputs()
    upstream = _CountingUpstream()
    got = await asyncio.gather(
        *(outputs.schema(name, upstream) for name in ["a", "b", "a", "c"] * 5)  # type: ignore[arg-type]
    )
    assert upstream.lists == 1
    assert [g is None for g in got[:4]] == [False, True, False, True]
    assert outputs.known("c")  # listed whole: an unknown tool has no schema


async def test_p27_a_forgotten_listing_is_listed_again_once() -> None:
    outputs = Outputs()
    upstream = _CountingUpstream()
    await outputs.schema("a", upstream)  # type: ignore[arg-type]
    outputs.forget()  # list_changed
    await asyncio.gather(*(outputs.schema("a", upstream) for _ in range(5)))  # type: ignore[arg-type]
    assert upstream.lists == 2
