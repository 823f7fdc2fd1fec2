"""The proxy's kept fast paths, all here: a serving lane and two upstream calls.

Pattern: two modules beside the SDK's own machinery, each taking only a
         plain ``tools/call`` (no progress token, no task) and handing every
         other message to the SDK unchanged:
         ``lane.ServingLane`` (serving side): a stdio line decoded once and
         run through the SDK's kernel (``ServerRunner``/``serve_one``: its
         validation, middleware, the session's handler, its result shaping)
         without the dispatcher's message models, streams and task hop;
         ``upstream.FastPosts`` (client side): one raw POST on the SDK
         transport's own ``httpx2`` client, checked by the SDK's validator;
         ``stdio_upstream.RawCalls`` (client side): a raw call on a stdio
         child's pipes (ids ``hl-N``, msgspec), stamped by the session's own
         stamp and checked as ``send_request`` checks; the pipes' reader
         hands every other line to the ``ClientSession`` as the SDK's parses.
Role:    gateway layer, under ``proxy`` and ``upstream`` (imports only the
         SDK and ``gateway._withheld``); ``McpProxy.fast_calls = False``
         turns the lane off, ``Upstream.fast = False`` (before ``open`` for
         stdio) the upstream paths (the SDK path everywhere).
Emits:   nothing of their own.

Laws: P25, P20. Checked by differential tests that run the same calls with
the paths on and off and compare answers and audit rows whole:
``tests/unit/gateway/test_proxy_lane.py`` (the lane: plain, tool error,
hidden, renamed by a rule, structured, unknown tool, bad params, cancelled,
both eras) and ``test_proxy_fast.py`` (the upstream POST, the stdio raw
call), ``test_upstream_raw.py`` (the stdio raw call against the SDK's
``stdio_client`` in both eras: plain, tool error, unknown tool, bad params,
progress, cancelled, the upstream killed mid-call).

Why kept (bench/proxy.py, 400 calls, 5 ms tool, added p50, medians of 3
rounds, 3 alternated pairs): the lane takes 0.05–0.4 ms off a stdio call
(1.22–1.56 → 1.16–1.36 ms; one rule 1.62–2.09 → 1.52–1.66 ms); the POST
~1.3 ms off an HTTP upstream call; the stdio raw call (3 alternated pairs,
lane on) 0.31–0.59 ms off a 5 ms stdio call (1.13–1.29 → 0.65–0.82 ms; one
rule 1.34–1.49 → 1.12–1.28 ms; proxy CPU 1350–1375 → 725–1025 µs a call).
Figures: docs/design.md, the proxy.
"""

from .lane import ServingLane
from .stdio_upstream import RawCalls
from .upstream import FastPosts, HttpLink

__all__ = ["FastPosts", "HttpLink", "RawCalls", "ServingLane"]
