"""The page's server-side logins: opaque, expiring, bounded, revocable (H5).

Pattern: law-named unit tests of ``gateway/http/_logins.py`` on a fake clock
         (a number the test moves), so expiry is exact and nothing waits.
Role:    unit tests for ``Logins``; the e2e tests in
         ``tests/e2e/http/test_login.py`` drive it through a real server.
Emits:   nothing.

Laws: H5 (a login id is random and stands for its principal until it
expires or is revoked; the table holds at most ``max_live`` logins, expired
ones swept, the oldest dropped past the bound).
"""

from __future__ import annotations

import pytest

from helmlog.gateway.http import Principal
from helmlog.gateway.http._logins import Logins

DANA = Principal(identity="dana@ops", roles=frozenset({"approver"}))


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_h5_a_login_id_is_random_and_stands_for_its_principal() -> None:
    """H5: each sign-in mints a new url-safe id (32 random bytes); it names
    the principal, marked as vouched for by the cookie."""
    logins = Logins(ttl_s=60)
    first, second = logins.open(DANA), logins.open(DANA)
    who = logins.who(first)
    assert (43, False) == (len(first), first == second)
    assert ("dana@ops", frozenset({"approver"}), "cookie") == (
        who.identity if who else None,
        who.roles if who else None,
        who.via if who else None,
    )
    assert None is logins.who("not-" + first)


def test_h5_a_login_expires_after_its_lifetime() -> None:
    """H5: live until ``ttl_s`` has passed, then no one, and swept."""
    clock = Clock()
    logins = Logins(ttl_s=60, clock=clock)
    login_id = logins.open(DANA)
    clock.now += 59.999
    assert DANA.identity == getattr(logins.who(login_id), "identity", None)
    clock.now += 0.001
    assert (None, 0) == (logins.who(login_id), len(logins))


def test_h5_a_revoked_login_stands_for_no_one() -> None:
    """H5: ``revoke`` forgets the id at once; revoking it again is a no-op."""
    logins = Logins(ttl_s=60)
    login_id = logins.open(DANA)
    assert (True, None, False) == (
        logins.revoke(login_id),
        logins.who(login_id),
        logins.revoke(login_id),
    )


def test_h5_the_table_is_bounded_dropping_the_oldest() -> None:
    """H5: past ``max_live`` the oldest login goes; expired ones are swept
    before anything live is dropped."""
    clock = Clock()
    logins = Logins(ttl_s=60, max_live=2, clock=clock)
    oldest = logins.open(DANA)
    clock.now += 30
    middle = logins.open(DANA)
    newest = logins.open(DANA)
    assert (None, True, True, 2) == (
        logins.who(oldest),
        logins.who(middle) is not None,
        logins.who(newest) is not None,
        len(logins),
    )
    clock.now += 60  # middle and newest expired
    latest = logins.open(DANA)
    assert (1, True) == (len(logins), logins.who(latest) is not None)


def test_h5_a_mass_expiry_sweeps_exactly_the_expired_logins() -> None:
    """H5: thousands of logins expiring together are swept at once, and the
    ones opened after them stay live, in order (the table is an OrderedDict:
    a plain dict's oldest entry is found by walking every entry deleted
    since its last resize, which made this sweep quadratic)."""
    clock = Clock()
    logins = Logins(ttl_s=60, max_live=10_000, clock=clock)
    for _ in range(5_000):
        logins.open(DANA)
    clock.now += 30
    later = [logins.open(DANA) for _ in range(3)]
    clock.now += 30  # the first 5,000 expire; the later three have 30 s left
    assert 3 == len(logins)
    assert all(logins.who(login_id) is not None for login_id in later)
    fill = [logins.open(DANA) for _ in range(9_997)]
    dropped = logins.open(DANA)  # past the bound: the oldest live one goes
    assert (10_000, None) == (len(logins), logins.who(later[0]))
    assert logins.who(later[1]) is not None and logins.who(fill[-1]) is not None
    assert logins.who(dropped) is not None


@pytest.mark.parametrize(("ttl_s", "max_live"), [(0, 10), (-1, 10), (60, 0)])
def test_h5_a_login_table_that_holds_nothing_is_refused(
    ttl_s: float, max_live: int
) -> None:
    """H5: a lifetime or bound that would admit no login is an error."""
    with pytest.raises(ValueError, match="login"):
        Logins(ttl_s=ttl_s, max_live=max_live)
