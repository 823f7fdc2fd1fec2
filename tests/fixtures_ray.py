"""One real local Ray for the whole test session (``ray.init(num_cpus=2)``).

Starting Ray costs seconds and gigabytes; every test that needs it shares
this one, and ``Cluster.local()`` uses it rather than starting another. Hosts
are named and detached, so each test names its cluster uniquely and destroys
its hosts (``shutdown(hosts=True)``) so none leak into the next test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """A started local Ray, shut down at the end of the test session."""
    import ray

    if not ray.is_initialized():
        # "local": start this session's own Ray, never join another process's
        # instance that happens to run on the machine (a bench, another suite).
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    yield
    ray.shutdown()
