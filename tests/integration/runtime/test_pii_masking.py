"""A ready-made PII scrub keeps the personal data it masks out of the record.

Pattern: run a turn through ``PiiScrub`` at input on a real Redis, then read
         every key the store wrote raw (streams with ``XRANGE``, hashes,
         strings, sets) and look for the SSN and the e-mail address.
Role:    integration tests of ``helmlog.rules.PiiScrub``'s ``masks_values``
         and the rows ``runtime/_chain.py`` files for a masking link.
Emits:   nothing.

Laws: issue 28 item 7 (a PII rule's row survives, the value it replaced does
not, unless the user opts out with ``keep_values=True``), G85/G86 (the
placeholder), G87 (what the session computes on is the scrubbed text).
"""

from __future__ import annotations

import redis

from helmlog import Agent
from helmlog.events import open_event_store
from helmlog.rules import PiiScrub
from helmlog.runtime.providers import scripted

SSN = "123-45-6789"
EMAIL = "ana.ruiz@example.com"
MESSAGE = f"Refund order 7, my SSN is {SSN} and my mail {EMAIL}"


def _everything_stored(url: str) -> bytes:
    """Every value of every key in the database, read raw."""
    client = redis.Redis.from_url(url)
    out: list[bytes] = []
    try:
        for key in client.scan_iter():
            kind = client.type(key)
            if kind == b"stream":
                for _id, fields in client.xrange(key, "-", "+"):
                    out.extend(k + v for k, v in fields.items())
            elif kind == b"hash":
                out.extend(k + v for k, v in client.hgetall(key).items())
            elif kind == b"string":
                out.append(client.get(key) or b"")
            elif kind == b"set":
                out.extend(client.smembers(key))
            elif kind == b"zset":
                out.extend(client.zrange(key, 0, -1))
            elif kind == b"list":
                out.extend(client.lrange(key, 0, -1))
            out.append(key)
    finally:
        client.close()
    return b"\n".join(out)


def _agent(store: object, scrub: PiiScrub) -> Agent:
    return (
        Agent.create(provider=scripted(reply="Done."), model="m", store=store)
        .act(input=[scrub])
        .build()
    )


async def test_a_pii_scrub_keeps_the_ssn_out_of_redis_by_default(
    redis_url: str,
) -> None:
    """XRANGE holds no SSN and no address: the row says what was scrubbed and
    holds the placeholder where the raw message would be (issue 28 item 7)."""
    store = open_event_store(redis_url)
    try:
        agent = _agent(store, PiiScrub())
        assert "Done." == await agent.run(MESSAGE, session_id="s-pii")
        (row,) = [
            r for r in agent.last_snapshot().middleware_decisions if r.moment == "input"
        ]
        assert (True, "[redacted]", True) == (row.changed, row.before, row.masked)
        assert SSN not in row.after and "[ssn]" in row.after
        stored = _everything_stored(redis_url)
        assert b"s-pii" in stored  # the scan saw the session's keys
        assert SSN.encode() not in stored
        assert EMAIL.encode() not in stored
    finally:
        await store.close()


async def test_keep_values_stores_what_the_scrub_replaced() -> None:
    """``keep_values=True`` opts out: the stored row's ``before`` is the raw
    message, as for any other transform (G16)."""
    store = open_event_store("memory://")
    agent = _agent(store, PiiScrub(keep_values=True))
    await agent.run(MESSAGE, session_id="s-kept")
    (row,) = [
        r for r in agent.last_snapshot().middleware_decisions if r.moment == "input"
    ]
    assert (MESSAGE, None) == (row.before, row.masked)


async def test_a_masked_session_still_verifies_and_replays() -> None:
    """Masking is how the row is filed, not an edit after the fact: the chain
    verifies and a fresh agent continues the session from its stream."""
    from helmlog.events import read_verified

    store = open_event_store("memory://")
    await _agent(store, PiiScrub()).run(MESSAGE, session_id="s-chain")
    events = await read_verified(store, "s-chain")
    assert events and all(SSN not in repr(e) for e in events)
    again = _agent(store, PiiScrub())
    assert "Done." == await again.run("and order 8?", session_id="s-chain")


async def test_a_scrubbed_tool_result_is_not_stored_behind_it(redis_url: str) -> None:
    """After a tool, the scrub's row and ``tool.end`` hold the placeholder, the
    model reads the scrubbed text, and Redis holds neither the SSN nor the
    address the tool returned (issue 28 item 7)."""
    from helmlog import tool
    from helmlog.runtime.providers import Reply, ToolCallRequest

    @tool
    def customer(order: int) -> str:
        """The customer behind an order."""
        return f"order {order}: Ana Ruiz, SSN {SSN}, {EMAIL}"

    store = open_event_store(redis_url)
    try:
        model = scripted(
            [
                Reply(
                    tool_calls=[
                        ToolCallRequest(id="c1", name="customer", args={"order": 7})
                    ]
                ),
                "Found her.",
            ]
        )
        agent = (
            Agent.create(provider=model, model="m", store=store)
            .tool(customer)
            .act(after_tool=[PiiScrub()])
            .build()
        )
        assert "Found her." == await agent.run("who ordered 7?", session_id="s-t")
        tool_message = agent.last_snapshot().history[-2]
        assert "[ssn]" in tool_message.content and SSN not in tool_message.content
        stored = _everything_stored(redis_url)
        assert b"s-t" in stored
        assert SSN.encode() not in stored
        assert EMAIL.encode() not in stored
    finally:
        await store.close()
