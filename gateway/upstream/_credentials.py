"""How the proxy reaches an HTTP upstream: headers, credentials, TLS, proxies.

Pattern: a settings value (``HttpUpstream``) checked whole at construction,
         whose ``client()`` builds the one ``httpx2.AsyncClient`` that every
         request to the upstream goes through, ``http://`` and ``https://``.
Role:    gateway layer; ``Upstream`` opens ``upstream_http`` with its
         ``client``; ``helmlog mcp-proxy`` builds one from its flags.
Emits:   WARNINGs (``helmlog.proxy``): TLS verification is off; the
         upstream answered 401/403 (the SDK reports only "an error").

Laws: P26 (credentials, one HTTP stack, bad settings refused before any
connection), H4 (no secret in an error, a log line or a ``repr``).

Why an ``httpx2.Auth`` for every credential: the SDK's OAuth providers are
one, so a bearer token and OAuth sit in the same slot, applied per request
(a bearer's header also on the fast path's wire, ``_wire_settings``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import ssl
import tempfile
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx2

from helmlog.events import HelmlogError

log = logging.getLogger("helmlog.proxy")

CONNECT_TIMEOUT_S = 30.0  # connect, write, pool: the SDK's defaults
READ_TIMEOUT_S = 300.0  # a server may hold a reply's stream open this long

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 field-name
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # CTLs but HTAB
# Headers the Streamable HTTP transport writes itself: set by hand, they
# would break the session (or smuggle a second one).
TRANSPORT_HEADERS = frozenset(
    {
        "accept",
        "connection",
        "content-length",
        "content-type",
        "host",
        "last-event-id",
        "mcp-protocol-version",
        "mcp-session-id",
        "transfer-encoding",
    }
)


class UpstreamConfigError(HelmlogError, ValueError):
    """An HTTP upstream's settings are unusable; nothing was connected (P26).

    The message names the setting and the problem, never a secret's value.

    Attributes:
        setting: the setting (or CLI flag) at fault, e.g. ``"headers"``.
    """

    code = "ERR_UPSTREAM_CONFIG"

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting


def _check_header(name: str, value: str) -> None:
    if not isinstance(name, str) or not _TOKEN.match(name):
        raise UpstreamConfigError(
            "headers", f"{name!r} is not a valid HTTP header name"
        )
    if name.lower() in TRANSPORT_HEADERS:
        raise UpstreamConfigError(
            "headers", f"{name} is set by the MCP transport and cannot be given"
        )
    if not isinstance(value, str) or _BAD_VALUE.search(value):
        # The value may be a secret: named by its header only (H4).
        raise UpstreamConfigError(
            "headers",
            f"the value of {name} holds a line break or control character",
        )


@dataclass(frozen=True, kw_only=True)
class OAuthClientCredentials:
    """The OAuth client-credentials grant (machine to machine) for an upstream.

    The SDK's ``ClientCredentialsOAuthProvider`` does the work: on the
    upstream's 401 it discovers the authorization server (RFC 9728, RFC
    8414), asks ``issuer``'s token endpoint for a token and retries.

    Args:
        client_id: the client's id at the authorization server.
        client_secret: its secret (never shown in a ``repr``).
        issuer: the authorization server's issuer URL; the credentials are
            only ever sent to the token endpoint of this issuer.
        scope: space-separated scopes to ask for.
        token_cache: a JSON file the token is kept in between runs (mode
            0600); ``None`` keeps it in memory only.
        auth_method: how the secret is sent to the token endpoint.
    """

    client_id: str
    client_secret: str = field(repr=False)
    issuer: str
    scope: str | None = None
    token_cache: str | Path | None = None
    auth_method: Literal["client_secret_basic", "client_secret_post"] = (
        "client_secret_basic"
    )

    def __post_init__(self) -> None:
        if not self.client_id:
            raise UpstreamConfigError("oauth", "a client id is required")
        if not self.client_secret:
            raise UpstreamConfigError("oauth", "the client secret is empty")
        if not self.issuer.startswith(("https://", "http://")):
            raise UpstreamConfigError(
                "oauth", "the issuer must be an http(s) URL of the authorization server"
            )
        if self.auth_method not in ("client_secret_basic", "client_secret_post"):
            raise UpstreamConfigError(
                "oauth", f"unknown token endpoint auth method {self.auth_method!r}"
            )
        if self.token_cache is not None:
            FileTokenStorage(self.token_cache).check()

    def provider(self, server_url: str) -> httpx2.Auth:
        """The SDK's provider for ``server_url`` (an ``httpx2.Auth``)."""
        from mcp.client.auth.extensions.client_credentials import (
            ClientCredentialsOAuthProvider,
        )

        storage: Any = (
            MemoryTokenStorage()
            if self.token_cache is None
            else FileTokenStorage(self.token_cache)
        )
        return ClientCredentialsOAuthProvider(
            server_url=server_url,
            storage=storage,
            client_id=self.client_id,
            client_secret=self.client_secret,
            token_endpoint_auth_method=self.auth_method,
            scope=self.scope,
            issuer=self.issuer,
        )


class MemoryTokenStorage:
    """The SDK's ``TokenStorage`` in memory: a token lives as long as the proxy."""

    def __init__(self) -> None:
        self.tokens: Any = None
        self.client_info: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        self.client_info = client_info


class FileTokenStorage:
    """The SDK's ``TokenStorage`` in one JSON file, written 0600 and atomically.

    A token is kept with the time it expires, so one from an earlier run is
    not presented once it has expired (the SDK only knows ``expires_in``).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def check(self) -> None:
        """Refuse a cache that cannot be read back or written (before any use)."""
        if self.path.exists():
            self._load()
            if not os.access(self.path, os.W_OK):
                raise UpstreamConfigError("token_cache", f"{self.path} is not writable")
        elif not os.access(self.path.parent, os.W_OK):
            raise UpstreamConfigError(
                "token_cache", f"cannot create {self.path}: its folder is not writable"
            )

    def _load(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise UpstreamConfigError(
                "token_cache", f"{self.path} cannot be read: {exc.strerror}"
            ) from None
        try:
            data = json.loads(text) if text.strip() else {}
        except ValueError:
            raise UpstreamConfigError(
                "token_cache", f"{self.path} is not a token cache (not JSON)"
            ) from None
        if not isinstance(data, dict):
            raise UpstreamConfigError(
                "token_cache", f"{self.path} is not a token cache (not an object)"
            )
        return data

    def _save(self, data: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".token-cache-")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    async def get_tokens(self) -> Any:
        from mcp.shared.auth import OAuthToken

        stored = self._load().get("tokens")
        if not isinstance(stored, dict):
            return None
        expires_at = stored.pop("expires_at", None)
        if isinstance(expires_at, (int, float)):
            left = int(expires_at - time.time())
            if left <= 0 and not stored.get("refresh_token"):
                return None  # expired, and nothing to refresh it with
            stored["expires_in"] = max(left, 0)
        return OAuthToken.model_validate(stored)

    async def set_tokens(self, tokens: Any) -> None:
        data = self._load()
        stored = tokens.model_dump(mode="json", exclude_none=True)
        if tokens.expires_in is not None:
            stored["expires_at"] = time.time() + tokens.expires_in
        data["tokens"] = stored
        self._save(data)

    async def get_client_info(self) -> Any:
        from mcp.shared.auth import OAuthClientInformationFull

        stored = self._load().get("client_info")
        if not isinstance(stored, dict):
            return None
        return OAuthClientInformationFull.model_validate(stored)

    async def set_client_info(self, client_info: Any) -> None:
        data = self._load()
        data["client_info"] = client_info.model_dump(mode="json", exclude_none=True)
        self._save(data)


class BearerAuth(httpx2.Auth):
    """``Authorization: Bearer <token>`` on every request (never in a repr)."""

    def __init__(self, token: str) -> None:
        if not token or _BAD_VALUE.search(token) or re.search(r"\s", token):
            raise UpstreamConfigError(
                "bearer",
                "the token is empty or holds whitespace or control characters",
            )
        self._header = f"Bearer {token}"

    def auth_flow(
        self, request: httpx2.Request
    ) -> Generator[httpx2.Request, httpx2.Response, None]:
        request.headers["Authorization"] = self._header
        yield request

    def static_headers(self) -> Mapping[str, str]:
        """The header it sets (``gateway.fast.wire`` sends it as httpx2 would)."""
        return {"Authorization": self._header}

    def __repr__(self) -> str:
        return "BearerAuth(<token withheld>)"


class HttpUpstream:
    """An MCP server over Streamable HTTP, with how to reach it.

    Give it to ``McpProxy`` in place of the URL. Every request to the
    upstream, ``http://`` or ``https://``, goes through one
    ``httpx2.AsyncClient`` built from these settings (``client()``).

    Args:
        url: the upstream's Streamable HTTP URL.
        headers: static headers sent with every request (e.g. a tenant id,
            an API key).
        bearer: a token sent as ``Authorization: Bearer``.
        oauth: the client-credentials grant, run by the SDK's provider.
        auth: any other ``httpx2.Auth``, e.g. an ``OAuthClientProvider``
            built by hand. At most one of ``bearer``, ``oauth`` and ``auth``.
        ca_file: a PEM file of the CAs to trust for ``https://`` instead of
            the system's store.
        insecure: do not verify the upstream's certificate (logged loudly).
        trust_env: honour ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY``/
            ``NO_PROXY`` (and ``SSL_CERT_FILE``) for both schemes.
        timeout_s: connect, write and pool timeout.
        read_timeout_s: how long a read may wait (a reply's stream is long).

    Raises:
        UpstreamConfigError: a setting is malformed or contradicts another;
            raised here, before any connection.
    """

    DEFAULT_TIMEOUT_S: ClassVar[float] = CONNECT_TIMEOUT_S
    DEFAULT_READ_TIMEOUT_S: ClassVar[float] = READ_TIMEOUT_S

    __slots__ = (
        "_auth",
        "_verify",
        "ca_file",
        "headers",
        "insecure",
        "read_timeout_s",
        "timeout_s",
        "trust_env",
        "url",
    )

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        bearer: str | None = None,
        oauth: OAuthClientCredentials | None = None,
        auth: httpx2.Auth | None = None,
        ca_file: str | Path | None = None,
        insecure: bool = False,
        trust_env: bool = True,
        timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise UpstreamConfigError("url", "an HTTP upstream's URL is http(s)://")
        given = dict(headers or {})
        for name, value in given.items():
            _check_header(name, value)
        credentials = [n for n, v in (("bearer", bearer), ("oauth", oauth)) if v]
        if auth is not None:
            credentials.append("auth")
        if len(credentials) > 1:
            raise UpstreamConfigError(
                "credentials", f"give one of {' and '.join(credentials)}, not both"
            )
        if credentials and any(n.lower() == "authorization" for n in given):
            raise UpstreamConfigError(
                "headers",
                f"an Authorization header and {credentials[0]} both set the "
                "credentials; give one",
            )
        if ca_file is not None and insecure:
            raise UpstreamConfigError(
                "tls", "a CA file and insecure contradict each other; give one"
            )
        if not (timeout_s > 0 and read_timeout_s > 0):
            raise UpstreamConfigError("timeout", "timeouts are seconds > 0")
        self.url = url
        self.headers: Mapping[str, str] = given
        self.ca_file = None if ca_file is None else Path(ca_file)
        self.insecure = insecure
        self.trust_env = trust_env
        self.timeout_s = float(timeout_s)
        self.read_timeout_s = float(read_timeout_s)
        self._verify = self._tls()
        if bearer is not None:
            auth = BearerAuth(bearer)
        elif oauth is not None:
            auth = oauth.provider(url)  # one provider: its token is reused
        self._auth = auth

    def _tls(self) -> ssl.SSLContext | bool:
        if self.insecure:
            return False
        if self.ca_file is None:
            return True  # the system's store (httpx2: truststore)
        try:
            return ssl.create_default_context(cafile=str(self.ca_file))
        except FileNotFoundError:
            raise UpstreamConfigError(
                "ca_file", f"{self.ca_file} does not exist"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "strerror", None) or "no PEM certificate in it"
            raise UpstreamConfigError(
                "ca_file", f"{self.ca_file} cannot be used: {reason}"
            ) from None

    @property
    def auth(self) -> httpx2.Auth | None:
        """The credential applied to every request, if any."""
        return self._auth

    def client(self) -> httpx2.AsyncClient:
        """A new client on these settings; the caller enters and closes it."""
        if self.insecure:
            log.warning(
                "proxy: TLS verification of the upstream %s is OFF "
                "(--upstream-insecure): anyone on the path can read and "
                "change its traffic, credentials included",
                shown_url(self.url),
            )
        hooks: dict[str, list[Any]] = {"request": [], "response": []}
        if not _handles_401(self._auth):
            hooks["response"].append(self._refused)
        return httpx2.AsyncClient(
            headers=dict(self.headers),
            auth=self._auth,
            verify=self._verify,
            trust_env=self.trust_env,
            timeout=httpx2.Timeout(self.timeout_s, read=self.read_timeout_s),
            follow_redirects=False,  # the SDK's transport follows same-origin ones
            event_hooks=hooks,
        )

    async def _refused(self, response: httpx2.Response) -> None:
        """Say why: the SDK turns a 401/403 into "Server returned an error"."""
        self._said_refused(response.status_code, response.reason_phrase)

    def _said_refused(self, status: int, reason: str) -> None:
        """The WARNING of an answer 401 or 403 (the httpx2 hook's and the wire's)."""
        if status in (401, 403):
            log.warning(
                "proxy: the upstream %s answered %d %s: its credentials are "
                "missing or refused",
                shown_url(self.url),
                status,
                reason,
            )

    def _wire_settings(
        self,
    ) -> tuple[ssl.SSLContext | bool, Callable[[int, str], None] | None]:
        """What ``gateway.fast.wire`` needs beside the client: the TLS setting
        the client is built with, and who says a 401/403 (none for OAuth,
        which answers a 401 itself)."""
        return self._verify, None if _handles_401(self._auth) else self._said_refused

    def __repr__(self) -> str:
        # Names only: header values and credentials may be secrets (H4).
        tls = "insecure" if self.insecure else "ca_file" if self.ca_file else "system"
        kind = type(self._auth).__name__ if self._auth is not None else None
        return (
            f"HttpUpstream(url={shown_url(self.url)!r}, "
            f"headers={sorted(self.headers)!r}, auth={kind!r}, tls={tls!r})"
        )


def _handles_401(auth: httpx2.Auth | None) -> bool:
    """An OAuth provider answers a 401 itself (discovery, then a token)."""
    from mcp.client.auth import OAuthClientProvider

    return isinstance(auth, OAuthClientProvider)


def shown_url(url: str) -> str:
    """``url`` without what may be a secret in it: user info, query, fragment."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
