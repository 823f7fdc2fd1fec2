"""Who is asking, behind proxies and beside sidecars (issue 24 item 1, H1).

Pattern: a real ``helmlog serve`` (uvicorn on a free loopback port, real
         Redis) and real HTTP clients on the same host, sending what a
         hostile local process (a sidecar) sends.
Role:    e2e tests of the forwarded-header trust of the approvals service.
Emits:   nothing.

Laws: H1 (forwarded headers are believed only from the proxies the operator
names, ``--forwarded-allow-ips``, default none; the trusted identity header
counts only from an address its ``from`` names, checked against the socket
peer unless a named proxy vouches for the client).

Why the sidecar case: uvicorn, left to its defaults, believes X-Forwarded-For
from 127.0.0.1, so any local process could claim an address in ``from`` and
then name itself the approver with X-Forwarded-Email.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx2
from typer.testing import CliRunner

from helmlog.cli import app

from . import agents
from .server import AUTH, running

# The proxy's network is not loopback: a request from 127.0.0.1 is not it.
BEHIND_PROXY: dict[str, Any] = copy.deepcopy(AUTH)
BEHIND_PROXY["trusted_header"]["from"] = ["10.0.0.0/8"]

SPOOF = {"X-Forwarded-For": "10.1.2.3", "X-Forwarded-Email": "mallory@evil"}


def asks(url: str, headers: dict[str, str]) -> httpx2.Response:
    with httpx2.Client(base_url=url, headers=headers, timeout=30) as c:
        return c.get("/asks")


def test_h1_a_sidecar_cannot_claim_a_trusted_address_by_default(
    redis_url: str,
) -> None:
    """H1: with no proxy named, X-Forwarded-For from loopback is not
    believed: the identity header from a peer outside ``from`` is no one."""
    with running(agents.build, redis_url, auth=BEHIND_PROXY) as server:
        reply = asks(server.url, SPOOF)
    assert (401, "ERR_UNAUTHENTICATED") == (reply.status_code, reply.json()["code"])


def test_h1_a_named_proxy_vouches_for_the_client_address(redis_url: str) -> None:
    """H1: when the operator names the proxy (here loopback), its
    X-Forwarded-For is the client's address, and ``from`` is checked on it."""
    with running(
        agents.build,
        redis_url,
        auth=BEHIND_PROXY,
        forwarded_allow_ips=("127.0.0.1",),
    ) as server:
        vouched = asks(server.url, SPOOF)
        outside = asks(
            server.url,
            {"X-Forwarded-For": "192.0.2.7", "X-Forwarded-Email": "mallory@evil"},
        )
    assert 200 == vouched.status_code, vouched.text
    assert 401 == outside.status_code


def test_h1_the_socket_peer_is_checked_when_no_proxy_is_named(
    redis_url: str,
) -> None:
    """H1: a sidecar-proxy setup (``from`` names loopback) works on the
    socket peer, and a forged X-Forwarded-For changes nothing."""
    with running(agents.build, redis_url) as server:
        reply = asks(
            server.url,
            {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Email": "pat@ops"},
        )
    assert 200 == reply.status_code, reply.text


def test_h1_a_bad_proxy_address_is_refused_naming_it(tmp_path: Any) -> None:
    """H1: ``--forwarded-allow-ips`` takes addresses or networks."""
    auth = tmp_path / "auth.toml"
    auth.write_text(
        '[[tokens]]\nidentity = "dana@ops"\nroles = ["approver"]\napps = ["*"]\n'
        'token = "t"\n'
    )
    result = CliRunner().invoke(
        app,
        [
            "serve",
            "--agent",
            "tests.e2e.http.agents:build",
            "--auth",
            str(auth),
            "--forwarded-allow-ips",
            "10.0.0.1,proxy.internal",
        ],
    )
    assert 0 != result.exit_code
    said = " ".join(result.output.split())
    assert "'proxy.internal' is not an address or network" in said
