"""One Redis node's round trip: our own packing, hiredis replies, R24's line.

Pattern: a thin transport on a redis-py blocking pool (redis-py's
         connections, TLS, timeouts and errors; our RESP packing, since
         redis-py's generic packing and reply callbacks cost more than the
         round trip itself: ``bench/ledger.py``).
Role:    events layer, ``events/redis``; ``topology.Routes`` holds one per node.

Laws: R5 (a full pool waits; past ``pool_timeout`` a ``PoolExhaustedError``),
R24 (a round trip written whose replies did not all come is a
``ReplyLostError``: what ran is unknown; one that failed before a byte was
written is not), and a whole round trip has one read deadline (the socket
timeout), so a stopped server fails it instead of hanging it.
"""

from __future__ import annotations

import asyncio
import math
import select
from collections.abc import Sequence
from typing import Any, Final

import hiredis
import redis.asyncio as aioredis
from redis._parsers import _AsyncHiredisParser
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    MaxConnectionsError,
    NoScriptError,
    RedisError,
    ResponseError,
)

from .scripts import SCRIPTS

# Driver errors that mean "the store failed"; OSError covers sockets and
# TimeoutError, which redis-py does not always wrap.
DRIVER_ERRORS: Final = (RedisError, OSError)

Arg = bytes | str | int
# A command: its arguments, or ``bytes`` already RESP-encoded (``pack``).
Command = Sequence[Arg]


def pack(command: Sequence[Arg]) -> bytes:
    """One command RESP-encoded, to be sent as it is (a hot path packs once)."""
    # hiredis's stub types the argument as a 1-tuple; it takes any length.
    packed: bytes = hiredis.pack_command(tuple(command))  # type: ignore[arg-type]
    return packed


def _pack(commands: Sequence[Command]) -> bytes:
    """RESP-encode commands (arguments are bytes, str or int) into one write;
    a command given as ``bytes`` is already encoded."""
    encode = hiredis.pack_command
    return b"".join(
        [
            command if type(command) is bytes else encode(tuple(command))  # type: ignore[arg-type]
            for command in commands
        ]
    )


class PoolExhaustedError(RedisConnectionError):
    """No connection of a full pool came free in time (becomes a StoreError)."""


class ReplyLostError(RedisConnectionError):
    """Commands were written and their replies did not come (R24).

    Whether they ran is unknown: the server may have run them and died, or
    closed the socket, before its reply arrived. A failure before anything
    was written (a refused connection, an exhausted pool) is never this.
    """


def _lost(name: str, exc: BaseException) -> ReplyLostError:
    lost = ReplyLostError(
        f"the reply from {name} was lost after the commands were sent "
        f"({type(exc).__name__}: {exc})"
    )
    lost.__cause__ = exc
    return lost


def _closed_by_peer(conn: Any) -> bool:
    """Whether the server closed a pooled connection we have not written to.

    Read from the connection's stream reader (redis-py keeps it as
    ``_reader``): end of stream, or a reset, already seen by the event loop;
    else from the socket itself, which an idle connection's server has
    written nothing to unless it closed it (its end of stream has arrived,
    and the loop may not have read it yet when round trips come in quick
    succession).
    """
    reader = getattr(conn, "_reader", None)
    if reader is None:
        return False
    if reader.at_eof() or reader.exception() is not None:
        return True
    writer = getattr(conn, "_writer", None)
    sock = writer.get_extra_info("socket") if writer is not None else None
    if sock is None:
        return False
    if not hasattr(select, "poll"):
        return False  # no poll(2) here (Windows): the loop's view above decides
    poller = select.poll()
    try:
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True  # the descriptor is gone: the connection with it


def _marked(replies: list[Any], name: str, only: Sequence[int] | None = None) -> None:
    """Error replies of commands an earlier try sent, as ``ReplyLostError``.

    A resend's error reply (``LOADING`` while a restarted server reads its
    AOF, ``NOSCRIPT``) says only that the resend did not run; the first
    send's fate is still unknown. A success reply is the truth either way:
    the scripts are idempotent, so a resend reports an append already in
    the stream as landed.
    """
    for i in range(len(replies)) if only is None else only:
        if isinstance(replies[i], ResponseError):
            replies[i] = _lost(name, replies[i])


async def _replies(conn: Any, n: int) -> list[Any]:
    """The next ``n`` replies on ``conn``, raw (stored bytes stay bytes), an
    error reply in its command's place as a ``ResponseError``.

    Read from the connection's own hiredis parser (redis-py keeps it as
    ``_parser``; the connection's ``read_response`` wraps each reply in a
    timeout and health bookkeeping the round trip's one deadline replaces,
    and the parser's own is a coroutine per reply); a connection without it
    is read through ``read_response``.
    """
    replies: list[Any] = []
    parser = getattr(conn, "_parser", None)
    if not isinstance(parser, _AsyncHiredisParser):
        for _ in range(n):
            try:
                # math.inf: no per-read timeout (the round trip has one).
                replies.append(
                    await conn.read_response(disable_decoding=True, timeout=math.inf)
                )
            except ResponseError as exc:
                replies.append(exc)
        return replies
    if not parser._connected:
        raise RedisConnectionError("Connection closed by server.")
    # The parser's hiredis reader, drained in one loop: the socket is read
    # only when a reply is incomplete (a pipeline's replies mostly arrive in
    # one read), and no coroutine is made per reply (bench/ledger.py).
    reader: Any = parser._reader
    gets = reader.gets
    read_more: Any = parser.read_from_socket
    push = replies.append
    push_type = parser._hiredis_PushNotificationType
    try:
        while len(replies) < n:
            reply = gets(False)
            while reply is NOT_ENOUGH_DATA:
                await read_more()
                reply = gets(False)
            # An error reply comes back as its ResponseError; a broken
            # connection (and LOADING, a ConnectionError) is raised, as
            # redis-py's read_response does.
            if isinstance(reply, RedisConnectionError):
                raise reply
            if isinstance(reply, list) and reply:
                if isinstance(reply[0], RedisConnectionError):
                    raise reply[0]
            elif push_type is not None and isinstance(reply, push_type):
                # A RESP3 push (never asked for here): not a command's reply.
                await parser.handle_push_response(reply)
                continue
            push(reply)
    except OSError as exc:
        # The socket failed mid-read: what redis-py's read_response says.
        raise RedisConnectionError(f"Error while reading a reply: {exc}") from exc
    return replies


class Wire:
    """Round trips on one node's redis-py pool: our packing, hiredis replies.

    Replies come back as the server sent them (no redis-py callbacks); an
    error reply takes its command's place as a ``ResponseError``.
    """

    def __init__(self, pool: aioredis.ConnectionPool, name: str) -> None:
        self.pool = pool
        self.name = name

    async def _acquire(self) -> Any:
        try:
            return await self.pool.get_connection()  # type: ignore[no-untyped-call]
        except MaxConnectionsError as exc:
            raise self._exhausted(None) from exc
        except RedisConnectionError as exc:
            if isinstance(exc.__cause__, TimeoutError):
                raise self._exhausted(getattr(self.pool, "timeout", None)) from exc
            raise

    def _exhausted(self, waited: float | None) -> PoolExhaustedError:
        size = getattr(self.pool, "max_connections", "?")
        after = f" for {waited:g} s" if waited is not None else ""
        return PoolExhaustedError(
            f"the pool of {size} connections to {self.name} was exhausted{after} "
            "(raise ?max_connections= or ?pool_timeout=)"
        )

    async def call(self, commands: Sequence[Command]) -> list[Any]:
        """Send ``commands`` in one write; their replies, in order.

        Raises:
            ReplyLostError: the commands were sent (by this try or the one
                before it) and their replies did not come (R24).
        """
        replies, lost = await self._call(commands)
        if lost:
            _marked(replies, self.name)
        return replies

    async def _call(self, commands: Sequence[Command]) -> tuple[list[Any], bool]:
        """``call``'s replies, unmarked, and whether a first try was sent and
        its reply lost (then an error reply speaks only for the resend)."""
        packed = _pack(commands)
        lost: BaseException | None = None
        for attempt in (1, 2):
            try:
                conn = await self._acquire()
            except DRIVER_ERRORS as exc:
                # Nothing of this try was written; the one before may have been.
                if lost is not None:
                    raise _lost(self.name, lost) from exc
                raise
            sent = False
            try:
                if conn.is_connected and _closed_by_peer(conn):
                    # The server closed it before we wrote (a restart):
                    # nothing written to it could run; connect afresh.
                    await conn.disconnect()
                if not conn.is_connected:
                    await conn.connect()
                # R24: from the first byte written, what runs is unknown
                # until every reply has come.
                sent = True
                await conn.send_packed_command(packed, check_health=False)
                # One deadline (the socket timeout) for the whole round trip,
                # not one per reply: redis-py's per-read timeout costs more
                # than parsing a reply (bench/ledger.py).
                async with asyncio.timeout(conn.socket_timeout):
                    replies = await _replies(conn, len(commands))
                return replies, lost is not None
            except RedisConnectionError as exc:
                await conn.disconnect()
                if sent:
                    lost = exc
                # A pooled socket the server closed (a restart) fails once.
                # Sending again is safe: reads are reads, the scripts are
                # idempotent, and facts are at-least-once (R4).
                if attempt == 2:
                    if lost is not None:
                        raise _lost(self.name, exc) from exc
                    raise
            except DRIVER_ERRORS as exc:
                # A timeout: the server may still be running the commands.
                await conn.disconnect()
                if sent or lost is not None:
                    raise _lost(self.name, exc) from exc
                raise
            except BaseException:
                # Replies may be left unread: the socket must not be reused.
                await conn.disconnect()
                raise
            finally:
                await self.pool.release(conn)
        raise AssertionError("unreachable")

    async def call_loaded(self, commands: Sequence[Command]) -> list[Any]:
        """``call``, loading the scripts and resending what met NOSCRIPT."""
        replies, lost = await self._call(commands)
        missing = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if missing:
            # The server lost its script cache (a restart, a new node):
            # NOSCRIPT means the script did not run, so resending is safe.
            try:
                await self.call([("SCRIPT", "LOAD", s) for s in SCRIPTS])
                again, lost_again = await self._call([commands[i] for i in missing])
            except DRIVER_ERRORS as exc:
                if lost and not isinstance(exc, ReplyLostError):
                    raise _lost(self.name, exc) from exc
                raise
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
            if lost_again and not lost:
                _marked(replies, self.name, missing)
        if lost:
            _marked(replies, self.name)
        return replies
