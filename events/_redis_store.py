"""The Redis adapter of the event-store port: one stream per session.

Pattern: a port adapter (``EventStore``) over ``redis.asyncio``; appends go
         through one Lua script, so the sequence check and the write are one
         atomic step, and concurrent appends are group-committed (queued and
         sent as one pipeline per round trip).
Role:    events layer; the durable store behind hosts, the CLI's ``verify``,
         ``replay`` and ``tail``. Passes ``tests/contracts/test_event_store.py``.
Emits:   decision facts to the global stream ``helmlog:facts`` (R4).

Laws: R2 (the script appends a batch only when the stream's last seq equals
``expected_seq``; stream ids are ``0-<seq>``, so Redis itself refuses a gap
or a duplicate), R3 (the hash sits beside the data in each entry), R4 (facts
are published after the session append succeeded, best-effort, never failing
it; ``republish_facts`` publishes from the session stream what was missed),
R5 (every driver error becomes a retryable ``StoreError`` naming the store),
R11 (``helmlog:{<session_id>}:events``: the one per-session key, hash-tagged).

Keys::

    helmlog:{<session_id>}:events   stream; entry id 0-<seq>; fields seq, data, hash
    helmlog:facts                   stream; fields session_id, seq, data

Why the script also checks the stream's last hash against the batch's
``prev_hash``: the seq check alone cannot tell a stream that was deleted and
rewritten from the one the caller sealed against; checking the hash makes a
stale head a ``SequenceConflictError``, never a fork. The same check makes a
resent batch idempotent: when the stream already ends with exactly this batch
(its last hash matches, and hashes chain), the script reports success, so the
driver's retry after a lost reply cannot turn our own append into a conflict.

Why facts are published by the flusher and not awaited by ``append``: the
facts stream is a global key (another cluster slot), so it cannot join the
session's atomic script, and a slow or failing publisher must never change a
run (R5). A batch's facts ride in the next pipeline the flusher sends, right
after the append they belong to; ``read_facts`` can therefore lag an append
by one round trip. ``close()`` flushes what is still queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import NoScriptError, RedisError

from ._chain import StoredEvent, seal
from ._codec import decode_envelope
from ._errors import SequenceConflictError, StoreError
from ._store import FactRecord, StoreBase, is_fact_record
from ._types import Event

log = logging.getLogger("helmlog.events")

FACTS_KEY: Final = "helmlog:facts"
_READ_PAGE: Final = 2000
_FACT_BACKLOG_MAX: Final = 100_000
_HEAD_CACHE_MAX: Final = 65_536
# Invariant: a blocking read never waits longer than this per call, so a
# client's socket timeout (5 s by default) never cuts a healthy BLOCK short.
_BLOCK_SLICE_MS: Final = 1_000
# Driver errors that mean "the store failed"; OSError covers sockets and
# TimeoutError, which redis-py does not always wrap.
_DRIVER_ERRORS: Final = (RedisError, OSError)

# ARGV: expected_seq, prev_hash, then (data, hash) per record.
# Returns {1, last_seq} on success, {0, actual_seq} on a conflict.
_APPEND_LUA: Final = """
local key = KEYS[1]
local expected = tonumber(ARGV[1])
local n = (#ARGV - 2) / 2
local actual, last_hash = 0, ''
local top = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
if #top > 0 then
  actual = tonumber(string.match(top[1][1], '^0%-(%d+)$'))
  if actual == nil then
    return redis.error_reply('helmlog: foreign entry id ' .. top[1][1] .. ' in ' .. key)
  end
  local fields = top[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 'hash' then last_hash = fields[i + 1] end
  end
end
if actual == expected then
  if n > 0 and last_hash ~= ARGV[2] then return {0, actual} end
  local seq = expected
  for i = 3, #ARGV, 2 do
    seq = seq + 1
    local s = string.format('%d', seq)
    redis.call('XADD', key, '0-' .. s, 'seq', s, 'data', ARGV[i], 'hash', ARGV[i + 1])
  end
  return {1, seq}
end
if n > 0 and actual == expected + n and last_hash == ARGV[#ARGV] then
  return {1, actual}
end
return {0, actual}
"""


def stream_key(session_id: str) -> str:
    """The stream of one session; ``{session_id}`` is its cluster hash tag."""
    return f"helmlog:{{{session_id}}}:events"


_KEY_PREFIX: Final = "helmlog:{"
_KEY_SUFFIX: Final = "}:events"


def public_url(url: str) -> str:
    """``url`` without credentials: no user, password or password parameter."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    query = urlencode(
        [
            (k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if k.lower() not in {"password", "username"}
        ]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


class _Append:
    """One queued append: its script arguments and the caller's future."""

    __slots__ = ("args", "expected", "facts", "future", "last_hash", "session_id")

    def __init__(
        self,
        session_id: str,
        expected: int,
        args: list[Any],
        last_hash: str,
        facts: list[StoredEvent],
        future: asyncio.Future[int],
    ) -> None:
        self.session_id = session_id
        self.expected = expected
        self.args = args
        self.last_hash = last_hash
        self.facts = facts
        self.future = future


class RedisEventStore(StoreBase):
    """Session streams in Redis (R11); see the module docstring for the keys.

    Args:
        client: a ``redis.asyncio.Redis`` with ``decode_responses=False``;
            the store owns it from now on and closes it in ``close()``.
        chain_key: HMAC key for the hash chain (R3); ``None`` for SHA-256.
        url: the URL to name in errors; derived from the client when omitted.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        chain_key: bytes | None = None,
        url: str | None = None,
    ) -> None:
        self.chain_key = chain_key
        self.url = public_url(url) if url else _url_of(client)
        self._client = client
        self._script = client.register_script(_APPEND_LUA)
        self._heads: dict[str, tuple[int, str]] = {}
        self._queue: list[_Append] = []
        self._facts: list[tuple[str, StoredEvent]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def from_url(cls, url: str, chain_key: bytes | None = None) -> RedisEventStore:
        """A store on ``redis://`` or ``rediss://``; connects on first use."""
        client = aioredis.Redis.from_url(
            url,
            decode_responses=False,
            socket_connect_timeout=2.0,
            # A ledger fails closed: a few quick retries, then StoreError.
            retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.2), retries=2),
        )
        return cls(client, chain_key=chain_key, url=url)

    # -- the port ----------------------------------------------------------

    async def head(self, session_id: str) -> tuple[int, str]:
        cached = self._heads.get(session_id)
        if cached is not None:
            return cached
        return await self._fetch_head(session_id)

    async def append(
        self, session_id: str, events: Sequence[Event], expected_seq: int
    ) -> int:
        cached = self._heads.get(session_id)
        # A cached head is only a guess; the script's check is the truth, and a
        # cache that disagrees with the caller is refreshed, never believed.
        if cached is not None and cached[0] == expected_seq:
            last_seq, last_hash = cached
        else:
            last_seq, last_hash = await self._fetch_head(session_id)
        if last_seq != expected_seq:
            raise SequenceConflictError(
                session_id=session_id, expected=expected_seq, actual=last_seq
            )
        _stamped, records = seal(
            session_id,
            events,
            after_seq=expected_seq,
            prev_hash=last_hash,
            key=self.chain_key,
        )
        return await self._append(session_id, records, expected_seq, last_hash)

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        prev_hash = ""
        if records:
            try:
                prev_hash = decode_envelope(records[0].data)[2]
            except ValueError as exc:  # msgspec.DecodeError is a ValueError
                raise ValueError(
                    f"record seq {records[0].seq} is not a stored event: {exc}"
                ) from exc
        return await self._append(session_id, records, expected_seq, prev_hash)

    async def read(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        key = stream_key(session_id)
        out: list[StoredEvent] = []
        start = after_seq + 1
        try:
            while True:
                page = await self._client.xrange(
                    key, f"0-{start}", "+", count=_READ_PAGE
                )
                for _id, fields in page:
                    out.append(
                        StoredEvent(
                            seq=int(fields[b"seq"]),
                            data=fields[b"data"],
                            hash=fields[b"hash"].decode(),
                        )
                    )
                if len(page) < _READ_PAGE:
                    return out
                start = out[-1].seq + 1
        except _DRIVER_ERRORS as exc:
            raise self._error("read", exc) from exc

    async def sessions(self) -> list[str]:
        found: set[str] = set()
        try:
            async for key in self._client.scan_iter(
                match=f"{_KEY_PREFIX}*{_KEY_SUFFIX}", count=1000, _type="STREAM"
            ):
                name = key.decode() if isinstance(key, bytes) else str(key)
                found.add(name[len(_KEY_PREFIX) : -len(_KEY_SUFFIX)])
        except _DRIVER_ERRORS as exc:
            raise self._error("list sessions of", exc) from exc
        return sorted(found)

    async def read_facts(
        self, after_id: str | None = None, *, block_ms: int | None = None
    ) -> list[FactRecord]:
        start = after_id or "0-0"
        try:
            if block_ms is None:
                return await self._range_facts(start)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + block_ms / 1000
            while True:
                left_ms = max(1, int((deadline - loop.time()) * 1000))
                reply = await self._client.xread(
                    {FACTS_KEY: start}, block=min(left_ms, _BLOCK_SLICE_MS)
                )
                if reply or loop.time() >= deadline:
                    return [
                        _fact(entry_id, fields)
                        for _key, entries in reply or []
                        for entry_id, fields in entries
                    ]
        except _DRIVER_ERRORS as exc:
            raise self._error("read facts from", exc) from exc

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._flusher is not None:
                await self._flusher
            if self._facts:
                # One last try for facts a failed flush left behind.
                await self._send([], self._take_facts())
            if self._facts:
                log.warning(
                    "redis event store %s closed with %d unpublished facts; "
                    "republish_facts(session_id) publishes them from the streams",
                    self.url,
                    len(self._facts),
                )
        finally:
            await self._client.aclose()

    # -- recovery ----------------------------------------------------------

    async def republish_facts(self, session_id: str) -> int:
        """Publish the session's facts the facts stream lacks; return how many.

        Reads the whole facts stream to learn what is there, so it is a
        recovery tool, not a hot path. Watchers are idempotent by
        ``(session_id, seq)`` (R4), so a fact published twice is harmless.
        """
        missing = [r for r in await self.read(session_id) if is_fact_record(r)]
        if not missing:
            return 0
        try:
            published = {
                f.seq
                for f in await self._range_facts("0-0")
                if f.session_id == session_id
            }
            todo = [r for r in missing if r.seq not in published]
            if todo:
                pipe = self._client.pipeline(transaction=False)
                for record in todo:
                    pipe.xadd(FACTS_KEY, _fact_fields(session_id, record))
                await pipe.execute()
        except _DRIVER_ERRORS as exc:
            raise self._error("republish facts to", exc) from exc
        return len(todo)

    # -- internals ---------------------------------------------------------

    def _error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"could not {what} the redis event store {self.url}: "
            f"{type(exc).__name__}: {exc}"
        )

    async def _fetch_head(self, session_id: str) -> tuple[int, str]:
        try:
            top = await self._client.xrevrange(stream_key(session_id), count=1)
        except _DRIVER_ERRORS as exc:
            raise self._error("read the head of", exc) from exc
        if not top:
            self._heads.pop(session_id, None)
            return 0, ""
        _id, fields = top[0]
        head = (int(fields[b"seq"]), fields[b"hash"].decode())
        self._remember(session_id, head)
        return head

    def _remember(self, session_id: str, head: tuple[int, str]) -> None:
        heads = self._heads
        heads.pop(session_id, None)
        if len(heads) >= _HEAD_CACHE_MAX:
            del heads[next(iter(heads))]
        heads[session_id] = head

    async def _append(
        self,
        session_id: str,
        records: Sequence[StoredEvent],
        expected_seq: int,
        prev_hash: str,
    ) -> int:
        if self._closed:
            raise StoreError(f"the redis event store {self.url} is closed")
        args: list[Any] = [expected_seq, prev_hash]
        facts: list[StoredEvent] = []
        seq = expected_seq
        for record in records:
            seq += 1
            if record.seq != seq:
                raise ValueError(f"record seq {record.seq} does not follow {seq - 1}")
            args.append(record.data)
            args.append(record.hash)
            if is_fact_record(record):
                facts.append(record)
        last_hash = records[-1].hash if records else prev_hash
        loop = asyncio.get_running_loop()
        item = _Append(
            session_id, expected_seq, args, last_hash, facts, loop.create_future()
        )
        self._queue.append(item)
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await item.future

    def _take_facts(self) -> list[tuple[str, StoredEvent]]:
        facts, self._facts = self._facts, []
        return facts

    async def _flush(self) -> None:
        """Send queued appends (and the facts of earlier ones) until idle."""
        try:
            while self._queue or self._facts:
                batch, self._queue = self._queue, []
                sent = await self._send(batch, self._take_facts())
                if not sent and not self._queue:
                    return  # the store is down: facts wait for the next append
                # Let the callers just woken queue their next append, so it
                # shares the next round trip with the facts of this one.
                await asyncio.sleep(0)
        finally:
            # Invariant: no caller waits on a queued append this flusher
            # will never send, whatever stopped it.
            orphans, self._queue = self._queue, []
            self._fail(orphans, f"the append queue of {self.url} stopped")

    async def _send(
        self, batch: list[_Append], facts: list[tuple[str, StoredEvent]]
    ) -> bool:
        """One pipeline: facts first, then the appends. Resolves every future."""
        try:
            try:
                results = await self._pipeline(batch, facts)
            except _DRIVER_ERRORS as exc:
                self._requeue_facts(facts, exc)
                error = self._error("append to", exc)
                for item in batch:
                    self._heads.pop(item.session_id, None)
                    if not item.future.done():
                        item.future.set_exception(error)
                return False
            fact_results = results[: len(facts)]
            failed = [r for r in fact_results if isinstance(r, Exception)]
            if failed:
                log.warning(
                    "redis event store %s: %d facts not published (%s); "
                    "republish_facts(session_id) publishes them from the streams",
                    self.url,
                    len(failed),
                    failed[0],
                )
            for item, result in zip(batch, results[len(facts) :], strict=True):
                self._settle(item, result)
            return True
        finally:
            # Cancelled mid-send: the outcome is unknown, and nobody may wait
            # on it forever. A retry is safe: the script is idempotent.
            self._fail(batch, f"an append to {self.url} was interrupted")

    def _fail(self, items: list[_Append], why: str) -> None:
        for item in items:
            if not item.future.done():
                self._heads.pop(item.session_id, None)
                item.future.set_exception(StoreError(why))

    async def _pipeline(
        self, batch: list[_Append], facts: list[tuple[str, StoredEvent]]
    ) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for session_id, record in facts:
            pipe.xadd(FACTS_KEY, _fact_fields(session_id, record))
        for item in batch:
            pipe.evalsha(self._script.sha, 1, stream_key(item.session_id), *item.args)
        results: list[Any] = await pipe.execute(raise_on_error=False)
        retry = [
            i
            for i, r in enumerate(results[len(facts) :], start=len(facts))
            if isinstance(r, NoScriptError)
        ]
        if retry:
            # The server lost its script cache (a restart): NOSCRIPT means the
            # script did not run, so sending those appends again is safe.
            await self._client.script_load(_APPEND_LUA)
            pipe = self._client.pipeline(transaction=False)
            for i in retry:
                item = batch[i - len(facts)]
                pipe.evalsha(
                    self._script.sha, 1, stream_key(item.session_id), *item.args
                )
            for i, r in zip(
                retry, await pipe.execute(raise_on_error=False), strict=True
            ):
                results[i] = r
        return results

    def _settle(self, item: _Append, result: Any) -> None:
        future = item.future
        if isinstance(result, Exception):
            self._heads.pop(item.session_id, None)
            if not future.done():
                future.set_exception(self._error("append to", result))
            return
        ok, seq = int(result[0]), int(result[1])
        if not ok:
            self._heads.pop(item.session_id, None)
            if not future.done():
                future.set_exception(
                    SequenceConflictError(
                        session_id=item.session_id, expected=item.expected, actual=seq
                    )
                )
            return
        self._remember(item.session_id, (seq, item.last_hash))
        if item.facts:
            self._facts.extend((item.session_id, f) for f in item.facts)
        if not future.done():
            future.set_result(seq)

    def _requeue_facts(
        self, facts: list[tuple[str, StoredEvent]], exc: BaseException
    ) -> None:
        if not facts:
            return
        room = _FACT_BACKLOG_MAX - len(self._facts)
        kept = facts[: max(0, room)]
        self._facts[:0] = kept
        log.warning(
            "redis event store %s: publishing %d facts failed (%s: %s); "
            "%d kept for the next flush, %d left to republish_facts",
            self.url,
            len(facts),
            type(exc).__name__,
            exc,
            len(kept),
            len(facts) - len(kept),
        )

    async def _range_facts(self, after_id: str) -> list[FactRecord]:
        out: list[FactRecord] = []
        start = f"({after_id}"
        while True:
            page = await self._client.xrange(FACTS_KEY, start, "+", count=_READ_PAGE)
            out.extend(_fact(entry_id, fields) for entry_id, fields in page)
            if len(page) < _READ_PAGE:
                return out
            start = f"({out[-1].id}"


def _fact_fields(session_id: str, record: StoredEvent) -> dict[str, Any]:
    return {"session_id": session_id, "seq": record.seq, "data": record.data}


def _fact(entry_id: bytes, fields: dict[bytes, bytes]) -> FactRecord:
    return FactRecord(
        id=entry_id.decode(),
        session_id=fields[b"session_id"].decode(),
        seq=int(fields[b"seq"]),
        data=fields[b"data"],
    )


def _url_of(client: aioredis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    db = kwargs.get("db", 0)
    return f"redis://{host}:{port}/{db}"
