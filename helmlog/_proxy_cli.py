"""``helmlog mcp-proxy``: the MCP governance proxy from the shell.

Pattern: a thin runner: parse the upstream, import the policy (``McpProxy``
         options), open the store, start the proxy on stdio or HTTP.
Role:    the face; ``helmlog.cli`` calls ``run_proxy``, prints errors as one line.
Emits:   what the proxy records (its sessions' streams in ``--store``).

Laws: R18, P24 (``--http`` binds loopback by default), P25 (an upstream
that does not start is a clean error), P26 (an ``--upstream-url`` with its
headers, credentials and TLS: ``_upstream_options``), issue 10 item 6
(one-line errors).

Why uvloop where installed: most of a hop's time is the event loop's own.
Why the current directory goes on the import path: a policy file sits beside
the operator, never beside the ``helmlog`` script.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import inspect
import os
import shlex
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from helmlog._named import import_named
from helmlog._upstream_options import UpstreamFlags, http_upstream
from helmlog.events import open_event_store
from helmlog.gateway import McpProxy, ProxyAudit
from helmlog.runtime import AgentFactoryError

AUDIT_SECRET_ENV = "HELMLOG_AUDIT_SECRET"
AUDIT_KEY_ID_ENV = "HELMLOG_AUDIT_KEY_ID"


class ProxyCliError(ValueError):
    """A bad option, policy or upstream: printed as one line."""


def load_attr(spec: str, option: str) -> Any:
    """``module:attr`` → the attribute, imported as every command's
    ``--agent`` is (the current directory first on the import path)."""
    try:
        return import_named(spec, what="attribute")
    except AgentFactoryError as exc:
        raise ProxyCliError(f"{option} {spec!r}: {exc.detail}") from None


OPTIONS = frozenset(inspect.signature(McpProxy.__init__).parameters) - {
    "self",
    "upstream",
}


def load_policy(spec: str | None) -> dict[str, Any]:
    """The policy's options (a mapping, or a function returning one)."""
    if spec is None:
        return {}
    value = load_attr(spec, "--policy")
    if callable(value) and not isinstance(value, Mapping):
        value = value()
    if not isinstance(value, Mapping):
        raise ProxyCliError(
            f"--policy {spec} is a {type(value).__name__}, not a mapping of "
            "McpProxy options"
        )
    unknown = sorted(set(value) - OPTIONS)
    if unknown:
        raise ProxyCliError(
            f"--policy {spec}: unknown McpProxy option(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(OPTIONS))}"
        )
    return dict(value)


def build_proxy(
    upstream: str | None,
    upstream_url: str | None,
    policy: str | None,
    store: str | None,
    flags: UpstreamFlags | None = None,
) -> McpProxy:
    """The proxy the options describe.

    Raises:
        ProxyCliError: a bad option or policy.
        UpstreamConfigError: bad upstream settings (``flags``), before any
            connection.
    """
    if (upstream is None) == (upstream_url is None):
        raise ProxyCliError("give exactly one of --upstream or --upstream-url")
    flags = flags or UpstreamFlags()
    target: Any
    if upstream is not None:
        if flags.given():
            raise ProxyCliError(
                f"{', '.join(flags.given())}: for an --upstream-url only "
                "(a command's credentials are its environment)"
            )
        target = shlex.split(upstream)  # a command line, as the shell splits it
        if not target:
            raise ProxyCliError("--upstream needs a command")
    else:
        assert upstream_url is not None
        target = http_upstream(upstream_url, flags)
    options = load_policy(policy)
    opened = open_event_store(store) if store else None
    secret = os.environ.get(AUDIT_SECRET_ENV)
    audit = options.get("audit")
    if audit is None and secret:
        key_id = os.environ.get(AUDIT_KEY_ID_ENV, "default")
        options["audit"] = ProxyAudit(secret.encode(), key_id, opened)
    elif isinstance(audit, ProxyAudit) and audit.store is None and opened:
        # The policy's audit, keeping all it set (drain_s), on --store.
        options["audit"] = dataclasses.replace(audit, store=opened)
    if opened is not None and "store" not in options:
        options["store"] = opened
    try:
        return McpProxy(target, **options)
    except (TypeError, ValueError) as exc:
        raise ProxyCliError(f"--policy: {exc}") from None


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ProxyCliError(f"--http takes HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


async def run_proxy(
    proxy: McpProxy, http: str | None, announce: Callable[[str], None]
) -> None:
    """Start the upstream, then serve on stdio or HTTP until stopped."""
    bind = parse_http(http) if http else None
    async with proxy:
        # Everything imported and built so far lives as long as the process:
        # out of the collector's sight, a collection no longer walks it, so
        # the collections that calls' short-lived objects trigger stay cheap.
        gc.freeze()
        if bind is None:
            await proxy.serve_stdio()
            return
        await proxy.serve_http(
            bind[0], bind[1], ready=lambda url: announce(f"helmlog mcp-proxy on {url}")
        )


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop's event loop where installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)
