"""Real upstreams that demand credentials, for the upstream-credentials tests.

Pattern: async context managers that start a real server in this process
         (uvicorn on a free loopback port) and stop it on exit: an MCP server
         (the SDK's ``MCPServer``) behind a small ASGI middleware that answers
         401 without the demanded headers; the same over TLS with a CA and a
         certificate made here; a forward/CONNECT HTTP proxy that records
         what went through it; an OAuth authorization server (client
         credentials) with the SDK's own resource-server side (token
         verifier, protected-resource metadata, 401 with WWW-Authenticate).
Role:    imported by ``tests/unit/gateway/test_upstream_credentials.py`` and
         ``tests/e2e/test_cli_mcp_proxy_credentials.py``.
Emits:   nothing.

Laws: none itself; it is what P26 is tested against.

Why in process: the tests read what the servers saw (header names, tokens
issued, the proxy's request lines) without a side channel.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import secrets
import socket
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.polling import until


def free_port() -> int:
    """A free loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mcp_server(name: str = "guarded", **options: Any) -> MCPServer:
    """An MCP server with one tool, ``whoami``."""
    server: MCPServer = MCPServer(name, **options)

    @server.tool()
    def whoami(word: str) -> str:
        """Echo a word in capitals (the call went through)."""
        return word.upper()

    return server


@dataclass
class Seen:
    """What a guard saw: the names of the headers each request carried."""

    requests: int = 0
    refused: int = 0
    header_names: set[str] = field(default_factory=set)


class Demand:
    """ASGI middleware: 401 unless every demanded header has its value."""

    def __init__(self, app: Any, demanded: Mapping[str, str], seen: Seen) -> None:
        self.app = app
        self.demanded = {k.lower().encode(): v.encode() for k, v in demanded.items()}
        self.seen = seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        self.seen.requests += 1
        self.seen.header_names.update(k.decode() for k in headers)
        if any(headers.get(k) != v for k, v in self.demanded.items()):
            self.seen.refused += 1
            await JSONResponse({"error": "unauthorized"}, status_code=401)(
                scope, receive, send
            )
            return
        await self.app(scope, receive, send)


@contextlib.asynccontextmanager
async def serving(
    app: Any, *, port: int | None = None, tls: tuple[Path, Path] | None = None
) -> AsyncIterator[int]:
    """``app`` on uvicorn on a loopback port (TLS with ``(cert, key)``)."""
    port = port or free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        ssl_certfile=str(tls[0]) if tls else None,
        ssl_keyfile=str(tls[1]) if tls else None,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await until("uvicorn started", lambda: server.started or task.done(), 20)
        if task.done():
            task.result()
            raise RuntimeError("uvicorn stopped at start")
        yield port
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)


@contextlib.asynccontextmanager
async def guarded_upstream(
    demanded: Mapping[str, str], *, tls: tuple[Path, Path] | None = None
) -> AsyncIterator[tuple[str, Seen]]:
    """An MCP server that answers 401 without ``demanded``; yields (URL, Seen)."""
    seen = Seen()
    app = Demand(mcp_server().streamable_http_app(), demanded, seen)
    async with serving(app, tls=tls) as port:
        scheme = "https" if tls else "http"
        yield f"{scheme}://127.0.0.1:{port}/mcp", seen


def certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate it signed for 127.0.0.1: (ca.pem, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "helmlog test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.DNSName("localhost"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_path, cert_path, key_path = (
        folder / "ca.pem",
        folder / "cert.pem",
        folder / "key.pem",
    )
    ca_path.write_bytes(ca.public_bytes(pem))
    cert_path.write_bytes(leaf.public_bytes(pem))
    key_path.write_bytes(
        key.private_bytes(
            pem,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_path, cert_path, key_path


@dataclass
class ProxyLog:
    """The request lines an HTTP proxy was asked for (``CONNECT h:p``, ``POST url``)."""

    lines: list[str] = field(default_factory=list)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.close()


async def _forward(
    head: bytes,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    log: ProxyLog,
) -> None:
    """Absolute-form requests (``POST http://h:p/path``), each sent origin-form."""
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    back: asyncio.Task[None] | None = None
    try:
        while head:
            first, _, rest = head.partition(b"\r\n")
            method, target, version = first.decode("latin-1").split(" ")
            log.lines.append(f"{method} {target}")
            scheme_host, _, path = target.partition("://")[2].partition("/")
            host, _, port = scheme_host.partition(":")
            length = 0
            kept = []
            for line in rest.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
                if not line.lower().startswith(b"proxy-"):
                    kept.append(line)
            body = await reader.readexactly(length) if length else b""
            if upstream is None:
                upstream = await asyncio.open_connection(host, int(port or 80))
                back = asyncio.create_task(_pipe(upstream[0], writer))
            line = f"{method} /{path} {version}".encode("latin-1")
            upstream[1].write(line + b"\r\n" + b"\r\n".join(kept) + body)
            await upstream[1].drain()
            head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        if upstream is not None:
            upstream[1].close()
        if back is not None:
            back.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await back


@contextlib.asynccontextmanager
async def http_proxy() -> AsyncIterator[tuple[str, ProxyLog]]:
    """A forward and CONNECT HTTP proxy on loopback; yields (its URL, its log)."""
    log = ProxyLog()
    tasks: set[asyncio.Task[None]] = set()

    async def handle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        first = head.split(b"\r\n", 1)[0].decode("latin-1")
        if first.startswith("CONNECT "):
            log.lines.append(first.rsplit(" ", 1)[0])
            host, _, port = first.split(" ")[1].rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            return
        await _forward(head, reader, writer, log)
        writer.close()

    def spawn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(handle(reader, writer))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(spawn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", log
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


@dataclass
class Issuer:
    """An OAuth authorization server's state: its client and the tokens it issued."""

    url: str
    client_id: str
    client_secret: str
    issued: dict[str, str] = field(default_factory=dict)  # token -> resource
    requests: int = 0


class Verifier:
    """The resource server's ``TokenVerifier``: tokens the issuer issued."""

    def __init__(self, issuer: Issuer) -> None:
        self.issuer = issuer

    async def verify_token(self, token: str) -> AccessToken | None:
        resource = self.issuer.issued.get(token)
        if resource is None:
            return None
        return AccessToken(
            token=token,
            client_id=self.issuer.client_id,
            scopes=["tools"],
            resource=resource,
        )


def authorization_server(issuer: Issuer) -> Starlette:
    """RFC 8414 metadata and a token endpoint for the client-credentials grant."""

    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "issuer": issuer.url,
                "authorization_endpoint": f"{issuer.url}/authorize",
                "token_endpoint": f"{issuer.url}/token",
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                "response_types_supported": ["code"],
            }
        )

    async def token(request: Request) -> JSONResponse:
        issuer.requests += 1
        form = await request.form()
        basic = request.headers.get("authorization", "")
        expected = base64.b64encode(
            f"{issuer.client_id}:{issuer.client_secret}".encode()
        ).decode()
        if basic != f"Basic {expected}":
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if form.get("grant_type") != "client_credentials":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        access = secrets.token_urlsafe(16)
        issuer.issued[access] = str(form.get("resource") or "")
        return JSONResponse(
            {"access_token": access, "token_type": "Bearer", "expires_in": 3600}
        )

    return Starlette(
        routes=[
            Route("/.well-known/oauth-authorization-server", metadata),
            Route("/token", token, methods=["POST"]),
        ]
    )


@contextlib.asynccontextmanager
async def oauth_upstream(
    client_id: str, client_secret: str
) -> AsyncIterator[tuple[str, Issuer]]:
    """An authorization server and an MCP server that needs its tokens."""
    as_port, rs_port = free_port(), free_port()
    issuer = Issuer(f"http://127.0.0.1:{as_port}", client_id, client_secret)
    url = f"http://127.0.0.1:{rs_port}/mcp"
    server = mcp_server(
        "oauth-guarded",
        token_verifier=Verifier(issuer),
        auth=AuthSettings(
            issuer_url=issuer.url,  # type: ignore[arg-type]
            resource_server_url=url,  # type: ignore[arg-type]
            validate_token_resource=True,
        ),
    )
    async with (
        serving(authorization_server(issuer), port=as_port),
        serving(server.streamable_http_app(), port=rs_port),
    ):
        yield url, issuer
