"""Where a session lives: a stable hash of its id over a fixed number of hosts.

Pattern: static sharding by a process-independent hash.
Role:    actors layer; the ``Cluster`` client routes every operation on a
         session to the host this names.
Emits:   nothing.

Laws: R8 (a session lives on host ``int.from_bytes(sha256(id)[:8], "big") %
n_hosts`` — the same in every process, never Python's salted ``hash`` — and
the number of hosts never grows with the number of sessions).

Why not ``hash()``: Python salts string hashes per process, so two clients
would disagree about where a session lives.
"""

from __future__ import annotations

import hashlib


def host_for(session_id: str, n_hosts: int) -> int:
    """The index of the host a session lives on (R8)."""
    if n_hosts < 1:
        raise ValueError("a cluster needs at least one session host")
    digest = hashlib.sha256(session_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % n_hosts
