"""The proxy's kept fast paths, all here: two serving lanes, two upstream calls.

Pattern: each takes only a plain ``tools/call`` (no progress token, no task)
         and hands every other message to the SDK unchanged: ``ServingLane``
         runs a stdio line without the SDK's dispatcher, ``HttpLane`` a
         2026-era POST without its entry (each runs the kernel's steps
         itself, the kernel where a tracer provider is set); ``FastPosts``
         is one raw POST on ``wire.HttpWire``
         (kept-alive HTTP/1.1, the upstream client's settings) or on that
         ``httpx2`` client; ``RawCalls`` a raw call on a stdio child's pipes;
         ``OneWriteProtocol`` writes an HTTP answer's head and body at once.
Role:    gateway layer, under ``proxy`` and ``upstream``; ``fast_calls =
         False`` (proxy), ``Upstream.fast``/``.wire = False`` take the SDK's.
Emits:   nothing of their own.

Laws: P25, P20, P26; differential tests compare answers and audit rows with
the paths on and off (test_proxy_lane*.py, test_proxy_fast.py,
test_upstream_raw.py, test_upstream_wire.py; test_proxy_one_write.py: the
raw bytes). Why kept: each pays in bench/proxy.py (docs/design.md, the proxy).
"""

from .http_lane import HttpLane
from .lane import ServingLane
from .one_write import OneWriteProtocol
from .stdio_upstream import RawCalls
from .upstream import FastPosts, HttpLink

__all__ = [
    "FastPosts",
    "HttpLane",
    "HttpLink",
    "OneWriteProtocol",
    "RawCalls",
    "ServingLane",
]
