"""The proxy's stdio link to its upstream: the SDK's ``stdio_client``, or our pipes.

Pattern: a client transport: the child ``command`` spawned by the SDK (its
         allow-listed environment, process group, stderr and shutdown: close
         stdin, SIGTERM, SIGKILL), yielding the ``ClientSession``'s streams;
         with ``fast``, the same child on ``gateway.fast.stdio_upstream``'s
         pipes, which also carry the raw ``tools/call`` (a third item).
Role:    gateway layer; ``Upstream`` opens it for a command upstream.
Emits:   nothing; the child's stderr is passed through to ours.

Laws: P25 (a command that does not start or answer is an ``UpstreamError``;
an upstream that exits fails every pending call), issue 26 item 1.

Why two: the pipes pay (bench/proxy.py, ``gateway/fast``'s docstring); the
SDK's transport is the reference the differential tests compare them with.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

from mcp.client.stdio import StdioServerParameters, stdio_client

from ..fast.stdio_upstream import RawCalls, open_pipes


def _errlog() -> Any:
    """Our stderr for the child's, when it is a real file; else a null sink."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__
    return sys.stderr


@contextlib.asynccontextmanager
async def upstream_stdio(
    command: Sequence[str], label: str, fast: bool = False
) -> AsyncIterator[tuple[Any, Any, RawCalls | None]]:
    """``(read, write, raw)`` for a ``ClientSession`` to the child ``command``;
    ``raw`` is the fast path's calls with ``fast``, else None."""
    if not command:
        raise ValueError("an upstream command needs at least a program")
    if fast:
        async with open_pipes(command, label) as piped:
            yield piped
        return
    params = StdioServerParameters(
        command=str(command[0]), args=[str(a) for a in command[1:]]
    )
    async with stdio_client(params, errlog=_errlog()) as (read, write):
        yield read, write, None
