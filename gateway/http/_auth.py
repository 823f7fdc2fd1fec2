"""Who is asking: bearer tokens and a trusted proxy header, mapped to roles.

Pattern: an authenticator built once from a TOML file (its format is on
         ``Authenticator.from_file``), asked per request; it answers a
         ``Principal`` (identity + roles + apps) or ``None``.
Role:    gateway layer (http), for ``helmlog serve`` and ``approve|decline``.
Emits:   nothing; its identity is what the ledger row names (``by``).

Laws: issue 11 item 2 (identity from authentication, never a field), G63,
H2 (a session entry belongs to one app; an approver or auditor names its
apps), fail closed (no configuration, no access; no ``apps``, refused),
issue 28 item 2 (``auditor``: reads sessions and history, never decides).

Why tokens are compared by SHA-256 digest: the file may hold digests only,
and ``hmac.compare_digest`` on digests leaks no prefix through timing.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

Role = Literal["session", "approver", "auditor"]
ROLES: Final = ("session", "approver", "auditor")
# The roles that name the apps they cover (``apps``), and may read what is
# recorded there: an approver decides, an auditor only reads (issue 28).
SCOPED_ROLES: Final = frozenset({"approver", "auditor"})
TOKEN_ENV: Final = "HELMLOG_TOKEN"
AUTH_ENV: Final = "HELMLOG_AUTH"
APPROVER_ENV: Final = "HELMLOG_APPROVER"
# H5: the page's cookie holds an opaque login id (``_logins``), never a token.
COOKIE: Final = "helmlog_login"
# H2: an approver whose ``apps`` holds this decides for every app, and for
# sessions that record no owner.
ALL_APPS: Final = "*"


class AuthConfigError(ValueError):
    """The auth file cannot be used; ``str()`` names the problem."""


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """An authenticated caller: who, with which roles, vouched for how, and
    (H2) the app its sessions belong to (``app``, empty: its identity) and
    the apps it decides for (``apps``; ``"*"``: every app)."""

    identity: str
    roles: frozenset[str]
    via: Literal["token", "header", "cookie", "environment"] = "token"
    app: str = ""
    apps: frozenset[str] = frozenset()

    def can(self, role: Role) -> bool:
        """Whether this caller holds ``role``."""
        return role in self.roles

    @property
    def own_app(self) -> str:
        """The app the sessions this caller starts belong to (H2)."""
        return self.app or self.identity

    def owns(self, app: str | None) -> bool:
        """Whether a session of ``app`` is this ``session`` caller's own (H2);
        a session with no recorded owner (``None``) is no one's."""
        return self.can("session") and app is not None and app == self.own_app

    def decides_for(self, app: str | None) -> bool:
        """Whether this ``approver`` may see and decide asks of ``app`` (H2);
        a session with no recorded owner is only an every-app approver's."""
        if not self.can("approver"):
            return False
        return ALL_APPS in self.apps or (app is not None and app in self.apps)

    def audits(self, app: str | None) -> bool:
        """Whether this ``auditor`` may read sessions of ``app`` (issue 28);
        like an approver's, a session with no recorded owner is only an
        every-app auditor's."""
        if not self.can("auditor"):
            return False
        return ALL_APPS in self.apps or (app is not None and app in self.apps)

    def sees(self, app: str | None) -> bool:
        """Whether a session of ``app`` is this caller's to read (H2)."""
        return self.owns(app) or self.decides_for(app) or self.audits(app)

    @property
    def reads_everything(self) -> bool:
        """Whether this caller reads every app's sessions (``apps = ["*"]``
        with a role that reads: approver or auditor)."""
        return bool(self.roles & SCOPED_ROLES) and ALL_APPS in self.apps


def token_digest(token: str) -> str:
    """The hex SHA-256 of a token, as the file's ``token_sha256`` holds it."""
    return hashlib.sha256(token.encode()).hexdigest()


class TrustedHeader(msgspec.Struct, frozen=True, kw_only=True):
    """A header a fronting proxy sets after authenticating the person."""

    identity: str
    roles: frozenset[str]
    sources: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    app: str = ""
    apps: frozenset[str] = frozenset()


class Authenticator:
    """Tokens (by digest) and an optional trusted header, from one config."""

    def __init__(
        self,
        tokens: Mapping[str, Principal],
        header: TrustedHeader | None = None,
    ) -> None:
        self._tokens = dict(tokens)
        self.header = header

    @classmethod
    def from_file(cls, path: str | Path) -> Authenticator:
        """Read the auth TOML file::

            [[tokens]]
            identity = "dana@ops"
            roles = ["approver"]
            apps = ["billing", "support"]  # the apps it decides for; ["*"]: all
            token_sha256 = "<hex sha-256 of the token>"  # or: token = "<token>"

            [[tokens]]
            identity = "audit@ops"
            roles = ["auditor"]      # reads sessions and history; decides nothing
            apps = ["*"]
            token_sha256 = "<hex>"

            [[tokens]]
            identity = "billing-api"
            roles = ["session"]
            app = "billing"          # its sessions' app (default: its identity)
            token_sha256 = "<hex>"

            [trusted_header]               # optional: a fronting proxy vouches
            identity = "X-Forwarded-Email"  # the header holding the identity
            roles = ["approver"]
            apps = ["*"]
            from = ["127.0.0.1/32"]  # the proxy's addresses (required: any
                                     # client can set a header)

        Raises:
            AuthConfigError: unreadable, or an entry lacks what it needs.
        """
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise AuthConfigError(f"auth file {str(path)!r}: {exc}") from None
        return cls.from_mapping(data, where=str(path))

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, where: str = "auth"
    ) -> Authenticator:
        """Build from the parsed file (``tokens``, ``trusted_header``)."""
        tokens: dict[str, Principal] = {}
        for i, entry in enumerate(data.get("tokens", ())):
            what = f"{where}: tokens[{i}]"
            identity = entry.get("identity")
            if not isinstance(identity, str) or not identity:
                raise AuthConfigError(f"{what} needs a non-empty identity")
            digest = entry.get("token_sha256")
            if digest is None and isinstance(entry.get("token"), str):
                digest = token_digest(entry["token"])
            if not isinstance(digest, str) or len(digest) != 64:
                raise AuthConfigError(f"{what} needs token_sha256 (64 hex) or token")
            roles = _roles(entry.get("roles"), what)
            app, apps = _scope(entry, roles, what)
            tokens[digest.lower()] = Principal(
                identity=identity, roles=roles, app=app or identity, apps=apps
            )
        header = None
        raw = data.get("trusted_header")
        if raw is not None:
            name = raw.get("identity")
            sources = raw.get("from")
            if not isinstance(name, str) or not name:
                raise AuthConfigError(f"{where}: trusted_header needs identity")
            if not isinstance(sources, list) or not sources:
                raise AuthConfigError(
                    f"{where}: trusted_header needs from = [the proxy's addresses]"
                )
            try:
                nets = tuple(ipaddress.ip_network(s, strict=False) for s in sources)
            except ValueError as exc:
                raise AuthConfigError(f"{where}: trusted_header.from: {exc}") from None
            roles = _roles(raw.get("roles"), f"{where}: trusted_header")
            app, apps = _scope(raw, roles, f"{where}: trusted_header")
            header = TrustedHeader(
                identity=name.lower(), roles=roles, sources=nets, app=app, apps=apps
            )
        if not tokens and header is None:
            raise AuthConfigError(f"{where}: no tokens and no trusted_header")
        return cls(tokens, header)

    def by_token(
        self, token: str, via: Literal["token", "cookie"] = "token"
    ) -> Principal | None:
        """The principal a presented token stands for, else ``None``."""
        wanted = token_digest(token)
        for digest, principal in self._tokens.items():
            if hmac.compare_digest(digest, wanted):
                return msgspec.structs.replace(principal, via=via)
        return None

    def authenticate(
        self,
        headers: Mapping[str, str],
        client_host: str | None,
        cookies: Mapping[str, str] | None = None,
        logins: Callable[[str], Principal | None] | None = None,
    ) -> Principal | None:
        """Who sent a request: bearer token, then trusted header, then cookie.

        The cookie holds a login id, answered by ``logins`` (H5); without
        ``logins`` a cookie signs no one in. A malformed or unknown
        credential is ``None`` (401), never a guess.
        """
        auth = headers.get("authorization")
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return None
            return self.by_token(token.strip())
        if self.header is not None:
            who = headers.get(self.header.identity)
            if who is not None:
                if not who.strip() or not self._from_proxy(client_host):
                    return None
                return Principal(
                    identity=who.strip(),
                    roles=self.header.roles,
                    via="header",
                    app=self.header.app,
                    apps=self.header.apps,
                )
        kept = (cookies or {}).get(COOKIE)
        if kept and logins is not None:
            return logins(kept)
        return None

    def _from_proxy(self, host: str | None) -> bool:
        if self.header is None or host is None:
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in net for net in self.header.sources)


def _roles(raw: object, what: str) -> frozenset[str]:
    if not isinstance(raw, list) or not raw:
        raise AuthConfigError(f"{what} needs roles, a list of {', '.join(ROLES)}")
    unknown = [r for r in raw if r not in ROLES]
    if unknown:
        raise AuthConfigError(f"{what}: unknown role(s) {unknown!r} (roles: {ROLES})")
    return frozenset(raw)


def _scope(
    entry: Mapping[str, Any], roles: frozenset[str], what: str
) -> tuple[str, frozenset[str]]:
    """An entry's ``app`` (session role; "" when not given) and ``apps``
    (approver role, required: fail closed, no silent every-app)."""
    app = entry.get("app", "")
    if "app" in entry and (not isinstance(app, str) or not app):
        raise AuthConfigError(f"{what}: app must be a non-empty string")
    if app and "session" not in roles:
        raise AuthConfigError(
            f"{what}: app names where a session token's sessions belong; "
            "this entry has no session role"
        )
    raw = entry.get("apps")
    if not roles & SCOPED_ROLES:
        if raw is not None:
            raise AuthConfigError(
                f"{what}: apps names what an approver decides for (or an auditor "
                "reads); this entry has no approver role and no auditor role"
            )
        return app, frozenset()
    if raw is None:
        who = "an approver" if "approver" in roles else "an auditor"
        raise AuthConfigError(
            f"{what}: {who} names the apps it covers (H2): "
            'apps = ["billing"], or apps = ["*"] for every app (as before)'
        )
    if (
        not isinstance(raw, list)
        or not raw
        or not all(isinstance(a, str) and a for a in raw)
    ):
        raise AuthConfigError(
            f'{what}: apps is a non-empty list of app names, or ["*"]'
        )
    return app, frozenset(raw)


def approver_from_environment(
    environ: Mapping[str, str], auth_file: str | None = None
) -> Principal:
    """The approver a shell stands for (``helmlog approve|decline``).

    ``$HELMLOG_TOKEN`` resolved through the auth file (``auth_file`` or
    ``$HELMLOG_AUTH``) when both are set; else ``$HELMLOG_APPROVER``, the
    identity the operator's environment asserts (an approver of every app:
    that shell already holds the store). A token that is unknown or
    lacks the approver role is refused, never downgraded to the name.

    Raises:
        AuthConfigError: no identity is configured, or the token does not
            stand for an approver.
    """
    token = environ.get(TOKEN_ENV)
    path = auth_file or environ.get(AUTH_ENV)
    if token:
        if not path:
            raise AuthConfigError(
                f"${TOKEN_ENV} is set but no auth file is: "
                f"pass --auth or set ${AUTH_ENV}"
            )
        principal = Authenticator.from_file(path).by_token(token)
        if principal is None:
            raise AuthConfigError(f"${TOKEN_ENV} is not a token the auth file knows")
        if not principal.can("approver"):
            raise AuthConfigError(
                f"${TOKEN_ENV} stands for {principal.identity!r}, "
                "who is not an approver"
            )
        return principal
    name = environ.get(APPROVER_ENV, "").strip()
    if name:
        return Principal(
            identity=name,
            roles=frozenset({"approver"}),
            via="environment",
            apps=frozenset({ALL_APPS}),
        )
    raise AuthConfigError(
        "who approves comes from configuration: set $HELMLOG_TOKEN (with --auth "
        f"or ${AUTH_ENV}) or ${APPROVER_ENV}"
    )
