"""The commands that run an agent for others: ``serve``, ``recover``, ``mcp-proxy``.

Pattern: thin commands; each loads what it serves (an agent factory, an auth
         file, a proxy policy), hands it to ``helmlog.gateway.http.serve``,
         the runtime's ``recover_sessions`` or ``helmlog._proxy_cli``, and
         turns its errors into one line and an exit code.
Role:    the face; registers ``serve``, ``recover`` and ``mcp-proxy``.
Emits:   nothing itself; the agents they run record their sessions.

Laws: issue 11 (``serve`` refused without an auth file), issue 28 (it
prints the address it listens on, then an access log), R7/R22
(``recover`` exits 1 if a session could not be recovered), section P
(P26: ``mcp-proxy``'s upstream flags each have an environment twin and
take secrets only as a variable's name or a file's path).

Why the servers import inside their commands: ``import helmlog.cli`` loads
neither Starlette, uvicorn nor the MCP SDK.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from helmlog import HelmlogError
from helmlog._asks import load_factory
from helmlog._record import chain_key_from_env
from helmlog.runtime.lowlevel import recover_sessions

from ._app import STORE_ENV, ReadStore, app, fail, on_store, store_or_exit

SERVE_AGENT_HELP = (
    "The agent to serve: module:function taking the store, returning the agent "
    "(the current directory is importable)."
)
SERVE_STORE_HELP = (
    "Event store URL to record into: redis://host:port/db, or memory:// "
    "(sessions held by this process only). Default: $HELMLOG_STORE, else memory://."
)
SERVE_CLUSTER_HELP = (
    "Run the sessions on a Ray cluster's session hosts: a cluster NAME (a local "
    "Ray) or a Ray ADDRESS (host:port) to join; needs --store redis://..."
)
AUTH_HELP = (
    "The auth file (TOML): bearer tokens mapped to identities and roles, and an "
    "optional trusted proxy header (default: $HELMLOG_AUTH). Required."
)
FORWARDED_HELP = (
    "The reverse proxies whose X-Forwarded-For is believed (comma-separated "
    "addresses or networks). Default: none, so a request's client is its "
    "socket peer and the trusted header's 'from' is checked against it."
)
HEADER_TIMEOUT_HELP = (
    "Close a connection whose request head (request line and headers) is not "
    "in within this many seconds of opening, or of the request's first byte; "
    "408 if it had begun."
)
LOGIN_TTL_HELP = (
    "How long a sign-in on the approvals page lasts, in seconds (the cookie's "
    "Max-Age; the login is then forgotten by the server)."
)
ACCESS_LOG_HELP = (
    "Append the access log (one line per request: method, path, status, "
    "principal, duration; never a token, a cookie or a body) to FILE instead "
    "of stderr."
)
ACCESS_LOGGER = "helmlog.access"  # the gateway's access-log logger
ASK_TIMEOUT_HELP = (
    "Decline, as 'timeout', an ask not answered within this many seconds "
    "(an ask's own timeout_s wins)."
)


@app.command()
def serve(
    agent: Annotated[str, typer.Option(help=SERVE_AGENT_HELP)],
    store: Annotated[
        str, typer.Option(help=SERVE_STORE_HELP, envvar=STORE_ENV)
    ] = "memory://",
    cluster: Annotated[
        str | None, typer.Option(help=SERVE_CLUSTER_HELP, show_default=False)
    ] = None,
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port to listen on.")] = 8000,
    auth: Annotated[
        str | None, typer.Option(help=AUTH_HELP, show_default=False)
    ] = None,
    ask_timeout: Annotated[
        float | None, typer.Option(help=ASK_TIMEOUT_HELP, show_default=False)
    ] = None,
    forwarded_allow_ips: Annotated[
        str, typer.Option(help=FORWARDED_HELP, show_default=False)
    ] = "",
    max_body_bytes: Annotated[
        int,
        typer.Option(min=1, help="The largest request body, in bytes (413 past it)."),
    ] = 1024 * 1024,
    max_message_chars: Annotated[
        int, typer.Option(min=1, help="The longest message a session is sent.")
    ] = 64 * 1024,
    max_note_chars: Annotated[
        int, typer.Option(min=0, help="The longest note on an approval or decline.")
    ] = 4 * 1024,
    max_connections: Annotated[
        int, typer.Option(min=1, help="Connections served at once (503 past it).")
    ] = 1_000,
    header_timeout: Annotated[
        float, typer.Option(min=0.001, help=HEADER_TIMEOUT_HELP)
    ] = 10.0,
    login_ttl: Annotated[float, typer.Option(min=1.0, help=LOGIN_TTL_HELP)] = 28_800.0,
    access_log: Annotated[
        Path | None,
        typer.Option(help=ACCESS_LOG_HELP, metavar="FILE", show_default=False),
    ] = None,
) -> None:
    """Serve the HTTP API and the approvals page.

    Sessions, their snapshots and facts (SSE), the pending asks and their
    decisions; the approver is whoever authenticated, never a field. Prints
    the address it listens on (the real port with --port 0), then one access
    log line per request.
    """
    from helmlog.gateway.http import AuthConfigError, Authenticator, ServeConfig
    from helmlog.gateway.http import serve as run_server
    from helmlog.runtime.lowlevel import settle_collector

    err = Console(stderr=True)
    path = auth or os.environ.get("HELMLOG_AUTH")
    if not path:
        typer.echo(
            "helmlog serve needs --auth FILE (or $HELMLOG_AUTH): with no one "
            "authorized, nothing would be served",
            err=True,
        )
        raise typer.Exit(2)
    try:
        authenticator = Authenticator.from_file(path)
        factory = load_factory(agent)
        proxies = _proxies(forwarded_allow_ips)
    except (AuthConfigError, ValueError) as exc:
        raise fail(err, "serve", exc) from None
    config = ServeConfig(
        factory=factory,
        auth=authenticator,
        store_url=store,
        cluster=cluster,
        chain_key=chain_key_from_env(),
        ask_timeout_s=ask_timeout,
        forwarded_allow_ips=proxies,
        max_body_bytes=max_body_bytes,
        max_message_chars=max_message_chars,
        max_note_chars=max_note_chars,
        max_connections=max_connections,
        header_timeout_s=header_timeout,
        login_ttl_s=login_ttl,
    )

    def ready(url: str) -> None:
        typer.echo(f"helmlog serve on {url}")
        # Listening: imported and built, what lives as long as the server is
        # out of the collector's walk from now on (issue 29 item 2).
        settle_collector()

    try:
        with _access_log(access_log):
            run_server(config, host, port, ready)
    except KeyboardInterrupt:
        return  # uvicorn re-raises the Ctrl-C it shut down on: a clean stop
    except (HelmlogError, ValueError, OSError) as exc:
        raise fail(err, "serve", exc) from None


@contextlib.contextmanager
def _access_log(path: Path | None) -> Iterator[None]:
    """Give the gateway's access logger a handler (stderr, or ``path``
    appended) for the block: one line per request, stamped in UTC."""
    handler: logging.Handler = (
        logging.StreamHandler(sys.stderr)
        if path is None
        else logging.FileHandler(path, encoding="utf-8")
    )
    stamp = logging.Formatter(
        "%(asctime)s.%(msecs)03dZ %(message)s", datefmt="%Y-%m-%dT%H:%M:%S"
    )
    stamp.converter = time.gmtime
    handler.setFormatter(stamp)
    logger = logging.getLogger(ACCESS_LOGGER)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # once, whatever the root logger does
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        handler.close()


RECOVER_SESSION_ARG = (
    "The session to recover; without it, every session the store's open-turns "
    "index names."
)
RECOVER_AGENT_HELP = (
    "The agent that runs the sessions: module:function taking the store, returning it."
)


@app.command()
def recover(
    agent: Annotated[str, typer.Option(help=RECOVER_AGENT_HELP)],
    session: Annotated[
        str | None, typer.Argument(help=RECOVER_SESSION_ARG, show_default=False)
    ] = None,
    store: ReadStore = None,
) -> None:
    """Finish turns a stopped host left unfinished: one session, or all.

    A call recorded as dispatched without a result is not run again (unless
    its tool is idempotent); the model reads that its outcome is unknown, and
    the turn goes on. Exits 1 if any session could not be recovered.
    """
    store = store_or_exit(store, "recover")
    err = Console(stderr=True)
    try:
        factory = load_factory(agent)
        done = on_store(
            store, lambda opened: recover_sessions(opened, factory, session)
        )
    except (HelmlogError, ValueError, OSError) as exc:
        raise fail(err, "recover", exc) from None
    for item in done:
        typer.echo(item.line())
    if session is None:
        finished = sum(d.outcome in ("finished", "paused") for d in done)
        typer.echo(
            f"finished {finished} turn(s) of {len(done)} session(s) "
            "the open-turns index named"
        )
    if any(d.outcome == "failed" for d in done):
        raise typer.Exit(1)


UPSTREAM_HELP = 'The upstream MCP server as a command line ("python server.py").'
UPSTREAM_URL_HELP = "The upstream MCP server's Streamable HTTP URL."
HTTP_HELP = "Serve clients over Streamable HTTP on HOST:PORT (default: stdio)."
POLICY_HELP = (
    "module:attr naming a mapping of McpProxy options, importable from the "
    "current directory."
)
PROXY_STORE_HELP = (
    "Event store URL for the proxy's sessions (governance rows, the audit with "
    "$HELMLOG_AUDIT_SECRET set): memory:// or redis://host:port/db."
)
HEADER_HELP = (
    "A header for every request to the --upstream-url, 'Name: value' "
    "(repeatable); ${VAR} in the value is the environment variable's value, "
    "and Authorization/Cookie values must come that way. As an environment "
    "variable: $HELMLOG_UPSTREAM_HEADERS, one header a line."
)
HEADER_ENV_HELP = (
    "A header whose value is the environment variable VAR's: Name=VAR "
    "(repeatable), e.g. Authorization=UPSTREAM_AUTH."
)
BEARER_ENV_HELP = (
    "Send 'Authorization: Bearer <token>' with the token read from the "
    "environment variable VAR (the token is never a flag)."
)
BEARER_FILE_HELP = "Send a bearer token read from PATH (one line)."
OAUTH_HELP = (
    "Get the upstream's token with the OAuth client-credentials grant (the "
    "SDK's provider: discovery on the upstream's 401, a token from the issuer)."
)
OAUTH_ISSUER_HELP = (
    "The authorization server's issuer URL; the client secret is only sent to it."
)
OAUTH_CLIENT_ID_HELP = "The OAuth client id."
OAUTH_SECRET_ENV_HELP = (
    "Read the OAuth client secret from the environment variable VAR."
)
OAUTH_SECRET_FILE_HELP = "Read the OAuth client secret from PATH."
OAUTH_SCOPE_HELP = "The scopes to ask for, space-separated."
OAUTH_CACHE_HELP = (
    "Keep the OAuth token in this JSON file (mode 0600) between runs; "
    "default: in memory."
)
CA_FILE_HELP = (
    "Trust the CAs in this PEM file for an https:// upstream, instead of the "
    "system's store."
)
INSECURE_HELP = (
    "Do not verify an https:// upstream's certificate. Dangerous: anyone on "
    "the path can read and change the traffic, credentials included."
)
UPSTREAM_TIMEOUT_HELP = "Connect/write timeout to the upstream, in seconds."
UPSTREAM_READ_TIMEOUT_HELP = (
    "How long a read from the upstream may wait, in seconds (a reply's stream "
    "may stay open while a tool runs)."
)
HEADERS_ENV = "HELMLOG_UPSTREAM_HEADERS"


def _opt(help_text: str, env: str, *names: str, metavar: str | None = None) -> Any:
    """A ``typer.Option`` of the upstream settings, with its environment twin."""
    return typer.Option(
        *names, help=help_text, envvar=env, show_envvar=True, metavar=metavar
    )


@app.command("mcp-proxy")
def mcp_proxy(
    upstream: Annotated[str | None, typer.Option(help=UPSTREAM_HELP)] = None,
    upstream_url: Annotated[str | None, typer.Option(help=UPSTREAM_URL_HELP)] = None,
    http: Annotated[str | None, typer.Option(help=HTTP_HELP)] = None,
    policy: Annotated[str | None, typer.Option(help=POLICY_HELP)] = None,
    store: Annotated[
        str | None, typer.Option(help=PROXY_STORE_HELP, envvar=STORE_ENV)
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", "-H", help=HEADER_HELP, metavar="'NAME: VALUE'"),
    ] = None,
    header_env: Annotated[
        list[str] | None,
        _opt(HEADER_ENV_HELP, "HELMLOG_UPSTREAM_HEADER_ENV", metavar="NAME=VAR"),
    ] = None,
    bearer_env: Annotated[
        str | None,
        _opt(BEARER_ENV_HELP, "HELMLOG_UPSTREAM_BEARER_ENV", metavar="VAR"),
    ] = None,
    bearer_file: Annotated[
        Path | None,
        _opt(BEARER_FILE_HELP, "HELMLOG_UPSTREAM_BEARER_FILE", metavar="PATH"),
    ] = None,
    oauth: Annotated[
        bool, _opt(OAUTH_HELP, "HELMLOG_UPSTREAM_OAUTH", "--oauth")
    ] = False,
    oauth_issuer: Annotated[
        str | None,
        _opt(OAUTH_ISSUER_HELP, "HELMLOG_UPSTREAM_OAUTH_ISSUER", metavar="URL"),
    ] = None,
    oauth_client_id: Annotated[
        str | None, _opt(OAUTH_CLIENT_ID_HELP, "HELMLOG_UPSTREAM_OAUTH_CLIENT_ID")
    ] = None,
    oauth_client_secret_env: Annotated[
        str | None,
        _opt(
            OAUTH_SECRET_ENV_HELP,
            "HELMLOG_UPSTREAM_OAUTH_CLIENT_SECRET_ENV",
            metavar="VAR",
        ),
    ] = None,
    oauth_client_secret_file: Annotated[
        Path | None,
        _opt(
            OAUTH_SECRET_FILE_HELP,
            "HELMLOG_UPSTREAM_OAUTH_CLIENT_SECRET_FILE",
            metavar="PATH",
        ),
    ] = None,
    oauth_scope: Annotated[
        str | None, _opt(OAUTH_SCOPE_HELP, "HELMLOG_UPSTREAM_OAUTH_SCOPE")
    ] = None,
    oauth_token_cache: Annotated[
        Path | None,
        _opt(OAUTH_CACHE_HELP, "HELMLOG_UPSTREAM_OAUTH_TOKEN_CACHE", metavar="PATH"),
    ] = None,
    upstream_ca_file: Annotated[
        Path | None, _opt(CA_FILE_HELP, "HELMLOG_UPSTREAM_CA_FILE", metavar="PATH")
    ] = None,
    upstream_insecure: Annotated[
        bool,
        _opt(INSECURE_HELP, "HELMLOG_UPSTREAM_INSECURE", "--upstream-insecure"),
    ] = False,
    upstream_timeout: Annotated[
        float | None,
        _opt(UPSTREAM_TIMEOUT_HELP, "HELMLOG_UPSTREAM_TIMEOUT", metavar="SECONDS"),
    ] = None,
    upstream_read_timeout: Annotated[
        float | None,
        _opt(
            UPSTREAM_READ_TIMEOUT_HELP,
            "HELMLOG_UPSTREAM_READ_TIMEOUT",
            metavar="SECONDS",
        ),
    ] = None,
) -> None:
    """Run the MCP governance proxy in front of an MCP server."""
    from helmlog._proxy_cli import ProxyCliError, build_proxy, run, run_proxy
    from helmlog._upstream_options import UpstreamFlags

    if not header and os.environ.get(HEADERS_ENV):
        # One header a line: a header's value may hold spaces.
        header = [line for line in os.environ[HEADERS_ENV].splitlines() if line]
    flags = UpstreamFlags(
        headers=tuple(header or ()),
        header_env=tuple(header_env or ()),
        bearer_env=bearer_env,
        bearer_file=bearer_file,
        oauth=oauth,
        oauth_issuer=oauth_issuer,
        oauth_client_id=oauth_client_id,
        oauth_client_secret_env=oauth_client_secret_env,
        oauth_client_secret_file=oauth_client_secret_file,
        oauth_scope=oauth_scope,
        oauth_token_cache=oauth_token_cache,
        ca_file=upstream_ca_file,
        insecure=upstream_insecure,
        timeout_s=upstream_timeout,
        read_timeout_s=upstream_read_timeout,
    )
    if upstream_insecure:
        typer.echo(
            "helmlog mcp-proxy: WARNING: --upstream-insecure: the upstream's TLS "
            "certificate is NOT verified; anyone on the path can read and change "
            "its traffic, credentials included",
            err=True,
        )
    try:
        proxy = build_proxy(upstream, upstream_url, policy, store, flags)
        run(run_proxy(proxy, http, lambda line: typer.echo(line, err=True)))
    except KeyboardInterrupt:
        return
    except (ProxyCliError, HelmlogError, OSError) as exc:
        # One line, never wrapped: a script reads the reason from stderr.
        typer.echo(f"helmlog mcp-proxy failed: {exc}", err=True)
        raise typer.Exit(2) from None


def _proxies(text: str) -> tuple[str, ...]:
    """``--forwarded-allow-ips``: addresses or networks, checked (H1)."""
    import ipaddress

    named = tuple(part.strip() for part in text.split(",") if part.strip())
    for part in named:
        if part == "*":
            continue  # the operator's explicit "every peer is my proxy"
        try:
            ipaddress.ip_network(part, strict=False)
        except ValueError:
            raise ValueError(
                f"--forwarded-allow-ips: {part!r} is not an address or network"
            ) from None
    return named
