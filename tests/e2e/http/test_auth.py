"""Authenticated approvers: tokens, roles, the trusted header (issue 11 item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helmlog.gateway.http import (
    AuthConfigError,
    Authenticator,
    approver_from_environment,
    token_digest,
)

FILE = """
[[tokens]]
identity = "dana@ops"
roles = ["approver"]
apps = ["*"]
token_sha256 = "{digest}"

[[tokens]]
identity = "app"
roles = ["session"]
token = "plain-token"

[trusted_header]
identity = "X-Forwarded-Email"
roles = ["approver"]
apps = ["*"]
from = ["10.0.0.0/8"]
"""


@pytest.fixture
def auth(tmp_path: Path) -> Authenticator:
    path = tmp_path / "auth.toml"
    path.write_text(FILE.format(digest=token_digest("secret-dana")))
    return Authenticator.from_file(path)


def test_a_token_stored_as_its_digest_names_its_identity_and_roles(
    auth: Authenticator,
) -> None:
    """``token_sha256`` entries match the token they digest, nothing else."""
    who = auth.authenticate({"authorization": "Bearer secret-dana"}, "127.0.0.1")
    assert ("dana@ops", frozenset({"approver"}), "token") == (
        who.identity if who else None,
        who.roles if who else None,
        who.via if who else None,
    )
    assert None is auth.authenticate({"authorization": "Bearer secret"}, None)


def test_a_malformed_authorization_header_is_no_one(auth: Authenticator) -> None:
    """A non-bearer scheme is unauthenticated, even with a trusted header."""
    headers = {"authorization": "Basic abc", "x-forwarded-email": "pat@ops"}
    assert None is auth.authenticate(headers, "10.1.2.3")


def test_the_trusted_header_counts_only_from_the_proxy(auth: Authenticator) -> None:
    """A header from an address outside ``from`` vouches for no one."""
    headers = {"x-forwarded-email": "pat@ops"}
    who = auth.authenticate(headers, "10.1.2.3")
    assert ("pat@ops", "header") == (
        who.identity if who else None,
        who.via if who else None,
    )
    assert None is auth.authenticate(headers, "192.168.1.5")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no tokens"),
        ('[[tokens]]\nidentity = "a"\nroles = ["approver"]\n', "token_sha256"),
        ('[[tokens]]\nidentity = "a"\nroles = ["root"]\ntoken = "t"\n', "unknown role"),
        ('[[tokens]]\nroles = ["session"]\ntoken = "t"\n', "identity"),
        ('[trusted_header]\nidentity = "X-User"\nroles = ["approver"]\n', "from"),
        ("not = [toml", "auth file"),
    ],
)
def test_an_unusable_auth_file_is_refused_naming_the_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    """Fail closed: a file that grants nothing clearly is an error, not a default."""
    path = tmp_path / "auth.toml"
    path.write_text(text)
    with pytest.raises(AuthConfigError, match=problem):
        Authenticator.from_file(path)


def test_the_shell_approver_comes_from_the_environment(tmp_path: Path) -> None:
    """``$HELMLOG_APPROVER``, or ``$HELMLOG_TOKEN`` looked up in the auth file."""
    path = tmp_path / "auth.toml"
    path.write_text(FILE.format(digest=token_digest("secret-dana")))
    by_token = approver_from_environment(
        {"HELMLOG_TOKEN": "secret-dana", "HELMLOG_AUTH": str(path)}
    )
    by_name = approver_from_environment({"HELMLOG_APPROVER": "eve@ops"})
    assert ("dana@ops", "eve@ops") == (by_token.identity, by_name.identity)
    with pytest.raises(AuthConfigError, match="not an approver"):
        approver_from_environment(
            {"HELMLOG_TOKEN": "plain-token", "HELMLOG_AUTH": str(path)}
        )
    with pytest.raises(AuthConfigError, match="HELMLOG_APPROVER"):
        approver_from_environment({})
