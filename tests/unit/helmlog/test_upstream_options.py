"""``helmlog mcp-proxy``'s upstream flags, parsed into one ``HttpUpstream``.

Pattern: the parser called with flag values and an environment of the
         test's own; files in ``tmp_path``; nothing connects.
Role:    unit tests of ``helmlog/_upstream_options.py``.
Emits:   nothing.

Laws: P26 (secrets from the environment or a file, never a flag; bad input
is a typed error before any connection), H4 (no secret in an error).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helmlog._proxy_cli import ProxyCliError, build_proxy
from helmlog._upstream_options import UpstreamFlags, http_upstream
from helmlog.gateway import UpstreamConfigError

URL = "http://127.0.0.1:1/mcp"
SECRET = "s3cr3t-T0KEN-9f8e7d"
ENV = {"UP_AUTH": f"Bearer {SECRET}", "UP_TOKEN": SECRET, "TENANT": "acme"}


def _refused(flags: UpstreamFlags) -> str:
    with pytest.raises(UpstreamConfigError) as refused:
        http_upstream(URL, flags)
    assert SECRET not in str(refused.value)
    return str(refused.value)


def test_p26_headers_take_values_from_the_environment() -> None:
    """P26: -H 'Name: ${VAR}' and --header-env Name=VAR read the environment."""
    upstream = http_upstream(
        URL,
        UpstreamFlags(
            headers=("X-Tenant: ${TENANT}", "X-Plain: literal value"),
            header_env=("Authorization=UP_AUTH",),
            env=ENV,
        ),
    )
    assert {
        "X-Tenant": "acme",
        "X-Plain": "literal value",
        "Authorization": f"Bearer {SECRET}",
    } == dict(upstream.headers)


def test_p26_a_bearer_comes_from_an_environment_variable_or_a_file(
    tmp_path: Path,
) -> None:
    """P26: --bearer-env VAR and --bearer-file PATH (its one line)."""
    token_file = tmp_path / "token"
    token_file.write_text(f"{SECRET}\n")
    from_env = http_upstream(URL, UpstreamFlags(bearer_env="UP_TOKEN", env=ENV))
    from_file = http_upstream(URL, UpstreamFlags(bearer_file=token_file, env=ENV))
    assert "BearerAuth" == type(from_env.auth).__name__
    assert "BearerAuth" == type(from_file.auth).__name__


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (
            UpstreamFlags(bearer_env="NOT_SET", env=ENV),
            "--bearer-env: the environment variable NOT_SET is not set",
        ),
        (
            UpstreamFlags(bearer_env="EMPTY", env={"EMPTY": " "}),
            "--bearer-env: the environment variable EMPTY is empty",
        ),
        (
            UpstreamFlags(headers=("X-Key: ${MISSING}",), env=ENV),
            "--header: the environment variable MISSING is not set",
        ),
        (
            UpstreamFlags(headers=(f"Authorization Bearer {SECRET}",), env=ENV),
            "--header: takes 'Name: value' (no ':' found; the value is not shown)",
        ),
        (
            UpstreamFlags(headers=(f"Authorization: Bearer {SECRET}",), env=ENV),
            "--header: Authorization carries a credential: give its value as "
            "${VAR} or --header-env Authorization=VAR, so it is not on the "
            "command line",
        ),
        (
            UpstreamFlags(header_env=("X-Key",), env=ENV),
            "--header-env: takes Name=VAR, got 'X-Key'",
        ),
        (
            UpstreamFlags(headers=("X-A: 1", "x-a: 2"), env=ENV),
            "--header: x-a is given twice",
        ),
        (
            UpstreamFlags(bearer_env="UP_TOKEN", oauth=True, env=ENV),
            "--oauth: give one of --bearer-env, --oauth",
        ),
        (
            UpstreamFlags(oauth=True, oauth_client_id="c", env=ENV),
            "--oauth: needs --oauth-issuer and --oauth-client-id",
        ),
        (
            UpstreamFlags(
                oauth=True,
                oauth_issuer="https://auth.example",
                oauth_client_id="c",
                env=ENV,
            ),
            "--oauth: needs the client secret from exactly one of "
            "--oauth-client-secret-env and --oauth-client-secret-file",
        ),
        (
            UpstreamFlags(oauth_client_id="c", env=ENV),
            "--oauth-*: the OAuth options need --oauth",
        ),
        (
            UpstreamFlags(timeout_s=0, env=ENV),
            "timeout: timeouts are seconds > 0",
        ),
    ],
)
def test_p26_bad_flags_are_a_typed_error_naming_the_flag(
    flags: UpstreamFlags, problem: str
) -> None:
    """P26/H4: each mistake is named; no secret's value is shown."""
    assert problem == _refused(flags)


def test_p26_an_unreadable_token_file_is_named(tmp_path: Path) -> None:
    """P26: a missing, empty, folder or multi-line token file is refused."""
    empty = tmp_path / "empty"
    empty.write_text("\n")
    two = tmp_path / "two"
    two.write_text(f"{SECRET}\nmore\n")
    problems = [
        _refused(UpstreamFlags(bearer_file=path))
        for path in (tmp_path / "missing", empty, tmp_path, two)
    ]
    assert [
        f"--bearer-file: {tmp_path / 'missing'} does not exist",
        f"--bearer-file: {empty} is empty",
        f"--bearer-file: {tmp_path} is a folder, not a file",
        f"--bearer-file: {two} holds more than one line",
    ] == problems


def test_p26_oauth_flags_build_the_client_credentials_provider(
    tmp_path: Path,
) -> None:
    """P26: --oauth with the secret from a file builds the SDK's provider."""
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET)
    upstream = http_upstream(
        URL,
        UpstreamFlags(
            oauth=True,
            oauth_issuer="http://127.0.0.1:2",
            oauth_client_id="helmlog-proxy",
            oauth_client_secret_file=secret_file,
            oauth_token_cache=tmp_path / "cache.json",
        ),
    )
    assert "ClientCredentialsOAuthProvider" == type(upstream.auth).__name__


def test_p26_upstream_flags_for_a_command_upstream_are_refused() -> None:
    """P26: a stdio upstream's credentials are its environment, not flags."""
    with pytest.raises(ProxyCliError) as refused:
        build_proxy(
            "python server.py",
            None,
            None,
            None,
            UpstreamFlags(bearer_env="UP_TOKEN", insecure=True),
        )
    assert (
        "--bearer-env, --upstream-insecure: for an --upstream-url only "
        "(a command's credentials are its environment)"
    ) == str(refused.value)
