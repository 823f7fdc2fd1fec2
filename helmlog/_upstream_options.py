"""``helmlog mcp-proxy``'s upstream flags: headers, credentials, TLS, timeouts.

Pattern: a parser from flag values (and the environment they name) to one
         ``HttpUpstream``; every problem is an ``UpstreamConfigError`` raised
         before any connection, naming the flag and never a secret's value.
Role:    the face; ``helmlog._proxy_cli.build_proxy`` calls ``http_upstream``.
Emits:   nothing.

Laws: P26 (secrets come from the environment or a file, never the command
line, so ``ps`` does not show them), H4 (no secret in an error).

Why ``Authorization``/``Cookie`` headers must name a variable: a literal one
would put the credential in every process listing and shell history.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from helmlog.gateway import HttpUpstream, OAuthClientCredentials, UpstreamConfigError

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Headers whose value is a credential: given only through the environment.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


@dataclass(frozen=True)
class UpstreamFlags:
    """The flags as given (names of variables and files, never secrets)."""

    headers: Sequence[str] = ()
    header_env: Sequence[str] = ()
    bearer_env: str | None = None
    bearer_file: Path | None = None
    oauth: bool = False
    oauth_issuer: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret_env: str | None = None
    oauth_client_secret_file: Path | None = None
    oauth_scope: str | None = None
    oauth_token_cache: Path | None = None
    ca_file: Path | None = None
    insecure: bool = False
    timeout_s: float | None = None
    read_timeout_s: float | None = None
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def given(self) -> list[str]:
        """The flags set, by name (for 'applies to --upstream-url only')."""
        named = {
            "--header": bool(self.headers),
            "--header-env": bool(self.header_env),
            "--bearer-env": self.bearer_env is not None,
            "--bearer-file": self.bearer_file is not None,
            "--oauth": self.oauth,
            "--upstream-ca-file": self.ca_file is not None,
            "--upstream-insecure": self.insecure,
            "--upstream-timeout": self.timeout_s is not None,
            "--upstream-read-timeout": self.read_timeout_s is not None,
        }
        return [flag for flag, on in named.items() if on]


def env_value(env: Mapping[str, str], var: str, flag: str) -> str:
    """The value of the variable ``var`` (set and non-empty)."""
    if not _NAME.match(var):
        raise UpstreamConfigError(flag, f"{var!r} is not an environment variable name")
    value = env.get(var)
    if value is None:
        raise UpstreamConfigError(flag, f"the environment variable {var} is not set")
    if not value.strip():
        raise UpstreamConfigError(flag, f"the environment variable {var} is empty")
    return value


def file_secret(path: Path, flag: str) -> str:
    """A secret kept in a file: its text, without the trailing newline."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UpstreamConfigError(flag, f"{path} does not exist") from None
    except IsADirectoryError:
        raise UpstreamConfigError(flag, f"{path} is a folder, not a file") from None
    except UnicodeDecodeError:
        raise UpstreamConfigError(flag, f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise UpstreamConfigError(
            flag, f"{path} cannot be read: {exc.strerror}"
        ) from None
    secret = text.strip()
    if not secret:
        raise UpstreamConfigError(flag, f"{path} is empty")
    if "\n" in secret:
        raise UpstreamConfigError(flag, f"{path} holds more than one line")
    return secret


def expand(text: str, env: Mapping[str, str], flag: str) -> str:
    """``text`` with each ``${VAR}`` replaced by the variable's value."""
    return _VAR.sub(lambda m: env_value(env, m.group(1), flag), text)


def header(spec: str, env: Mapping[str, str]) -> tuple[str, str]:
    """``--header "Name: value"`` (the value may hold ``${VAR}``)."""
    name, sep, value = spec.partition(":")
    name = name.strip()
    if not sep or not name:
        # The spec itself may be a secret someone mistyped: not echoed (H4).
        raise UpstreamConfigError(
            "--header", "takes 'Name: value' (no ':' found; the value is not shown)"
        )
    if name.lower() in SECRET_HEADERS and not _VAR.search(value):
        raise UpstreamConfigError(
            "--header",
            f"{name} carries a credential: give its value as ${{VAR}} or "
            f"--header-env {name}=VAR, so it is not on the command line",
        )
    return name, expand(value.strip(), env, "--header")


def header_from_env(spec: str, env: Mapping[str, str]) -> tuple[str, str]:
    """``--header-env Name=VAR``: the header's value is the variable's."""
    name, sep, var = spec.partition("=")
    if not sep or not name.strip() or not var.strip():
        raise UpstreamConfigError("--header-env", f"takes Name=VAR, got {spec!r}")
    return name.strip(), env_value(env, var.strip(), "--header-env")


def _oauth(flags: UpstreamFlags) -> OAuthClientCredentials:
    env = flags.env
    if flags.oauth_issuer is None or flags.oauth_client_id is None:
        raise UpstreamConfigError(
            "--oauth", "needs --oauth-issuer and --oauth-client-id"
        )
    sources = [
        flags.oauth_client_secret_env is not None,
        flags.oauth_client_secret_file is not None,
    ]
    if sum(sources) != 1:
        raise UpstreamConfigError(
            "--oauth",
            "needs the client secret from exactly one of "
            "--oauth-client-secret-env and --oauth-client-secret-file",
        )
    if flags.oauth_client_secret_env is not None:
        secret = env_value(
            env, flags.oauth_client_secret_env, "--oauth-client-secret-env"
        )
    else:
        assert flags.oauth_client_secret_file is not None
        secret = file_secret(
            flags.oauth_client_secret_file, "--oauth-client-secret-file"
        )
    return OAuthClientCredentials(
        client_id=flags.oauth_client_id,
        client_secret=secret,
        issuer=flags.oauth_issuer,
        scope=flags.oauth_scope,
        token_cache=flags.oauth_token_cache,
    )


def _or(given: float | None, default: float) -> float:
    return default if given is None else given


def http_upstream(url: str, flags: UpstreamFlags) -> HttpUpstream:
    """The ``HttpUpstream`` the flags describe (raises ``UpstreamConfigError``)."""
    env = flags.env
    oauth_parts = [
        flags.oauth_issuer,
        flags.oauth_client_id,
        flags.oauth_client_secret_env,
        flags.oauth_client_secret_file,
        flags.oauth_scope,
        flags.oauth_token_cache,
    ]
    if not flags.oauth and any(part is not None for part in oauth_parts):
        raise UpstreamConfigError("--oauth-*", "the OAuth options need --oauth")
    credentials = [
        flag
        for flag, on in (
            ("--bearer-env", flags.bearer_env is not None),
            ("--bearer-file", flags.bearer_file is not None),
            ("--oauth", flags.oauth),
        )
        if on
    ]
    if len(credentials) > 1:
        raise UpstreamConfigError(
            credentials[1], f"give one of {', '.join(credentials)}"
        )
    headers: dict[str, str] = {}
    pairs = [header(spec, env) for spec in flags.headers]
    pairs += [header_from_env(spec, env) for spec in flags.header_env]
    for name, value in pairs:
        if name.lower() in (known.lower() for known in headers):
            raise UpstreamConfigError("--header", f"{name} is given twice")
        headers[name] = value
    bearer = None
    if flags.bearer_env is not None:
        bearer = env_value(env, flags.bearer_env, "--bearer-env")
    elif flags.bearer_file is not None:
        bearer = file_secret(flags.bearer_file, "--bearer-file")
    return HttpUpstream(
        url,
        headers=headers,
        bearer=bearer,
        oauth=_oauth(flags) if flags.oauth else None,
        ca_file=flags.ca_file,
        insecure=flags.insecure,
        timeout_s=_or(flags.timeout_s, HttpUpstream.DEFAULT_TIMEOUT_S),
        read_timeout_s=_or(flags.read_timeout_s, HttpUpstream.DEFAULT_READ_TIMEOUT_S),
    )
