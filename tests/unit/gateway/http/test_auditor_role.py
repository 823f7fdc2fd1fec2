"""The auditor role of the auth file (issue 28 item 2): reads, never decides.

Pattern: law-named unit tests of ``gateway/http/_auth.py``'s ``Principal``
         and ``Authenticator.from_mapping`` for ``roles = ["auditor"]``.
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog.gateway.http import AuthConfigError, Authenticator


def _auth(**entry: Any) -> Authenticator:
    return Authenticator.from_mapping(
        {"tokens": [{"identity": "olga", "token": "t", **entry}]}
    )


def test_an_auditor_reads_its_apps_and_decides_for_none() -> None:
    """Issue 28 item 2: an auditor of ``billing`` sees billing's sessions,
    not another app's, and decides for no app at all."""
    who = _auth(roles=["auditor"], apps=["billing"]).by_token("t")
    assert who is not None
    assert (True, False, False, False) == (
        who.sees("billing"),
        who.sees("support"),
        who.decides_for("billing"),
        who.can("approver"),
    )


def test_an_every_app_auditor_reads_everything_but_decides_nothing() -> None:
    """Issue 28 item 2: ``apps = ["*"]`` reads every app's sessions and
    those with no recorded owner; still no decision."""
    who = _auth(roles=["auditor"], apps=["*"]).by_token("t")
    assert who is not None
    assert (True, True, False) == (
        who.reads_everything,
        who.sees(None),
        who.decides_for(None),
    )


def test_an_auditor_without_apps_is_refused() -> None:
    """Issue 28 item 2, fail closed: an auditor names what it reads."""
    with pytest.raises(AuthConfigError, match="an auditor names the apps"):
        _auth(roles=["auditor"])
