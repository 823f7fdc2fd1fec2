"""Who signed in on the page: opaque login ids held by the server, expiring.

Pattern: a bounded table, login id digest -> (principal, expiry); ``open``
         mints, ``who`` answers (``None``: unknown, revoked or expired),
         ``revoke`` forgets; full, it drops the oldest login.
Role:    gateway layer (http): ``POST /login|/logout``, ``principal_of``.
Emits:   nothing.

Laws: H5 (the cookie holds an opaque, expiring login id, never the token;
logout revokes it server-side).

Why ids are kept by SHA-256: a lookup tells a timing observer nothing of a
live id, and a dump of the table holds no cookie that would sign anyone in.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import msgspec

from ._auth import Principal

DEFAULT_LOGIN_TTL_S: Final = 8 * 3600.0
DEFAULT_MAX_LOGINS: Final = 10_000


def _digest(login_id: str) -> str:
    return hashlib.sha256(login_id.encode()).hexdigest()


class Logins:
    """The live logins of one serving process, bounded and expiring."""

    def __init__(
        self,
        ttl_s: float = DEFAULT_LOGIN_TTL_S,
        max_live: int = DEFAULT_MAX_LOGINS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"a login's lifetime must be positive, not {ttl_s!r}")
        if max_live < 1:
            raise ValueError(f"at least one login must fit, not {max_live!r}")
        self.ttl_s = ttl_s
        self.max_live = max_live
        self._clock = clock
        # Invariant: insertion order is expiry order (one ttl for all), so the
        # expired entries are always a prefix and the first is the oldest. An
        # OrderedDict: a dict's first key is found by walking every entry
        # deleted since its last resize, so a sweep of k expired logins (one
        # first key each) was quadratic in k.
        self._live: OrderedDict[str, tuple[Principal, float]] = OrderedDict()

    def __len__(self) -> int:
        self._sweep()
        return len(self._live)

    def open(self, principal: Principal) -> str:
        """A fresh login id (``secrets.token_urlsafe(32)``) for ``principal``."""
        self._sweep()
        while len(self._live) >= self.max_live:
            self._live.popitem(last=False)
        login_id = secrets.token_urlsafe(32)
        who = msgspec.structs.replace(principal, via="cookie")
        self._live[_digest(login_id)] = (who, self._clock() + self.ttl_s)
        return login_id

    def who(self, login_id: str) -> Principal | None:
        """The principal ``login_id`` stands for while it is live, else ``None``."""
        entry = self._live.get(_digest(login_id))
        if entry is None:
            return None
        if self._clock() >= entry[1]:
            self._sweep()
            return None
        return entry[0]

    def revoke(self, login_id: str) -> bool:
        """Forget ``login_id``; whether it was live."""
        return self._live.pop(_digest(login_id), None) is not None

    def _sweep(self) -> None:
        now = self._clock()
        live = self._live
        while live:
            _who, until = next(iter(live.values()))
            if until > now:
                return
            live.popitem(last=False)
