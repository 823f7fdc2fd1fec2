"""helmlog.events.testing — the store ports' contract suites, shipped.

Pattern: one contract module per port (``stream_recorder``, ``facts_log``,
         ``session_index``): module-level pytest tests on a ``store`` /
         ``make_store`` fixture, collected by a star-import.
Role:    events layer, shipped tests; run here on memory, Redis and Redis
         Cluster (``tests/contracts``); a third-party adapter runs the same:
         ``from helmlog.events.testing import *`` and a ``make_store``
         fixture yielding ``make(*, chain_key=None)`` (``erase`` overridable).

Laws: R2, R3, R4, R7, R10, R11, R12, R18, R19, R25, R26 (one test per law).

Why module-level tests, not a base class: the functions this repository runs
are the ones an adapter runs.
"""

from __future__ import annotations

import pytest

from .facts_log import *  # noqa: F403
from .facts_log import __all__ as _facts_log
from .session_index import *  # noqa: F403
from .session_index import __all__ as _session_index
from .stream_recorder import *  # noqa: F403
from .stream_recorder import __all__ as _stream_recorder
from .support import StoreFactory

# Invariant: the tests and the async fixtures share one loop, so a client a
# store opened in a fixture is used and closed on the loop it connected on.
pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
def store(make_store: StoreFactory) -> object:
    """One store of the adapter under test, without a chain key."""
    return make_store()


__all__ = [
    "pytestmark",
    "store",
    *_stream_recorder,
    *_facts_log,
    *_session_index,
]
