"""S1–S6 — serving governed tools over MCP: the chain goes to the served surface.

Pattern: law-named unit tests that speak real MCP to an ``mcp_serve`` result
         over the SDK's in-memory transport, and read the serving session's
         stream from its store.
Role:    unit tests for ``gateway/_serve.py``.
Emits:   nothing.

Laws: S1 (both moments, same walker, same laws: G6, G7, G20), S2 (the serving
context), S3 (serving order; the tool receives exactly what the client sent),
S4 (what the client receives, the raised tool's after-tool walk included), S5
(no ``check_in``; ``ask_human`` is a tool error), S6 (rows and facts in one
stream per MCP session; a failed append is an MCP error with
``LEDGER_UNAVAILABLE``).

Why through MCP rather than calling ``ServedTools.call``: what the laws govern
is what a client receives, so the tests are clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError

from helmlog import Tool, ToolMiddleware, allow, ask, ask_human, deny, tool
from helmlog.events import (
    MemoryEventStore,
    MiddlewareDecision,
    MiddlewareDecisionEvent,
    StoredEvent,
    decode_event,
)
from helmlog.gateway import mcp_serve

from .helpers import call, connected, rows, stored, text_of

REQUIRED_WORD = {
    "type": "object",
    "properties": {"word": {"type": "string"}},
    "required": ["word"],
}


class Ran:
    """Records every call a tool received."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def echo(self, source: str | None = None, raises: str | None = None) -> Tool:
        def execute(**kwargs: Any) -> Any:
            self.calls.append(kwargs)
            if raises is not None:
                raise RuntimeError(raises)
            return f"echo {kwargs.get('word')}"

        return Tool("echo", "Echo a word.", REQUIRED_WORD, execute, source)


def row(
    middleware: str,
    moment: str,
    tool_call_id: str,
    outcome: str = "allow",
    *,
    changed: bool = False,
    why: str | None = None,
    before: Any = None,
    after: Any = None,
    tool_name: str = "echo",
) -> MiddlewareDecision:
    return MiddlewareDecision(
        middleware=middleware,
        moment=moment,
        at="tool",
        iteration=0,
        outcome=outcome,
        changed=changed,
        tool_name=tool_name,
        tool_call_id=tool_call_id,
        why=why,
        before=before,
        after=after,
    )


def both_hooks(name: str, order: list[str]) -> ToolMiddleware:
    def on_call(_c: Any) -> Any:
        order.append(f"before:{name}")
        return allow()

    def on_result(_r: Any) -> Any:
        order.append(f"after:{name}")
        return allow()

    return ToolMiddleware(name=name, on_tool_call=on_call, on_tool_result=on_result)


# -- S1 ---------------------------------------------------------------------


async def test_s1_both_moments_run_on_the_served_surface_as_an_onion() -> None:
    """S1: before-tool in chain order, after-tool in reverse (G20), one row each."""
    order: list[str] = []
    served = mcp_serve(
        [Ran().echo()],
        name="desk",
        tool_middleware=[both_hooks("outer", order), both_hooks("inner", order)],
    )
    assert ("echo hi", False) == await call(served, "echo", {"word": "hi"})
    assert ["before:outer", "before:inner", "after:inner", "after:outer"] == order
    assert [
        row("outer", "before-tool", "mcp-desk-1"),
        row("inner", "before-tool", "mcp-desk-1"),
        row("inner", "after-tool", "mcp-desk-1"),
        row("outer", "after-tool", "mcp-desk-1"),
    ] == await rows(served)


async def test_s1_a_link_that_throws_is_a_denial_and_the_tool_never_runs() -> None:
    """S1, G7: a throw is a denial with ``middleware '<name>' threw: <text>``."""
    ran = Ran()

    def explode(_c: Any) -> Any:
        raise RuntimeError()

    served = mcp_serve(
        [ran.echo()],
        name="desk",
        tool_middleware=[ToolMiddleware(name="fragile", on_tool_call=explode)],
    )
    expected = "middleware 'fragile' threw: RuntimeError"
    assert (expected, True) == await call(served, "echo", {"word": "hi"})
    assert [] == ran.calls
    assert [
        row("fragile", "before-tool", "mcp-desk-1", "deny", why=expected)
    ] == await rows(served)


async def test_s1_a_non_outcome_is_a_denial_naming_its_shape() -> None:
    """S1, G6: a hook returning a dict is a denial, never an allow."""
    served = mcp_serve(
        [Ran().echo()],
        name="desk",
        tool_middleware=[ToolMiddleware(name="sloppy", on_tool_call=lambda c: {})],
    )
    expected = (
        "middleware 'sloppy' returned a dict, which is not allow(), deny() or ask()"
    )
    assert (expected, True) == await call(served, "echo", {"word": "hi"})


# -- S2 ---------------------------------------------------------------------


def context_spy(seen: list[Any]) -> ToolMiddleware:
    def on_call(c: Any) -> Any:
        seen.append(c)
        return allow()

    def on_result(r: Any) -> Any:
        seen.append(r)
        return allow()

    return ToolMiddleware(name="spy", on_tool_call=on_call, on_tool_result=on_result)


async def test_s2_the_serving_context_numbers_calls_per_server() -> None:
    """S2: ``mcp-<name>-<n>`` counts per server (across sessions), iteration 0,
    history ``()``, identity ``None`` in memory, ``tool_source`` the tool's own."""
    seen: list[Any] = []
    served = mcp_serve(
        [Ran().echo(source="upstream")],
        name="desk",
        tool_middleware=[context_spy(seen)],
    )
    async with connected(served) as session:
        await session.call_tool("echo", {"word": "a"})
        await session.call_tool("echo", {"word": "b"})
    await call(served, "echo", {"word": "c"})
    assert [
        ("mcp-desk-1", "upstream", 0, (), None),
        ("mcp-desk-1", "upstream", 0, (), None),
        ("mcp-desk-2", "upstream", 0, (), None),
        ("mcp-desk-2", "upstream", 0, (), None),
        ("mcp-desk-3", "upstream", 0, (), None),
        ("mcp-desk-3", "upstream", 0, (), None),
    ] == [
        (c.tool_call_id, c.tool_source, c.iteration, c.history, c.identity)
        for c in seen
    ]


async def test_s2_an_own_tool_has_no_source() -> None:
    """S2, G78: a ``@tool`` served here is seen with ``tool_source=None``."""

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    seen: list[Any] = []
    served = mcp_serve([ping], name="desk", tool_middleware=[context_spy(seen)])
    assert ("pong", False) == await call(served, "ping")
    assert [None, None] == [c.tool_source for c in seen]


async def test_s2_identity_is_what_the_transport_resolved() -> None:
    """S2: an authenticated caller's token becomes the context's identity."""
    seen: list[Any] = []
    served = mcp_serve([Ran().echo()], name="desk", tool_middleware=[context_spy(seen)])
    user = AuthenticatedUser(AccessToken(token="t", client_id="ops-bot", scopes=["r"]))
    reset = auth_context_var.set(user)
    try:
        await call(served, "echo", {"word": "a"})
    finally:
        auth_context_var.reset(reset)
    expected = {"client_id": "ops-bot", "scopes": ["r"]}
    assert [expected, expected] == [c.identity for c in seen]


# -- S3 ---------------------------------------------------------------------


async def test_s3_the_tool_receives_exactly_what_the_client_sent() -> None:
    """S3: with no link changing them, the tool gets the client's arguments."""
    ran = Ran()
    seen: list[Any] = []
    served = mcp_serve([ran.echo()], name="desk", tool_middleware=[context_spy(seen)])
    assert ("echo hi", False) == await call(served, "echo", {"word": "hi"})
    assert [{"word": "hi"}] == ran.calls


async def test_s3_links_see_an_empty_object_when_the_client_sent_none() -> None:
    """S3: no arguments reach the links as ``{}``; validation then refuses them."""
    seen: list[Any] = []
    served = mcp_serve([Ran().echo()], name="desk", tool_middleware=[context_spy(seen)])
    text = await call(served, "echo", None)
    assert [{}] == [c.args for c in seen]
    assert (
        "Invalid arguments for tool 'echo' — the call was not executed."
        "\n- 'word' is required but missing"
        "\nFix the arguments to match the tool's input schema and call it again.",
        True,
    ) == text


async def test_s3_validation_judges_the_arguments_the_chain_produced() -> None:
    """S3: validation runs after the before-tool walk, on its output."""
    ran = Ran()
    breaker = ToolMiddleware(
        name="breaker", on_tool_call=lambda c: allow({"other": 1}, "renamed")
    )
    served = mcp_serve([ran.echo()], name="desk", tool_middleware=[breaker])
    assert (
        "Invalid arguments for tool 'echo' — the call was not executed."
        "\n- 'word' is required but missing"
        "\nFix the arguments to match the tool's input schema and call it again.",
        True,
    ) == await call(served, "echo", {"word": "hi"})
    assert [] == ran.calls


async def test_s3_a_repairing_link_is_what_the_tool_receives() -> None:
    """S3: a before-tool transform replaces the arguments the tool runs with."""
    ran = Ran()
    fixer = ToolMiddleware(
        name="fixer", on_tool_call=lambda c: allow({"word": "fixed"}, "repair")
    )
    served = mcp_serve([ran.echo()], name="desk", tool_middleware=[fixer])
    assert ("echo fixed", False) == await call(served, "echo", {"wrd": "hi"})
    assert [{"word": "fixed"}] == ran.calls


async def test_s3_an_unknown_tool_is_refused_before_the_chain() -> None:
    """S3, G53: no link runs and no row is filed for an unknown tool."""
    seen: list[Any] = []
    served = mcp_serve([Ran().echo()], name="desk", tool_middleware=[context_spy(seen)])
    assert ("Unknown tool: nope. Available tools: echo.", True) == await call(
        served, "nope", {}
    )
    assert [] == seen
    assert [] == await served.store.sessions()


async def test_s3_credentials_come_after_validation_and_refuse_unresolved() -> None:
    """S3, G57: invalid arguments are named first; an unresolved secret refuses."""
    got: list[dict[str, Any]] = []

    @tool(credentials=["api_key"])
    def fetch(url: str, credentials: dict[str, str]) -> str:
        """Fetch."""
        got.append(credentials)
        return "fetched"

    served = mcp_serve([fetch], name="desk")
    invalid = await call(served, "fetch", {})
    assert (
        "Invalid arguments for tool 'fetch' — the call was not executed."
        "\n- 'url' is required but missing"
        "\nFix the arguments to match the tool's input schema and call it again.",
        True,
    ) == invalid
    assert (
        "Tool 'fetch' was not executed: its credential 'api_key' could not be "
        "resolved.",
        True,
    ) == await call(served, "fetch", {"url": "u"})
    assert [] == got
    resolving = mcp_serve([fetch], name="desk", credentials={"api_key": "s3cret"}.get)
    assert ("fetched", False) == await call(resolving, "fetch", {"url": "u"})
    assert [{"api_key": "s3cret"}] == got


# -- S4 ---------------------------------------------------------------------


async def test_s4_a_before_tool_denial_is_a_tool_error_with_the_reason() -> None:
    """S4: deny → ``is_error=True`` with the reason; the tool never ran."""
    ran = Ran()
    no = ToolMiddleware(name="no", on_tool_call=lambda c: deny("not today"))
    served = mcp_serve([ran.echo()], name="desk", tool_middleware=[no])
    assert ("not today", True) == await call(served, "echo", {"word": "hi"})
    assert [] == ran.calls
    assert [
        row("no", "before-tool", "mcp-desk-1", "deny", why="not today")
    ] == await rows(served)


async def test_s4_an_ask_is_a_tool_error_naming_the_pending_ask() -> None:
    """S4: an ask is ``is_error=True`` naming the middleware, the question and
    the pending ask; the tool has not run.

    Changed by issue 26 item 4 (newer than the old S4): the ask is no longer
    a denial ("there is no pause here to carry that ask") but the session's
    ordinary durable pause, which a person decides (test_serve_tasks.py).
    """
    ran = Ran()
    asker = ToolMiddleware(name="four-eyes", on_tool_call=lambda c: ask("approve?"))
    served = mcp_serve([ran.echo()], name="desk", tool_middleware=[asker])
    text, is_error = await call(served, "echo", {"word": "hi"})
    ask_id = f"{served.session_ids[-1]}/mcp-desk-1"
    assert is_error
    assert text.startswith(
        f"middleware 'four-eyes' asked a person to decide: approve? The call "
        f"waits as ask '{ask_id}'"
    )
    assert [] == ran.calls


async def test_s4_an_after_tool_transform_is_what_the_client_receives() -> None:
    """S4, G25: the transformed result, serialized as compact JSON."""
    wrap = ToolMiddleware(
        name="wrap", on_tool_result=lambda r: allow({"said": r.result, "n": 1}, "wrap")
    )
    served = mcp_serve([Ran().echo()], name="desk", tool_middleware=[wrap])
    assert ('{"said":"echo hi","n":1}', False) == await call(
        served, "echo", {"word": "hi"}
    )
    assert [
        row(
            "wrap",
            "after-tool",
            "mcp-desk-1",
            changed=True,
            why="wrap",
            before="echo hi",
            after={"said": "echo hi", "n": 1},
        )
    ] == await rows(served)


async def test_s4_an_after_tool_denial_hides_the_result() -> None:
    """S4, G23: ``is_error=True`` with the reason, never the result."""
    ran = Ran()
    hide = ToolMiddleware(name="hide", on_tool_result=lambda r: deny("withheld"))
    served = mcp_serve([ran.echo()], name="desk", tool_middleware=[hide])
    assert ("withheld", True) == await call(served, "echo", {"word": "hi"})
    assert [{"word": "hi"}] == ran.calls


async def test_s4_a_tool_that_raises_still_gets_the_after_tool_walk() -> None:
    """S4 Fix: the walk sees ``error=True`` and the client the walk's verdict."""
    seen: list[tuple[Any, bool]] = []

    def scrub(r: Any) -> Any:
        seen.append((r.result, r.error))
        return allow("the tool failed", "scrubbed")

    served = mcp_serve(
        [Ran().echo(raises="db password is hunter2")],
        name="desk",
        tool_middleware=[ToolMiddleware(name="scrub", on_tool_result=scrub)],
    )
    assert ("the tool failed", True) == await call(served, "echo", {"word": "hi"})
    assert [("db password is hunter2", True)] == seen


async def test_s4_a_raise_with_no_result_link_reads_its_error_text() -> None:
    """S4, G18: with no after-tool link the client gets the error text as an error."""
    served = mcp_serve([Ran().echo(raises="broken")], name="desk")
    assert ("broken", True) == await call(served, "echo", {"word": "hi"})


# -- S5 ---------------------------------------------------------------------


def test_s5_a_tool_that_declares_check_in_cannot_be_served() -> None:
    """S5: ``ValueError`` naming the tool; nothing could carry its question."""
    gated = Tool(
        "wire", "Wire money.", {"type": "object"}, lambda: "sent", check_in=True
    )
    with pytest.raises(ValueError) as raised:
        mcp_serve([gated], name="desk")
    assert (
        "mcp_serve cannot serve tool 'wire': it declares check_in, and MCP has no "
        "pause to carry its question"
    ) == str(raised.value)


async def test_s5_ask_human_inside_a_served_tool_is_a_tool_error() -> None:
    """S5: ``ask_human`` ends the call as ``is_error=True`` with the exact text."""

    @tool
    def consult(topic: str) -> str:
        """Consult a person."""
        ask_human(f"what about {topic}?")

    served = mcp_serve([consult], name="desk")
    assert (
        "ask_human: there is no pause here to carry the question: what about tax?",
        True,
    ) == await call(served, "consult", {"topic": "tax"})


# -- S6 ---------------------------------------------------------------------


async def test_s6_every_decision_is_a_row_stored_once_and_its_fact_published() -> None:
    """S6, G49, R4: rows in the session stream; one fact per row, at its seq."""
    order: list[str] = []
    served = mcp_serve(
        [Ran().echo()], name="desk", tool_middleware=[both_hooks("audit", order)]
    )
    await call(served, "echo", {"word": "hi"})
    events = await stored(served)
    assert ["decision.filed", "tool.dispatched", "decision.filed"] == [
        e.type for e in events
    ]
    facts = await served.store.read_facts()
    assert [(served.session_ids[0], 1), (served.session_ids[0], 3)] == [
        (f.session_id, f.seq) for f in facts
    ]
    assert [("audit", "before-tool"), ("audit", "after-tool")] == [
        (e.middleware, e.moment)
        for e in (decode_event(f.data) for f in facts)
        if isinstance(e, MiddlewareDecisionEvent)
    ]


async def test_s6_one_stream_per_mcp_session() -> None:
    """S6: two MCP sessions file into two streams; one session's calls share one."""
    served = mcp_serve(
        [Ran().echo()],
        name="desk",
        tool_middleware=[ToolMiddleware(name="audit", on_tool_call=lambda c: allow())],
    )
    async with connected(served) as session:
        await session.call_tool("echo", {"word": "a"})
        await session.call_tool("echo", {"word": "b"})
    await call(served, "echo", {"word": "c"})
    assert 2 == len(set(served.session_ids))
    assert sorted(served.session_ids) == sorted(await served.store.sessions())
    assert [
        row("audit", "before-tool", "mcp-desk-1"),
        row("audit", "before-tool", "mcp-desk-2"),
    ] == await rows(served, 0)
    assert [row("audit", "before-tool", "mcp-desk-3")] == await rows(served, 1)


class FailingStore(MemoryEventStore):
    """A store whose appends fail while ``failing`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = True

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        if self.failing:
            raise OSError("disk full")
        return await super().append_sealed(session_id, records, expected_seq)


async def test_s6_a_failed_append_refuses_the_call_with_ledger_unavailable() -> None:
    """S6, R5, P11: an MCP error with ``data.rejection_reason``; the tool never ran."""
    ran = Ran()
    store = FailingStore()
    audit = ToolMiddleware(name="audit", on_tool_call=lambda c: allow())
    served = mcp_serve([ran.echo()], name="desk", tool_middleware=[audit], store=store)
    async with connected(served) as session:
        with pytest.raises(MCPError) as raised:
            await session.call_tool("echo", {"word": "hi"})
        assert {"rejection_reason": "LEDGER_UNAVAILABLE"} == raised.value.error.data
        assert [] == ran.calls
        store.failing = False
        assert ("echo again", False) == text_of(
            await session.call_tool("echo", {"word": "again"})
        )
    assert [{"word": "again"}] == ran.calls
    assert [row("audit", "before-tool", "mcp-desk-2")] == await rows(served)


async def test_s6_a_failed_append_after_the_tool_withholds_its_result() -> None:
    """S6, R5: an after-tool verdict whose rows were not recorded is not released."""
    store = FailingStore()
    wrap = ToolMiddleware(name="wrap", on_tool_result=lambda r: allow("wrapped", "w"))
    served = mcp_serve([Ran().echo()], name="desk", tool_middleware=[wrap], store=store)
    async with connected(served) as session:
        with pytest.raises(MCPError) as raised:
            await session.call_tool("echo", {"word": "hi"})
    assert {"rejection_reason": "LEDGER_UNAVAILABLE"} == raised.value.error.data
