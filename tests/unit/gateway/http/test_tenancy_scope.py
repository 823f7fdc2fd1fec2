"""Tenancy's pure parts: each principal's scope, and a session's owner (H2).

Pattern: law-named unit tests of ``gateway/http/_auth.py`` (the auth file's
         ``app`` and ``apps``, ``Principal.owns/decides_for/sees``) and of
         ``owner_of`` in ``gateway/http/_service.py`` (the owner read from
         a session's events), with no server and no store.
Role:    unit tests; ``tests/e2e/http/test_tenancy.py`` drives every route
         through a real server on a real Redis.
Emits:   nothing.

Laws: H2 (a session entry belongs to one app, default its identity; an
approver entry names its apps and is refused without them, fail closed; the
owner is the app in the identity of the session's first recorded turn).
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog.events import PausedCall, SessionImported, TurnEnded, TurnStarted
from helmlog.gateway.http import AuthConfigError, Authenticator, Principal
from helmlog.gateway.http._service import owner_of


def _tokens(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"tokens": [{"token": f"t{i}", **e} for i, e in enumerate(entries)]}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (_tokens({"identity": "dana", "roles": ["approver"]}),
         r'apps = \["\*"\] for every app'),
        ({"trusted_header": {"identity": "X-Email", "roles": ["approver"],
                             "from": ["10.0.0.0/8"]}},
         r"trusted_header: an approver names the apps"),
        (_tokens({"identity": "d", "roles": ["approver"], "apps": []}),
         "non-empty list"),
        (_tokens({"identity": "d", "roles": ["approver"], "apps": "billing"}),
         "non-empty list"),
        (_tokens({"identity": "a", "roles": ["session"], "apps": ["x"]}),
         "no approver role"),
        (_tokens({"identity": "d", "roles": ["approver"], "apps": ["*"],
                  "app": "x"}),
         "no session role"),
        (_tokens({"identity": "a", "roles": ["session"], "app": ""}),
         "app must be a non-empty string"),
    ],
)  # fmt: skip
def test_h2_an_auth_entry_without_a_clear_scope_is_refused(
    data: dict[str, Any], problem: str
) -> None:
    """H2, fail closed: an approver without ``apps`` is an error naming the fix
    (``apps = ["*"]`` keeps the old behaviour), never every app by default."""
    with pytest.raises(AuthConfigError, match=problem):
        Authenticator.from_mapping(data)


def test_h2_the_auth_file_gives_each_principal_its_app_and_apps() -> None:
    """H2: a session entry's app defaults to its identity; approvers and the
    trusted header carry their ``apps``."""
    auth = Authenticator.from_mapping(
        {
            **_tokens(
                {"identity": "billing-api", "roles": ["session"], "app": "billing"},
                {"identity": "support-api", "roles": ["session"]},
                {"identity": "dana", "roles": ["approver"], "apps": ["billing"]},
            ),
            "trusted_header": {
                "identity": "X-Email",
                "roles": ["approver"],
                "apps": ["*"],
                "from": ["10.0.0.0/8"],
            },
        }
    )
    found = [auth.by_token(f"t{i}") for i in range(3)]
    found.append(auth.authenticate({"x-email": "pat@ops"}, "10.1.1.1"))
    billing, support, dana, pat = (p for p in found if p is not None)
    assert ("billing", "support-api") == (billing.own_app, support.own_app)
    assert (True, False) == (billing.owns("billing"), support.owns("billing"))
    assert (True, False, False) == (
        dana.decides_for("billing"),
        dana.decides_for("support-api"),
        dana.decides_for(None),
    )
    assert (True, True) == (pat.decides_for("anything"), pat.decides_for(None))
    assert not billing.decides_for("billing")


def _turn(turn: int, identity: Any) -> TurnStarted:
    return TurnStarted(turn=turn, identity=identity)


@pytest.mark.parametrize(
    ("events", "owner"),
    [
        ([_turn(1, {"principal": "b", "app": "billing"}),
          TurnEnded(turn=1, final_content="ok"),
          _turn(2, {"principal": "x", "app": "support"})], "billing"),
        ([_turn(1, {"principal": "b"})], None),
        ([_turn(1, None), _turn(2, {"app": "billing"})], None),
        ([_turn(1, {"app": ""})], None),
        ([_turn(1, {"app": 7})], None),
        ([], None),
        ([SessionImported(kind="pause", checkpoint_digest="d",
                          call=PausedCall(kind="ask", identity={"app": "billing"})),
          _turn(2, {"app": "support"})], "billing"),
    ],
    ids=["first-turn", "no-app", "first-turn-names-none", "empty", "not-a-str",
         "no-turn", "imported"],
)  # fmt: skip
def test_h2_the_owner_is_the_app_of_the_first_recorded_turn(
    events: list[Any], owner: str | None
) -> None:
    """H2: only the first turn's identity counts; a later turn cannot claim a
    session, and one whose first turn names no app is no one's."""
    assert owner == owner_of(events)


def test_h2_a_principal_built_without_app_owns_its_identity() -> None:
    """H2: ``Principal.app`` empty means its identity; ``apps`` empty, nothing."""
    who = Principal(identity="svc", roles=frozenset({"session", "approver"}))
    assert ("svc", True, False, False) == (
        who.own_app,
        who.sees("svc"),
        who.decides_for("svc"),
        who.sees(None),
    )
