"""A real ``helmlog serve`` app on uvicorn, in a thread, for the HTTP tests.

The server runs its own event loop in a thread (the store it opens lives on
that loop); tests talk to it over a real socket with httpx2, as any client
would. ``stop()`` ends its event streams and waits for its thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2

from helmlog.gateway.http import Authenticator, ServeConfig, Server
from tests.fixtures_redis import free_port
from tests.polling import until_sync

SESSION_TOKEN = "s-token-alice"
APPROVER_TOKEN = "a-token-dana"
OTHER_APPROVER_TOKEN = "a-token-erin"
AUDITOR_TOKEN = "r-token-olga"  # reads sessions and history, decides nothing
AUTH = {
    "tokens": [
        {"identity": "alice@app", "roles": ["session"], "token": SESSION_TOKEN},
        {
            "identity": "dana@ops",
            "roles": ["approver"],
            "apps": ["*"],
            "token": APPROVER_TOKEN,
        },
        {
            "identity": "erin@ops",
            "roles": ["approver"],
            "apps": ["*"],
            "token": OTHER_APPROVER_TOKEN,
        },
        {
            "identity": "olga@audit",
            "roles": ["auditor"],
            "apps": ["*"],
            "token": AUDITOR_TOKEN,
        },
    ],
    "trusted_header": {
        "identity": "X-Forwarded-Email",
        "roles": ["approver"],
        "apps": ["*"],
        "from": ["127.0.0.1/32"],
    },
}


def bearer(token: str) -> dict[str, str]:
    """The Authorization header for ``token``."""
    return {"Authorization": f"Bearer {token}"}


class Running:
    """A started server: its URL and its thread."""

    def __init__(self, server: Server, thread: threading.Thread, url: str) -> None:
        self.server = server
        self.thread = thread
        self.url = url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        assert not self.thread.is_alive(), "the server did not stop"


@contextmanager
def running(
    factory: Callable[..., Any],
    store_url: str,
    *,
    ask_timeout_s: float | None = None,
    sweep_s: float = 0.2,
    cluster: str | None = None,
    auth: dict[str, Any] | None = None,
    forwarded_allow_ips: tuple[str, ...] = (),
    **limits: Any,
) -> Iterator[Running]:
    """Serve ``factory``'s agent on ``store_url`` until the block ends
    (``cluster``: on that Ray cluster's session hosts; ``auth``: another auth
    file than ``AUTH``; ``forwarded_allow_ips``: the proxies believed, H1;
    ``limits``: ``ServeConfig``'s H3 limits)."""
    config = ServeConfig(
        factory=factory,
        auth=Authenticator.from_mapping(AUTH if auth is None else auth),
        store_url=store_url,
        ask_timeout_s=ask_timeout_s,
        sweep_s=sweep_s,
        cluster=cluster,
        forwarded_allow_ips=forwarded_allow_ips,
        **limits,
    )
    port = free_port()
    server = Server(config, "127.0.0.1", port)
    thread = threading.Thread(target=server.run, name="helmlog-serve", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    until_sync("helmlog serve started", lambda: server.started or not thread.is_alive())
    if not server.started:
        raise RuntimeError("helmlog serve did not start")
    handle = Running(server, thread, url)
    try:
        yield handle
    finally:
        handle.stop()


def client(url: str, token: str | None = None) -> httpx2.Client:
    """A client of the server, with a bearer token when given."""
    return httpx2.Client(
        base_url=url, headers=bearer(token) if token else {}, timeout=30
    )
