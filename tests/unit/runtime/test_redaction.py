"""Redaction: rows survive with placeholders; what the agent computes on stays real.

Pattern: one governed refund conversation (input scrub, an asking link, an
         after-tool rewrite and refusal, an output rewrite) run with and
         without ``conversation_redaction()``; the served views, the delivered
         events and the stored stream are searched for each sensitive value.
Role:    unit tests for ``RedactionPolicy``, ``conversation_redaction`` and the
         agent's stored and served forms.
Emits:   nothing.

Laws: G85 (one policy; ``conversation_redaction`` names the conversation
fields plus extras; bad names or placeholders raise), G86 (rows survive,
values do not, in ``last_snapshot()`` and every delivered event), G87 (the
stream keeps named values only where the session must compute on them), G88
(the model's requests, tool arguments, the answer, ``checkpoint()``, the
``AskPause`` and resume stay real).

Why marker strings: each sensitive value is a unique word, so "survives in no
kept record" is a byte search over every record.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helmlog import (
    Agent,
    AskPause,
    Message,
    MessageMiddleware,
    RedactionPolicy,
    Tool,
    ToolMiddleware,
    allow,
    ask,
    check_in_approved,
    conversation_redaction,
    deny,
    is_ask_pause,
)
from helmlog.events import MemoryEventStore
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import counter_ids

SSN = "123-45-6789"  # pre-scrub input: survives in no kept record
RESULT_SECRET = "VAULT-CODE-8841"  # real result behind an after-tool refusal
DRAFT_SECRET = "PELICAN"  # a rewritten draft
ARG_SECRET = "ACCT-55501"  # a tool argument: computed on, kept where needed
DETAIL_SECRET = "LIMIT-NOTE-77"  # the ask's detail

PLACEHOLDER = "[redacted]"

CONVERSATION_FIELDS = {
    "before",
    "after",
    "why",
    "content",
    "final_content",
    "args",
    "result",
    "question",
    "detail",
    "note",
}


class Bank:
    """Two tools: one whose result is shown, one whose result is hidden."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        schema = {
            "type": "object",
            "properties": {"account": {"type": "string"}},
            "required": ["account"],
        }
        self.balance = Tool("balance", "Show a balance.", schema, self._balance)
        self.vault = Tool("vault", "Open the vault.", schema, self._vault)

    def _balance(self, account: str) -> str:
        self.ran.append(("balance", {"account": account}))
        return f"balance of {account} is 10"

    def _vault(self, account: str) -> str:
        self.ran.append(("vault", {"account": account}))
        return f"code {RESULT_SECRET}"


def scrub(m: Any) -> Any:
    if SSN in m.content:
        return allow(m.content.replace(SSN, "[ssn]"), "ssn")
    return allow()


def soften(m: Any) -> Any:
    if m.phase == "output" and DRAFT_SECRET in m.content:
        return allow(m.content.replace(DRAFT_SECRET, "the bird"), "no codenames")
    return allow()


def four_eyes(c: Any) -> Any:
    if c.tool_name == "balance":
        return ask("Show this balance?", {"note": DETAIL_SECRET})
    return allow()


def hide_vault(r: Any) -> Any:
    if r.tool_name == "vault":
        return deny("vault codes are not shown")
    return allow(r.result.upper(), "shout")


def script() -> list[Any]:
    return [
        Reply(
            content="checking",
            tool_calls=[
                ToolCallRequest(id="c1", name="balance", args={"account": ARG_SECRET}),
                ToolCallRequest(id="c2", name="vault", args={"account": ARG_SECRET}),
            ],
        ),
        f"All done; {DRAFT_SECRET} says hi.",
    ]


def build(
    model: Any, bank: Bank, store: MemoryEventStore, policy: RedactionPolicy | None
) -> Agent:
    return (
        Agent.create(
            provider=model, model="m", ids=counter_ids(), store=store, redact=policy
        )
        .system("You bank.")
        .tool(bank.balance, bank.vault)
        .message_middleware(
            MessageMiddleware(name="scrub", on_message=scrub),
            MessageMiddleware(name="soften", on_message=soften),
        )
        .tool_middleware(
            ToolMiddleware(name="four-eyes", on_tool_call=four_eyes),
            ToolMiddleware(name="hide-vault", on_tool_result=hide_vault),
        )
        .build()
    )


class Run:
    """One full conversation: pause, approve, answer."""

    def __init__(self, policy: RedactionPolicy | None) -> None:
        self.store = MemoryEventStore()
        self.bank = Bank()
        self.model = scripted(script())
        self.agent = build(self.model, self.bank, self.store, policy)
        self.events: list[Any] = []
        self.watched: list[Any] = []
        self.agent.on("*", self.events.append)

        class Recorder:
            id = "recorder"

            def on_event(inner, event: Any) -> None:
                self.watched.append(event)

        self.agent.attach(Recorder())
        self.pause: AskPause | None = None
        self.answer: Any = None

    async def go(self) -> Run:
        out = await self.agent.run(f"show account {ARG_SECRET}, my ssn is {SSN}")
        assert isinstance(out, AskPause)
        self.pause = out
        self.answer = await self.agent.resume(
            out.checkpoint, check_in_approved(by="dana", note="ok, checked")
        )
        return self

    async def records(self) -> list[Any]:
        return await self.store.read(self.agent.session_id or "")


def encoded(value: Any) -> str:
    return msgspec.json.encode(value).decode()


SECRETS = (SSN, RESULT_SECRET, DRAFT_SECRET, ARG_SECRET, DETAIL_SECRET, "ok, checked")


# -- G85 ----------------------------------------------------------------------


def test_g85_conversation_redaction_names_the_conversation_fields_plus_extras() -> None:
    """G85: conversation_redaction(*extra) names the ten fields plus extra."""
    assert CONVERSATION_FIELDS == conversation_redaction().fields
    assert (
        CONVERSATION_FIELDS | {"identity"} == conversation_redaction("identity").fields
    )
    assert PLACEHOLDER == conversation_redaction().placeholder


def test_g85_a_policy_takes_fields_and_a_placeholder() -> None:
    """G85: RedactionPolicy(fields, placeholder) holds a set of names."""
    policy = RedactionPolicy(["args", "result"], placeholder="***")
    assert ({"args", "result"}, "***") == (policy.fields, policy.placeholder)


@pytest.mark.parametrize(
    ("fields", "placeholder"), [([1], "[x]"), (["args", None], "[x]"), (["args"], "")]
)
def test_g85_bad_names_or_an_empty_placeholder_raise(
    fields: list[Any], placeholder: str
) -> None:
    """G85: a non-str name or an empty placeholder raises ValueError."""
    with pytest.raises(ValueError):
        RedactionPolicy(fields, placeholder=placeholder)


# -- G86 ----------------------------------------------------------------------


async def test_g86_rows_survive_with_every_non_value_field_intact() -> None:
    """G86: redacted rows equal the plain rows but for the named values."""
    plain = await Run(None).go()
    redacted = await Run(conversation_redaction()).go()
    plain_rows = plain.agent.last_snapshot().middleware_decisions
    kept_rows = redacted.agent.last_snapshot().middleware_decisions
    assert len(kept_rows) == len(plain_rows) == 9

    def survive(r: Any) -> tuple[Any, ...]:
        return (
            r.middleware,
            r.moment,
            r.at,
            r.phase,
            r.tool_name,
            r.tool_call_id,
            r.iteration,
            r.outcome,
            r.changed,
            r.component_id,
        )

    assert [survive(r) for r in kept_rows] == [survive(r) for r in plain_rows]
    for plain_row, kept in zip(plain_rows, kept_rows, strict=True):
        for name in ("why", "before", "after"):
            expected = None if getattr(plain_row, name) is None else PLACEHOLDER
            assert expected == getattr(kept, name)


async def test_g86_the_snapshot_holds_no_named_value() -> None:
    """G86: last_snapshot() holds the placeholder in place of each named value."""
    run = await Run(conversation_redaction()).go()
    snapshot = run.agent.last_snapshot()
    text = encoded(snapshot)
    assert [] == [s for s in SECRETS if s in text]
    assert {PLACEHOLDER} == {m.content for m in snapshot.history}
    assert [m.role for m in snapshot.history] == [
        m.role for m in (await Run(None).go()).agent.last_snapshot().history
    ]


async def test_g86_delivered_events_carry_no_named_value() -> None:
    """G86: listeners and watchers receive placeholders, never a named value."""
    run = await Run(conversation_redaction()).go()
    assert run.events == run.watched
    leaks = [(e.type, s) for e in run.events for s in SECRETS if s in encoded(e)]
    assert [] == leaks
    for e in run.events:
        for name in CONVERSATION_FIELDS & set(e.__struct_fields__):
            assert getattr(e, name) in (None, PLACEHOLDER), (e.type, name)
    ends = [e for e in run.events if e.type == "stream.tool_end"]
    assert [
        ("c1", PLACEHOLDER),
        ("c2", PLACEHOLDER),
    ] == [(e.tool_call_id, e.result) for e in ends]


async def test_g86_facts_keep_their_shape_under_a_policy() -> None:
    """G86: the facts still say who decided what, where and with which outcome."""
    plain = await Run(None).go()
    redacted = await Run(conversation_redaction()).go()

    def facts(run: Run) -> list[tuple[Any, ...]]:
        return [
            (e.middleware, e.moment, e.outcome, e.changed, e.tool_call_id)
            for e in run.events
            if e.type == "middleware.decision"
        ]

    assert facts(redacted) == facts(plain)
    assert [e.type for e in redacted.events] == [e.type for e in plain.events]


# -- G87 ----------------------------------------------------------------------


async def test_g87_scrubbed_input_hidden_result_and_draft_survive_nowhere() -> None:
    """G87: the pre-scrub input, the hidden result and the draft are in no record."""
    run = await Run(conversation_redaction()).go()
    records = await run.records()
    for secret in (SSN, RESULT_SECRET, DRAFT_SECRET):
        assert [] == [r.decode().type for r in records if secret.encode() in r.data]


async def test_g87_the_stream_keeps_values_only_where_the_session_computes() -> None:
    """G87: values are kept only in committed messages, pause and dispatch args."""
    run = await Run(conversation_redaction()).go()
    records = await run.records()
    holders = sorted(
        {r.decode().type for r in records if ARG_SECRET.encode() in r.data}
    )
    assert ["message.committed", "pause.request", "tool.dispatched"] == holders
    by_type: dict[str, list[Any]] = {}
    for r in records:
        event = r.decode()
        by_type.setdefault(event.type, []).append(event)
    assert {e.row.why for e in by_type["decision.filed"]} <= {None, PLACEHOLDER}
    assert [PLACEHOLDER] * 2 == [e.args for e in by_type["stream.tool_start"]]
    assert [PLACEHOLDER] * 2 == [e.result for e in by_type["stream.tool_end"]]
    assert [PLACEHOLDER] * 2 == [e.content for e in by_type["stream.llm_end"]]
    assert [PLACEHOLDER] == [e.final_content for e in by_type["agent.turn_end"]]
    assert [PLACEHOLDER] == [e.note for e in by_type["pause.resume"]]
    (pause,) = by_type["pause.request"]
    assert (
        {"account": ARG_SECRET},
        "Show this balance?",
    ) == (pause.args, pause.question)


async def test_g87_the_asks_detail_is_not_kept_in_the_stream() -> None:
    """G87: a pause keeps its arguments and question; its detail is a placeholder."""
    run = await Run(conversation_redaction()).go()
    records = await run.records()
    assert [] == [r.decode().type for r in records if DETAIL_SECRET.encode() in r.data]


async def test_g87_without_a_policy_the_stream_keeps_every_value() -> None:
    """G87: with no policy, the stream keeps values (the rows' before included)."""
    run = await Run(None).go()
    data = b"".join(r.data for r in await run.records())
    assert [] == [
        s for s in (SSN, RESULT_SECRET, DRAFT_SECRET) if s.encode() not in data
    ]


# -- G88 ----------------------------------------------------------------------


async def test_g88_what_the_agent_computes_on_or_hands_back_stays_real() -> None:
    """G88: requests, tool args, the answer, checkpoint() and the AskPause are real."""
    plain = await Run(None).go()
    run = await Run(conversation_redaction()).go()
    assert run.model.requests == plain.model.requests
    assert run.bank.ran == plain.bank.ran
    assert [
        ("balance", {"account": ARG_SECRET}),
        ("vault", {"account": ARG_SECRET}),
    ] == run.bank.ran
    assert run.answer == plain.answer == "All done; the bird says hi."
    assert run.agent.checkpoint() == plain.agent.checkpoint()
    assert run.pause is not None
    assert run.pause == plain.pause
    assert {"note": DETAIL_SECRET} == run.pause.ask.detail
    tool_reads = [m for m in run.model.requests[-1].messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_reads] == [
        ("c1", f"BALANCE OF {ARG_SECRET.upper()} IS 10"),
        ("c2", "vault codes are not shown"),
    ]


async def test_g88_a_fresh_agent_on_the_store_resumes_with_real_values() -> None:
    """G88/G87: another agent on the same store resumes the pause with real values."""
    store = MemoryEventStore()
    policy = conversation_redaction()
    first = build(scripted(script()), Bank(), store, policy)
    out = await first.run(f"show account {ARG_SECRET}, my ssn is {SSN}")
    assert is_ask_pause(out)
    bank = Bank()
    model = scripted(script()[1:])
    second = build(model, bank, store, policy)
    answer = await second.resume(out.checkpoint.to_json(), check_in_approved(by="dana"))
    assert "All done; the bird says hi." == answer
    assert [
        ("balance", {"account": ARG_SECRET}),
        ("vault", {"account": ARG_SECRET}),
    ] == bank.ran
    assert (
        Message(role="user", content=f"show account {ARG_SECRET}, my ssn is [ssn]")
        == model.requests[0].messages[0]
    )


@pytest.mark.parametrize("name", [["content"], {"why"}])
def test_g85_an_unhashable_non_str_name_raises_value_error(name: Any) -> None:
    """G85: a non-`str` name ... raises `ValueError` at construction."""
    with pytest.raises(ValueError, match="field names must be str"):
        RedactionPolicy([name])
