"""The refund desk: the governed, scripted scenario ``helmlog demo`` runs.

Pattern: a worked example — five rules, one at each moment of the loop, and
         a three-turn conversation written in advance that trips every one.
Role:    the face; the first governed agent a new user reads. The model is
         the script (``DemoModel``), so it needs no network, no key and no
         server.
Emits:   through the agent, into the event store it is given;
         ``decision_table`` and ``render_transcript`` draw the result.

Laws it shows: G71 (every moment: input, before-tool, after-tool, window,
output), G14 (the ceiling's deny stops the before-tool walk before four-eyes
runs), G15 (a denial is data: the model reads the reason and the turn goes
on), G59–G62 (four-eyes pauses the run; ``dana@ops`` approves and the call
runs), G22 (the PII strip rewrites what the model reads), G32–G34 (the SSN
scrub rewrites the message before anything is committed, on every turn),
G39 (the codename scrub's verdict is the answer), G80 (the window files its
own records, never rows).

Why the script checks itself: a demo that silently stops tripping a rule
would still exit 0 and teach the wrong thing, so a turn that ends otherwise
than written, or a moment that never spoke, raises ``DemoError`` and the CLI
exits non-zero.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Callable
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from helmlog import (
    LOOP_MOMENTS,
    Agent,
    Allow,
    Ask,
    CheckInDecision,
    Deny,
    MessageContext,
    MessageMiddleware,
    SessionState,
    ToolCallContext,
    ToolMiddleware,
    ToolResultContext,
    allow,
    ask,
    check_in_approved,
    deny,
    is_ask_pause,
    sliding_window,
    tool,
)
from helmlog.events import EventStore, WindowCompacted, watched
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest


class DemoError(RuntimeError):
    """The scripted conversation did not go the way it is written."""


# -- the rules: one per moment ----------------------------------------------

REFUND_CEILING = 10_000
FOUR_EYES_ABOVE = 500
KEEP_RECENT_TURNS = 2

SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
CODENAME = re.compile(r"\bProject Bluebird\b", re.IGNORECASE)


def scrub_ssns(msg: MessageContext) -> Allow:
    """Input: mask social security numbers before the model or history sees them."""
    if not SSN.search(msg.content):
        return allow()
    masked = SSN.sub("[SSN removed]", msg.content)
    return allow(masked, "masked a social security number")


def cap_refunds(call: ToolCallContext) -> Allow | Deny:
    """Before-tool: refunds over $10,000 are refused; they go to the finance desk."""
    if float(call.args["amount"]) > REFUND_CEILING:
        return deny(f"refunds over ${REFUND_CEILING:,} go to the finance desk")
    return allow()


def needs_second_person(call: ToolCallContext) -> Allow | Ask:
    """Before-tool: refunds over $500 wait until a second person approves them."""
    amount = float(call.args["amount"])
    if amount <= FOUR_EYES_ABOVE:
        return allow()
    return ask(
        f"Refund ${amount:,.2f} on order {call.args['order']}? "
        f"Refunds over ${FOUR_EYES_ABOVE} need a second person.",
        detail={"order": call.args["order"], "amount": amount},
    )


def mask_emails(result: ToolResultContext) -> Allow:
    """After-tool: mask email addresses in a tool's result before the model reads it."""
    if not isinstance(result.result, str) or not EMAIL.search(result.result):
        return allow()
    return allow(EMAIL.sub("[email removed]", result.result), "masked an email address")


def hide_codenames(msg: MessageContext) -> Allow:
    """Output: internal project codenames never reach the customer."""
    if not CODENAME.search(msg.content):
        return allow()
    rewritten = CODENAME.sub("our goodwill programme", msg.content)
    return allow(rewritten, "rewrote an internal codename")


ssn_scrub = MessageMiddleware(name="ssn-scrub", on_message=scrub_ssns)
refund_ceiling = ToolMiddleware(name="refund-ceiling", on_tool_call=cap_refunds)
four_eyes = ToolMiddleware(name="four-eyes", on_tool_call=needs_second_person)
pii_strip = ToolMiddleware(name="pii-strip", on_tool_result=mask_emails)
codename_scrub = MessageMiddleware(name="codename-scrub", on_message=hide_codenames)

# -- the tool and the agent -------------------------------------------------

CUSTOMER_EMAIL = "ana.ruiz@example.com"


@tool
def refund(order: int, amount: float) -> str:
    """Refund an order to the customer's card and email them a receipt."""
    return f"Refunded ${amount:,.2f} on order {order}; receipt to {CUSTOMER_EMAIL}."


SYSTEM = "You run the refund desk: refund what the rules allow, explain the rest."


def build_agent(store: EventStore, provider: Any) -> Agent:
    """The refund-desk agent: every rule attached at its moment by ``.act()``."""
    return (
        Agent.create(provider=provider, model="scripted", store=store)
        .system(SYSTEM)
        .tool(refund)
        .act(
            input=[ssn_scrub],
            before_tool=[refund_ceiling, four_eyes],
            after_tool=[pii_strip],
            window=sliding_window(keep_recent_turns=KEEP_RECENT_TURNS),
            output=[codename_scrub],
        )
        .build()
    )


# -- the conversation, written in advance -----------------------------------


def refund_call(call_id: str, order: int, amount: float) -> Reply:
    """A model reply that calls ``refund`` once."""
    args = {"order": order, "amount": amount}
    return Reply(tool_calls=[ToolCallRequest(id=call_id, name="refund", args=args)])


@dataclasses.dataclass(frozen=True)
class Turn:
    """What the customer says, what the scripted model replies, what must happen."""

    customer: str
    model: tuple[Reply | str, ...]
    pauses: bool = False


TURNS = (
    # The SSN scrub rewrites the message; $120 passes both before-tool rules;
    # the PII strip masks the receipt's email address.
    Turn(
        customer="Hi, Ana Ruiz here (SSN 123-45-6789). Order 1001 arrived "
        "broken: please refund the $120.",
        model=(
            refund_call("call-1", order=1001, amount=120),
            "Done: $120.00 is back on your card for order 1001.",
        ),
    ),
    # Over the ceiling: refused before four-eyes is even asked. The window
    # engages from here on: the history now holds more than two turns.
    Turn(
        customer="Thanks! Order 1002 too: the $25,000 espresso machine never came.",
        model=(
            refund_call("call-2", order=1002, amount=25_000),
            "I can't refund $25,000 here: that goes to the finance desk, and "
            "I've flagged order 1002 for them.",
        ),
    ),
    # $800 pauses for a second person; dana@ops approves and the refund runs.
    # The codename scrub rewrites the answer.
    Turn(
        customer="OK. And order 1003, the $800 grinder, came without its burrs.",
        model=(
            refund_call("call-3", order=1003, amount=800),
            "Refunded $800.00 on order 1003 under Project Bluebird; a second "
            "person signed it off.",
        ),
        pauses=True,
    ),
)

APPROVER = "dana@ops"
APPROVAL_NOTE = "customer verified by phone"


def the_approval() -> CheckInDecision:
    """What the second person decides when four-eyes asks."""
    return check_in_approved(by=APPROVER, note=APPROVAL_NOTE)


# -- running it -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DemoSession:
    """One finished session: its id, its folded state, and what was said.

    ``timeline`` is the stream's order of ledger rows and window records
    (``"row"``, ``"window"``), so the table can show each where it happened.
    """

    session_id: str
    state: SessionState
    transcript: tuple[tuple[str, str], ...]
    timeline: tuple[str, ...]


TIMELINE_KINDS = {
    "middleware.decision": "row",
    "window.compacted": "window",
}


def reply_for(request: ProviderRequest) -> Reply | str:
    """The script's reply for what the model is sent: the turn is the last
    customer message, the step whether a tool result follows it."""
    messages = request.messages
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    said = messages[last_user].content
    for turn in TURNS:
        if SSN.sub("[SSN removed]", turn.customer) == said:
            answered = any(m.role == "tool" for m in messages[last_user:])
            return turn.model[1 if answered else 0]
    raise DemoError(f"no turn of the demo says {said!r}")


class DemoModel:
    """The script as a model that answers from what it is sent, keeping
    nothing between calls.

    Why not ``scripted(replies)``: that pops its replies in order, so a
    session whose host dropped it (R21) or died (R22) would hear the script
    from the start; and it keeps a copy of every request (for tests), which
    a host holding thousands of idle sessions would pay for. A real provider
    keeps neither.
    """

    async def call(self, request: ProviderRequest, on_token: Any = None) -> Reply:
        out = reply_for(request)
        return out if isinstance(out, Reply) else Reply(content=out)


def demo_agent(store: EventStore) -> Agent:
    """The refund-desk agent with the whole script, on ``store``.

    Module-level so a cluster can ship it to its session hosts (R17).
    """
    return build_agent(store, DemoModel())


async def run_session(store: EventStore, agent: Any = None) -> DemoSession:
    """Run the whole conversation once, as a new session in ``store``.

    ``agent`` is anything with ``Agent``'s shape — a cluster's agent runs the
    same conversation on its hosts; by default an in-process one.
    """
    if agent is None:
        agent = demo_agent(store)
    transcript: list[tuple[str, str]] = []
    for number, turn in enumerate(TURNS, start=1):
        transcript.append(("customer", turn.customer))
        if number == 1:
            out = await agent.run(turn.customer)
        else:
            out = await agent.follow_up(turn.customer)
        if is_ask_pause(out) != turn.pauses:
            raise DemoError(f"turn {number} was written to {_expect(turn)}; it did not")
        if is_ask_pause(out):
            approval = the_approval()
            asker = out.ask.middleware or "a pause"
            transcript.append((asker, f"asks: {out.ask.question}"))
            transcript.append((approval.by, f"approves: {approval.note}"))
            out = await agent.resume(out.checkpoint, approval)
        if not isinstance(out, str):
            raise DemoError(f"turn {number} paused twice; the script approves one ask")
        transcript.append(("agent", out))
    session_id = agent.session_id
    if session_id is None:
        raise DemoError("the agent ran no session")
    state = agent.last_snapshot()
    spoke = {row.moment for row in state.middleware_decisions}
    spoke |= {"window"} if state.window_records else set()
    silent = [moment for moment in LOOP_MOMENTS if moment not in spoke]
    if silent:
        raise DemoError(f"the demo is meant to show every moment; silent: {silent}")
    stream = watched(stored.decode() for stored in await store.read(session_id))
    timeline = tuple(TIMELINE_KINDS[e.type] for e in stream if e.type in TIMELINE_KINDS)
    return DemoSession(session_id, state, tuple(transcript), timeline)


def _expect(turn: Turn) -> str:
    return "pause for a person" if turn.pauses else "end with an answer"


DEFAULT_CONCURRENCY = 100


@dataclasses.dataclass
class DemoRun:
    """What ``run_sessions`` ran: the first session whole, the rest as totals.

    Only the first session's state is kept (its table is the one shown), so
    ``--sessions 5000`` holds 5000 ids, not 5000 folded states.
    """

    first: DemoSession
    session_ids: list[str]
    turns: int = 0
    rows: int = 0
    window_records: int = 0


async def run_sessions(
    count: int,
    store: EventStore,
    on_done: Callable[[DemoSession], Any] | None = None,
    cluster_agent: Any = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> DemoRun:
    """Run ``count`` independent sessions on one store, at most ``concurrency``
    at a time; the first to fail stops the others and is raised.

    With ``cluster_agent`` (from ``Cluster.agent(demo_agent)``) the sessions
    run on the cluster's hosts; each gets its own client view of them.
    """
    if count < 1 or concurrency < 1:
        raise ValueError("run_sessions needs count >= 1 and concurrency >= 1")
    ids: list[str] = [""] * count
    first: list[DemoSession] = []
    totals = [0, 0, 0]
    pending = iter(range(count))

    async def worker() -> None:
        for index in pending:
            agent = cluster_agent.client() if cluster_agent is not None else None
            session = await run_session(store, agent)
            ids[index] = session.session_id
            state = session.state
            totals[0] += state.turn
            totals[1] += len(state.middleware_decisions)
            totals[2] += len(state.window_records)
            if index == 0:
                first.append(session)
            if on_done is not None:
                on_done(session)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(count, concurrency)):
                group.create_task(worker())
    except ExceptionGroup as failed:
        # The first failure is the story; the rest were cancelled by it.
        raise failed.exceptions[0] from None
    return DemoRun(first[0], ids, *totals)


# -- showing it -------------------------------------------------------------

OUTCOME_STYLE = {"allow": "green", "deny": "bold red", "ask": "bold yellow"}


def decision_table(session: DemoSession) -> Table:
    """What each moment decided, in stream order, one section per turn.

    Ledger rows come from ``last_snapshot().middleware_decisions``; the dim
    ``window`` lines from ``.window_records`` are the window's own records,
    never rows: the window decides nothing about a value, it only narrows
    what the model is sent.
    """
    table = Table(
        title=f"session {session.session_id}",
        caption="dim 'window' lines are the window's own records "
        "(window.compacted), not ledger rows: the window changes only what "
        "the model is sent, and history keeps every message",
        caption_justify="left",
    )
    table.add_column("middleware", no_wrap=True)
    table.add_column("moment", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    table.add_column("changed", no_wrap=True)
    table.add_column("why", overflow="fold", ratio=1)
    rows = iter(session.state.middleware_decisions)
    records = iter(session.state.window_records)
    previous = "input"
    for kind in session.timeline:
        if kind == "row":
            row = next(rows)
            if row.moment == "input" and previous != "input":
                table.add_section()  # a new turn starts with its input rows
            previous = row.moment
            table.add_row(
                row.middleware,
                row.moment,
                Text(row.outcome, style=OUTCOME_STYLE[row.outcome]),
                "yes" if row.changed else "no",
                row.why or "",
            )
        else:
            record = next(records)
            previous = "window"
            table.add_row(
                record.strategy,
                "window",
                "compacted",
                "view",
                _window_why(record),
                style="dim italic",
            )
    return table


def _window_why(record: WindowCompacted) -> str:
    return (
        f"model call {record.iteration} sees {record.turns_after} of "
        f"{record.turns_before} turns; {record.removed_message_count} "
        "messages out of view"
    )


def render_transcript(console: Console, session: DemoSession) -> None:
    """Print who said what, the pause and its approval included."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", style="bold cyan", no_wrap=True)
    grid.add_column(overflow="fold")
    for speaker, text in session.transcript:
        grid.add_row(speaker, text)
    console.print(grid)


def summary(run: DemoRun, store_url: str, elapsed: float) -> dict[str, Any]:
    """The machine-readable result: totals, ids, and the first session's record."""
    first = run.first
    return {
        "sessions": len(run.session_ids),
        "turns": run.turns,
        "rows": run.rows,
        "window_records": run.window_records,
        "elapsed_s": round(elapsed, 4),
        "store": store_url,
        "session_ids": run.session_ids,
        "first_session": {
            "session_id": first.session_id,
            "rows": msgspec.to_builtins(first.state.middleware_decisions),
            "window_records": [
                {field: getattr(record, field) for field in WINDOW_FIELDS}
                for record in first.state.window_records
            ],
            "answer": first.transcript[-1][1],
        },
    }


WINDOW_FIELDS = (
    "strategy",
    "iteration",
    "keep_recent_turns",
    "removed_message_count",
    "turns_before",
    "turns_after",
)
