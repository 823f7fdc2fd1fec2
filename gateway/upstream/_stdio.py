"""The proxy's stdio link to its upstream: the SDK's ``stdio_client``.

Pattern: a client transport: the child ``command`` spawned by the SDK (its
         allow-listed environment, process group, stderr and shutdown: close
         stdin, SIGTERM, SIGKILL), yielding the ``ClientSession``'s streams.
Role:    gateway layer; ``Upstream`` opens it for a command upstream.
Emits:   nothing; the child's stderr is passed through to ours.

Laws: P25 (a command that does not start or answer is an ``UpstreamError``;
an upstream that exits fails every pending call), issue 26 item 1.

Why the SDK's and no longer our own pipes: on v2 the SDK's reader is the
dispatcher's, and the measured gain of a hand-read pipe did not pay
(bench/proxy.py); one transport path is one to keep right.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

from mcp.client.stdio import StdioServerParameters, stdio_client


def _errlog() -> Any:
    """Our stderr for the child's, when it is a real file; else a null sink."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__
    return sys.stderr


@contextlib.asynccontextmanager
async def upstream_stdio(
    command: Sequence[str], label: str
) -> AsyncIterator[tuple[Any, Any]]:
    """``(read, write)`` for a ``ClientSession`` to the child ``command``."""
    if not command:
        raise ValueError("an upstream command needs at least a program")
    params = StdioServerParameters(
        command=str(command[0]), args=[str(a) for a in command[1:]]
    )
    async with stdio_client(params, errlog=_errlog()) as streams:
        yield streams
