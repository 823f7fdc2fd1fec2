"""The MCP proxy on real stdio pipes, for the fast lane's subprocess tests.

Pattern: a script module (``python -m`` this): an ``McpProxy`` in front of the
         in-process FastMCP upstream, served by ``serve_stdio`` (the loop's
         own pipes, where the fast lane reads lines).
Role:    started by ``test_proxy_fast.py``; ``--sdk`` turns the fast lane off
         (the SDK path, to compare with), ``--middleware`` adds a renaming
         layer, ``--answered PATH`` writes how many calls the lane answered.
Emits:   nothing beyond the proxy's own records (in this process's memory).

Laws: none itself; P25's transparency is tested with it.

Why a module and not a string of code: ``-m`` keeps it importable and linted.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from helmlog.gateway import McpProxy
from tests.unit.gateway.upstream_server import UPSTREAM


async def alias_to_echo(req: Any, next: Any, ctx: Any) -> Any:
    """A layer that forwards ``alias`` as ``echo`` (a rename, P10's subject)."""
    if req.params.name == "alias":
        params = req.params.model_copy(update={"name": "echo"})
        req = req.model_copy(update={"params": params})
    return await next(req)


def options(middleware: bool) -> dict[str, Any]:
    """The proxy options every fast-lane comparison uses."""
    out: dict[str, Any] = {"hidden_tools": {"delete_everything"}}
    if middleware:
        out["tool_middleware"] = [alias_to_echo]
    return out


async def main(sdk: bool, middleware: bool, answered: str | None) -> None:
    proxy = McpProxy(UPSTREAM, **options(middleware))
    proxy.fast_calls = not sdk
    opened: list[Any] = []
    open_session = proxy.open_session

    def keep(**kw: Any) -> Any:
        opened.append(open_session(**kw))
        return opened[-1]

    proxy.open_session = keep  # type: ignore[method-assign]
    async with proxy:
        await proxy.serve_stdio()
    if answered is not None:
        Path(answered).write_text(str(sum(s.answered for s in opened)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sdk", action="store_true")
    parser.add_argument("--middleware", action="store_true")
    parser.add_argument("--answered")
    args = parser.parse_args()
    asyncio.run(main(args.sdk, args.middleware, args.answered))
