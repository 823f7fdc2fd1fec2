"""Benchmark the proxy's upstream hop: CPU per call of ``call_raw`` against ``request``.

Pattern: one run; ``bench/proxy.py``'s FastMCP server in its own process (over
         stdio and Streamable HTTP), one ``Upstream`` to it here, as the proxy
         holds; ``CALLS`` calls after ``WARMUP``, the two paths alternating in
         blocks; CPU is this process's ``time.process_time`` over the calls.
Role:    bench; ``uv run python bench/upstream.py`` (``--quick`` to smoke).
Emits:   a summary, then one JSON line ``{"bench": "upstream", "cpu_us_*",
         "wall_ms_p50_*"}``.

Laws: none; issue 10 item 8 (the proxy's added latency) is what it serves.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
PROXY_BENCH = HERE.parent / "proxy.py"
sys.path.insert(0, str(HERE.parent))
from proxy import _free_port, _wait_port  # noqa: E402 — the proxy bench's own helpers

BLOCK = 50


async def _measure(target: Any, calls: int, warmup: int) -> dict[str, float]:
    import mcp.types as types

    from helmlog.gateway.upstream import Upstream

    upstream = Upstream(target)
    await upstream.open()
    params = {"name": "echo", "arguments": {"word": "hello"}}
    request = types.CallToolRequest(params=types.CallToolRequestParams(**params))

    async def raw() -> None:
        await upstream.call_raw("tools/call", params)

    async def typed() -> None:
        await upstream.request(request, types.CallToolResult)

    paths = {"raw": raw, "request": typed}
    cpu = dict.fromkeys(paths, 0.0)
    wall: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for fn in paths.values():
            for _ in range(warmup):
                await fn()
        done = 0
        while done < calls:
            for name, fn in paths.items():
                cpu_start = time.process_time()
                for _ in range(BLOCK):
                    started = time.perf_counter()
                    await fn()
                    wall[name].append((time.perf_counter() - started) * 1000)
                cpu[name] += time.process_time() - cpu_start
            done += BLOCK
    finally:
        await upstream.close()
    out: dict[str, float] = {}
    for name in paths:
        out[f"cpu_us_{name}"] = cpu[name] / done * 1e6
        out[f"wall_ms_p50_{name}"] = statistics.median(wall[name])
    return out


def _stdio(calls: int, warmup: int) -> dict[str, float]:
    command = [sys.executable, str(PROXY_BENCH), "serve"]
    return asyncio.run(_measure(command, calls, warmup))


def _http(calls: int, warmup: int) -> dict[str, float]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(PROXY_BENCH), "serve-http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc)
        return asyncio.run(_measure(f"http://127.0.0.1:{port}/mcp", calls, warmup))
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> int:
    quick = "--quick" in sys.argv
    calls, warmup = (100, 20) if quick else (1000, 100)
    line: dict[str, Any] = {"bench": "upstream", "calls": calls}
    for transport, run in (("stdio", _stdio), ("http", _http)):
        r = run(calls, warmup)
        print(
            f"{transport:>6}: call_raw {r['cpu_us_raw']:.0f} us CPU/call "
            f"(p50 {r['wall_ms_p50_raw']:.3f} ms) | request "
            f"{r['cpu_us_request']:.0f} us CPU/call "
            f"(p50 {r['wall_ms_p50_request']:.3f} ms)"
        )
        for key, value in r.items():
            name, _, path = key.rpartition("_")
            line[f"{name}_{path}_{transport}"] = round(value, 3 if "ms" in key else 0)
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
