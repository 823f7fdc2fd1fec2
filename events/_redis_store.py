"""The Redis adapter of the event-store port: one stream per session.

Pattern: a port adapter (``EventStore``) over ``redis.asyncio``'s connection
         pool; appends go through one Lua script, so the sequence check and
         the write are one atomic step, and concurrent appends are
         group-committed (queued, then sent as one pipeline per round trip).
Role:    events layer; the durable store behind hosts and the CLI's
         ``verify``, ``replay`` and ``tail``. Passes
         ``tests/contracts/test_event_store.py``.
Emits:   decision facts to the global stream ``helmlog:facts`` (R4).

Laws: R2 (the script appends a batch only when the stream's last seq equals
``expected_seq``; stream ids are ``0-<seq>``, so Redis itself refuses a gap
or a duplicate), R3 (each entry keeps its hash beside its data), R4 (facts
are published after the session append succeeded, best-effort, never failing
it; ``republish_facts`` publishes from the session stream what was missed),
R5 (every driver error becomes a retryable ``StoreError`` naming the store),
R11 (``helmlog:{<session_id>}:events`` is the only per-session key).

Keys::

    helmlog:{<session_id>}:events   stream; id 0-<seq>; fields seq, data, hash
    helmlog:facts                   stream; fields session_id, seq, data

Why the script also checks the stream's last hash against the batch's
``prev_hash``: the seq check alone cannot tell a stream that was deleted and
rewritten from the one the caller sealed against; checking the hash makes a
stale head a ``SequenceConflictError``, never a fork. The same check makes a
resent batch idempotent: when the stream already ends with exactly this batch
(its last hash matches, and hashes chain), the script reports success, so a
resend after a lost reply cannot turn our own append into a conflict.

Why facts are published by the flusher and not awaited by ``append``: the
facts stream is a global key (another cluster slot), so it cannot join the
session's atomic script, and a slow or failing publisher must never change a
run (R5). A batch's facts ride at the head of the next pipeline the flusher
sends; ``read_facts`` can lag an append by one round trip, and ``close()``
publishes what is still queued.

Why the store packs its own commands instead of calling redis-py's command
methods: the ledger sits on every governed action, and redis-py's generic
packing and reply callbacks cost more than the round trip itself. The store
borrows the client's pool, connections, timeouts and TLS, and keeps nothing
else of the driver; ``bench/ledger.py`` measures the difference.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError

from ._chain import StoredEvent
from ._codec import decode_envelope
from ._errors import SequenceConflictError, StoreError
from ._index import PendingAsk
from ._store import FactRecord, StoreBase, is_fact_record

log = logging.getLogger("helmlog.events")

FACTS_KEY: Final = "helmlog:facts"
_READ_PAGE: Final = 2000
_FACT_BACKLOG_MAX: Final = 100_000
_HEAD_CACHE_MAX: Final = 65_536
# Invariant: a blocking read waits at most this long per command, so the
# client's socket timeout (5 s by default) never cuts a healthy BLOCK short.
_BLOCK_SLICE_MS: Final = 1_000
# Driver errors that mean "the store failed"; OSError covers sockets and
# TimeoutError, which redis-py does not always wrap.
_DRIVER_ERRORS: Final = (RedisError, OSError)

# KEYS[1] the stream; ARGV expected_seq, prev_hash, then (data, hash) per record.
# Returns {1, last_seq} when the batch is in the stream, {0, actual_seq} if not.
_APPEND_LUA: Final = b"""
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
_APPEND_SHA: Final = hashlib.sha1(_APPEND_LUA).hexdigest()

_FIELDS: Final = (b"seq", b"data", b"hash")
_KEY_PREFIX: Final = "helmlog:{"
_KEY_SUFFIX: Final = "}:events"

Arg = bytes | str | int
Command = Sequence[Arg]


def stream_key(session_id: str) -> str:
    """The stream of one session; ``{session_id}`` is its cluster hash tag.

    An id holding a brace moves where Redis Cluster reads the tag, but every
    key of the session starts the same way, so they still share one slot.
    """
    return f"{_KEY_PREFIX}{session_id}{_KEY_SUFFIX}"


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


def _pack(commands: Sequence[Command]) -> bytes:
    """RESP-encode commands (arguments are bytes, str or int) into one write."""
    pack = hiredis.pack_command
    # hiredis's stub types the argument as a 1-tuple; it takes any length.
    return b"".join([pack(tuple(command)) for command in commands])  # type: ignore[arg-type]


class _Wire:
    """Round trips on a redis-py pool: our packing, hiredis-parsed replies.

    Replies come back as the server sent them (no redis-py callbacks); an
    error reply takes its command's place as a ``ResponseError``.
    """

    def __init__(self, client: aioredis.Redis) -> None:
        self._pool = client.connection_pool

    async def call(self, commands: Sequence[Command]) -> list[Any]:
        packed = _pack(commands)
        for attempt in (1, 2):
            conn = await self._pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                await conn.send_packed_command(packed, check_health=False)
                replies: list[Any] = []
                for _ in commands:
                    try:
                        # Stored bytes stay bytes, whatever the client decodes.
                        replies.append(await conn.read_response(disable_decoding=True))
                    except ResponseError as exc:
                        replies.append(exc)
                return replies
            except RedisConnectionError:
                await conn.disconnect()
                # A pooled socket the server closed (a restart) fails once.
                # Sending again is safe: reads are reads, the append script is
                # idempotent, and facts are at-least-once (R4).
                if attempt == 2:
                    raise
            except BaseException:
                # Replies may be left unread: the socket must not be reused.
                await conn.disconnect()
                raise
            finally:
                await self._pool.release(conn)
        raise AssertionError("unreachable")

    async def one(self, *command: Arg) -> Any:
        reply = (await self.call([command]))[0]
        if isinstance(reply, ResponseError):
            raise reply
        return reply


class _Append:
    """One queued append: its script arguments and the caller's future."""

    __slots__ = ("args", "expected", "facts", "future", "last_hash", "session_id")

    def __init__(
        self,
        session_id: str,
        expected: int,
        args: list[Arg],
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
        client: a standalone ``redis.asyncio.Redis`` (not a cluster client);
            the store borrows its pool and closes it in ``close()``.
        chain_key: HMAC key for the hash chain (R3); ``None`` for SHA-256.
        url: the URL errors name; derived from the client when omitted.
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
        self._wire = _Wire(client)
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
        """The last head this store saw, else the stream's.

        Another writer may have moved the stream since; an append against a
        stale head is a ``SequenceConflictError``, which drops the cache.
        """
        cached = self._heads.get(session_id)
        if cached is not None:
            return cached
        return await self._fetch_head(session_id)

    async def head_for_append(
        self, session_id: str, expected_seq: int
    ) -> tuple[int, str]:
        cached = self._heads.get(session_id)
        # A cached head is only a guess; the script's check is the truth, and a
        # cache that disagrees with the caller is refreshed, never believed.
        if cached is not None and cached[0] == expected_seq:
            return cached
        return await self._fetch_head(session_id)

    async def append_sealed(
        self, session_id: str, records: Sequence[StoredEvent], expected_seq: int
    ) -> int:
        if not records:
            # Nothing to append; still a seq check, answered by the stream.
            last_seq, _hash = await self._fetch_head(session_id)
            if last_seq != expected_seq:
                raise SequenceConflictError(
                    session_id=session_id, expected=expected_seq, actual=last_seq
                )
            return last_seq
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
                page = await self._wire.one(
                    "XRANGE", key, f"0-{start}", "+", "COUNT", _READ_PAGE
                )
                _records_into(out, page)
                if len(page) < _READ_PAGE:
                    return out
                start = out[-1].seq + 1
        except _DRIVER_ERRORS as exc:
            raise self._error("read", exc) from exc

    async def sessions(self) -> list[str]:
        found: set[str] = set()
        cursor: bytes = b"0"
        try:
            while True:
                cursor, keys = await self._wire.one(
                    "SCAN", cursor, "MATCH", f"{_KEY_PREFIX}*{_KEY_SUFFIX}",
                    "COUNT", 1000, "TYPE", "stream",
                )  # fmt: skip
                for key in keys:
                    found.add(key.decode()[len(_KEY_PREFIX) : -len(_KEY_SUFFIX)])
                if cursor == b"0":
                    return sorted(found)
        except _DRIVER_ERRORS as exc:
            raise self._error("list the sessions of", exc) from exc

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
                wait_ms = max(1, int((deadline - loop.time()) * 1000))
                reply = await self._wire.one(
                    "XREAD", "BLOCK", min(wait_ms, _BLOCK_SLICE_MS),
                    "STREAMS", FACTS_KEY, start,
                )  # fmt: skip
                if reply or loop.time() >= deadline:
                    # RESP3 replies with a map of streams, RESP2 with pairs.
                    streams = (
                        reply.values()
                        if isinstance(reply, dict)
                        else [entries for _key, entries in reply or ()]
                    )
                    return [_fact(e) for entries in streams for e in entries]
        except _DRIVER_ERRORS as exc:
            raise self._error("read the facts of", exc) from exc

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

    # -- indexes (issue 7 item 2: the sharded implementation lands next) ----

    async def open_turns(self) -> list[str]:
        raise NotImplementedError("RedisEventStore.open_turns lands with issue 7")

    async def pending_asks(self) -> list[PendingAsk]:
        raise NotImplementedError("RedisEventStore.pending_asks lands with issue 7")

    async def reindex(self, session_id: str) -> None:
        raise NotImplementedError("RedisEventStore.reindex lands with issue 7")

    async def repair_indexes(self) -> int:
        raise NotImplementedError("RedisEventStore.repair_indexes lands with issue 7")

    # -- recovery ----------------------------------------------------------

    async def republish_facts(self, session_id: str) -> int:
        """Publish the session's facts the facts stream lacks; return how many.

        Reads the whole facts stream to learn what is there, so it is a
        recovery tool, not a hot path. Watchers are idempotent by
        ``(session_id, seq)`` (R4), so a fact published twice is harmless.
        """
        facts = [r for r in await self.read(session_id) if is_fact_record(r)]
        if not facts:
            return 0
        try:
            published = {
                f.seq
                for f in await self._range_facts("0-0")
                if f.session_id == session_id
            }
            todo = [r for r in facts if r.seq not in published]
            if todo:
                replies = await self._wire.call(
                    [_fact_command(session_id, r) for r in todo]
                )
                for reply in replies:
                    if isinstance(reply, ResponseError):
                        raise reply
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
            top = await self._wire.one(
                "XREVRANGE", stream_key(session_id), "+", "-", "COUNT", 1
            )
        except _DRIVER_ERRORS as exc:
            raise self._error("read the head of", exc) from exc
        if not top:
            self._heads.pop(session_id, None)
            return 0, ""
        record = _records_into([], top)[0]
        head = (record.seq, record.hash)
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
        args: list[Arg] = [
            "EVALSHA", _APPEND_SHA, 1, stream_key(session_id), expected_seq, prev_hash
        ]  # fmt: skip
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
        """One round trip: facts first, then the appends. Resolves every future."""
        try:
            try:
                replies = await self._round_trip(batch, facts)
            except _DRIVER_ERRORS as exc:
                self._requeue_facts(facts, exc)
                error = self._error("append to", exc)
                for item in batch:
                    self._heads.pop(item.session_id, None)
                    if not item.future.done():
                        item.future.set_exception(error)
                return False
            failed = [r for r in replies[: len(facts)] if isinstance(r, Exception)]
            if failed:
                log.warning(
                    "redis event store %s: %d facts not published (%s); "
                    "republish_facts(session_id) publishes them from the streams",
                    self.url,
                    len(failed),
                    failed[0],
                )
            for item, reply in zip(batch, replies[len(facts) :], strict=True):
                self._settle(item, reply)
            return True
        finally:
            # Cancelled mid-send: the outcome is unknown, and nobody may wait
            # on it forever. A retry is safe: the script is idempotent.
            self._fail(batch, f"an append to {self.url} was interrupted")

    async def _round_trip(
        self, batch: list[_Append], facts: list[tuple[str, StoredEvent]]
    ) -> list[Any]:
        commands: list[Command] = [_fact_command(sid, r) for sid, r in facts]
        commands.extend(item.args for item in batch)
        replies = await self._wire.call(commands)
        lost = [
            i
            for i in range(len(facts), len(replies))
            if isinstance(replies[i], NoScriptError)
        ]
        if lost:
            # The server lost its script cache (a restart): NOSCRIPT means the
            # script did not run, so sending those appends again is safe.
            await self._wire.one("SCRIPT", "LOAD", _APPEND_LUA)
            again = await self._wire.call([commands[i] for i in lost])
            for i, reply in zip(lost, again, strict=True):
                replies[i] = reply
        return replies

    def _settle(self, item: _Append, reply: Any) -> None:
        future = item.future
        if isinstance(reply, Exception):
            self._heads.pop(item.session_id, None)
            if not future.done():
                future.set_exception(self._error("append to", reply))
            return
        ok, seq = reply
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

    def _fail(self, items: list[_Append], why: str) -> None:
        for item in items:
            if not item.future.done():
                self._heads.pop(item.session_id, None)
                item.future.set_exception(StoreError(why))

    def _requeue_facts(
        self, facts: list[tuple[str, StoredEvent]], exc: BaseException
    ) -> None:
        if not facts:
            return
        kept = facts[: max(0, _FACT_BACKLOG_MAX - len(self._facts))]
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
            page = await self._wire.one(
                "XRANGE", FACTS_KEY, start, "+", "COUNT", _READ_PAGE
            )
            out.extend(_fact(entry) for entry in page)
            if len(page) < _READ_PAGE:
                return out
            start = f"({out[-1].id}"


def _records_into(out: list[StoredEvent], entries: Any) -> list[StoredEvent]:
    """Append the records of raw ``XRANGE`` entries to ``out``."""
    push = out.append
    for _id, fields in entries:
        # Invariant: the script writes seq, data, hash in this order.
        if len(fields) == 6 and (fields[0], fields[2], fields[4]) == _FIELDS:
            push(
                StoredEvent(seq=int(fields[1]), data=fields[3], hash=fields[5].decode())
            )
        else:
            # A damaged entry still yields a record, so verification names
            # its seq (the stream id is the seq) instead of crashing.
            named = dict(zip(fields[::2], fields[1::2], strict=False))
            id_seq = int(bytes(_id).rsplit(b"-", 1)[-1])
            try:
                seq = int(named.get(b"seq", id_seq))
            except ValueError:
                seq = id_seq
            push(
                StoredEvent(
                    seq=seq,
                    data=bytes(named.get(b"data", b"")),
                    hash=bytes(named.get(b"hash", b"")).decode(errors="replace"),
                )
            )
    return out


def _fact_command(session_id: str, record: StoredEvent) -> Command:
    return (
        "XADD", FACTS_KEY, "*",
        "session_id", session_id, "seq", record.seq, "data", record.data,
    )  # fmt: skip


def _fact(entry: Any) -> FactRecord:
    entry_id, fields = entry
    named = dict(zip(fields[::2], fields[1::2], strict=True))
    return FactRecord(
        id=entry_id.decode(),
        session_id=named[b"session_id"].decode(),
        seq=int(named[b"seq"]),
        data=named[b"data"],
    )


def _url_of(client: aioredis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    db = kwargs.get("db", 0)
    return f"redis://{host}:{port}/{db}"
