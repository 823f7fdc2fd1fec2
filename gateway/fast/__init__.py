"""The proxy's kept fast paths, all here: a serving lane and two upstream calls.

Pattern: each takes only a plain ``tools/call`` (no progress token, no task)
         and hands every other message to the SDK unchanged: ``ServingLane``
         runs a stdio line through the SDK's kernel without its dispatcher;
         ``FastPosts`` is one raw POST on the SDK transport's ``httpx2``
         client; ``RawCalls`` a raw call on a stdio child's pipes (ids
         ``hl-N``), checked as the SDK's ``send_request`` checks.
Role:    gateway layer, under ``proxy`` and ``upstream``; ``fast_calls =
         False`` (proxy) and ``Upstream.fast = False`` take the SDK path.
Emits:   nothing of their own.

Laws: P25, P20; differential tests run the same calls with the paths on and
off and compare answers and audit rows whole (test_proxy_lane.py,
test_proxy_fast.py, test_upstream_raw.py: both eras, errors, cancels, an
upstream killed mid-call). Why kept (bench/proxy.py, 5 ms tool, added p50,
alternated pairs): the lane takes 0.05–0.4 ms off a stdio call, the raw
stdio call 0.31–0.59 ms (1.13–1.29 → 0.65–0.82 ms), the POST ~1.3 ms off an
HTTP upstream call. Figures and method: docs/design.md, the proxy.
"""

from .lane import ServingLane
from .stdio_upstream import RawCalls
from .upstream import FastPosts, HttpLink

__all__ = ["FastPosts", "HttpLink", "RawCalls", "ServingLane"]
