"""helmlog.events.testing — the store ports' contract suites, shipped.

Pattern: one contract module per port (eventsourcing-style): ``stream_recorder``,
         ``facts_log``, ``session_index``; module-level pytest tests taking a
         ``store``/``make_store`` fixture, collected into whatever test module
         star-imports them (this package: all three; one module: its port).
Role:    events layer, shipped tests; this repository runs them on the memory
         store, Redis and a Redis Cluster (``tests/contracts``); a third-party
         adapter runs the same tests on its own store.

Laws: R2, R3, R4, R7, R10, R11, R12, R18, R19, R25, R26 — each test is
named for the law it defends. The R25/R26 tests delete a session's keys
through the ``erase`` fixture, which an adapter of another kind overrides.

Run it against your adapter (needs ``pytest`` and ``pytest-asyncio``)::

    # tests/test_my_store.py
    import pytest_asyncio
    from helmlog.events.testing import *  # noqa: F403  (the contract's tests)

    @pytest_asyncio.fixture(loop_scope="session")
    async def make_store():
        opened = []

        def make(*, chain_key: bytes | None = None) -> MyStore:
            store = MyStore(chain_key=chain_key)  # a clean store per test
            opened.append(store)
            return store

        yield make
        for store in opened:
            await store.close()

``store`` (one store without a chain key) is provided from ``make_store``; a
module-level ``pytestmark`` runs the tests on pytest-asyncio's session loop,
so an async ``make_store`` belongs on that loop too (as above; under
``asyncio_mode = "auto"`` a plain ``@pytest.fixture`` does).
A remote adapter publishes facts after the append's round trip (R4), so the
tests wait for facts with a deadline (``support.eventually``) rather than
read them at once.

Why module-level tests and a star import, not a base class: the same test
functions this repository runs are the ones an adapter runs, with no
subclassing or fixture plumbing beyond one fixture; pytest collects test
functions imported into a test module like its own.
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
