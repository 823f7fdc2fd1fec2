"""One real local Ray for the whole test session (``ray.init(num_cpus=2)``).

Starting Ray costs seconds and gigabytes; every test that needs it shares
this one, and ``Cluster.local()`` joins it rather than starting another.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """A started local Ray, shut down at the end of the test session."""
    import ray

    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    yield
    ray.shutdown()
