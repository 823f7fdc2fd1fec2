"""Shared fixtures: real servers, started by the fixtures, one per test session.

Redis fixtures live in ``tests/fixtures_redis.py`` (a real ``redis-server`` on
a free loopback port); Ray fixtures, when they land, share one local Ray.
"""

pytest_plugins = ["tests.fixtures_redis", "tests.fixtures_ray"]
