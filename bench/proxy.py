"""Benchmark the MCP proxy: latency it adds to a tools/call, stdio and HTTP.

Pattern: one script, one run; the upstream (this file, ``serve``/
         ``serve-http``) and ``helmlog mcp-proxy`` run as their own processes,
         spoken to by the SDK's ``Client`` (v2, its default era); a human
         summary, then exactly one JSON line.
Role:    bench; ``uv run python bench/proxy.py`` (``--quick``, ``--case=KEY``,
         ``--rounds=N``: each case N times, the median round reported).
Emits:   the summary, ending with ``{"bench": "proxy", "added_ms_p50_stdio",
         ...}``: ``echo`` audit off and on (``*_audit``), and a 5 ms tool with
         no rule (``*_5ms``) and one governance rule (``*_5ms_rule``).

Laws: P14 (the rule runs), P20, P21, P23 (the audited runs).

Method: one call direct and one through the proxy, alternating; ``added`` is
the difference of percentiles. Targets: issue 10 (<= 1 ms p50 audit off, <= 2
ms on); issue 26 (5 ms tool: <= 1 ms p50 without rules, <= 1.5 ms with one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
TARGET_P50_MS = 1.0
TARGET_P50_AUDIT_MS = 2.0
TARGET_P50_RULE_MS = 1.5  # issue 26: one governance rule, a 5 ms tool
SLOW_S = 0.005


def serve(http_port: int | None) -> None:
    """The upstream: an MCPServer (the SDK's) with a trivial and a 5 ms tool."""
    import logging

    import anyio
    from mcp.server.mcpserver import MCPServer

    logging.disable(logging.INFO)
    server = MCPServer("bench-upstream")

    @server.tool()
    def echo(word: str) -> str:
        """Echo."""
        return word

    @server.tool()
    async def slow5(word: str) -> str:
        """Echo after 5 ms (a tool that does some work)."""
        await anyio.sleep(SLOW_S)  # the tool's own work, not a wait on a result
        return word

    if http_port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", port=http_port)


def one_rule() -> dict[str, Any]:
    """The ``--policy`` of the one-rule runs: one governance link that allows."""
    from helmlog import ToolMiddleware, allow

    rule = ToolMiddleware(name="bench-rule", on_tool_call=lambda call: allow())
    return {"governance": [rule]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("a bench server did not start") from None
            time.sleep(0.05)


@contextlib.contextmanager
def _process(args: list[str], env: dict[str, str], port: int) -> Any:
    proc = subprocess.Popen(
        args,
        env=env,
        cwd=HERE.parent,  # where ``--policy proxy:one_rule`` is found
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc)
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def _env(audit: bool) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HELMLOG_AUDIT_SECRET", None)
    if audit:
        env["HELMLOG_AUDIT_SECRET"] = "bench secret"
    return env


@contextlib.asynccontextmanager
async def _stdio(command: list[str], env: dict[str, str]) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=command[0], args=command[1:], env=env, cwd=str(HERE.parent)
    )
    with open(os.devnull, "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), cache=None) as client:
            yield client


@contextlib.asynccontextmanager
async def _http(url: str) -> AsyncIterator[Any]:
    from mcp import Client

    async with Client(url, cache=None) as client:
        yield client


def _cpu_s(pid: int | None) -> float | None:
    """A process's user+system CPU seconds, or ``None`` off Linux."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proxy_pid() -> int | None:
    """The ``helmlog mcp-proxy`` child of this process (started by the client)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and b"mcp-proxy" in cmdline:
            return int(entry.name)
    return None


async def _alternate(
    direct: Any,
    proxied: Any,
    calls: int,
    warmup: int,
    pid: int | None = None,
    tool: str = "echo",
) -> dict[str, float]:
    times: dict[str, list[float]] = {"direct": [], "proxied": []}
    cpu_before: float | None = None
    for i in range(calls + warmup):
        if i == warmup:
            cpu_before = _cpu_s(pid)
        for name, session in (("direct", direct), ("proxied", proxied)):
            started = time.perf_counter()
            await session.call_tool(tool, {"word": "hello"})
            if i >= warmup:
                times[name].append((time.perf_counter() - started) * 1000)
    out: dict[str, float] = {}
    for name, values in times.items():
        values.sort()
        out[f"{name}_p50"] = statistics.median(values)
        out[f"{name}_p99"] = values[min(len(values) - 1, int(len(values) * 0.99))]
    out["added_p50"] = out["proxied_p50"] - out["direct_p50"]
    out["added_p99"] = out["proxied_p99"] - out["direct_p99"]
    cpu_after = _cpu_s(pid)
    if cpu_before is not None and cpu_after is not None:
        out["proxy_cpu_us"] = (cpu_after - cpu_before) / calls * 1e6
    return out


Case = tuple[bool, str, bool]
"""``(audit, tool, one rule)``: what one run measures."""

CASES: dict[str, Case] = {
    "": (False, "echo", False),
    "_audit": (True, "echo", False),
    "_5ms": (False, "slow5", False),
    "_5ms_rule": (False, "slow5", True),
}


def _policy(rule: bool) -> list[str]:
    return ["--policy", "proxy:one_rule"] if rule else []


async def _stdio_run(case: Case, calls: int, warmup: int) -> dict[str, float]:
    audit, tool, rule = case
    upstream = [sys.executable, str(HERE), "serve"]
    proxy = [
        sys.executable,
        "-m",
        "helmlog.cli",
        "mcp-proxy",
        "--upstream",
        " ".join(upstream),
        *_policy(rule),
    ]
    async with _stdio(upstream, _env(False)) as direct, _stdio(proxy, _env(audit)) as p:
        return await _alternate(direct, p, calls, warmup, _proxy_pid(), tool)


async def _http_run(case: Case, calls: int, warmup: int) -> dict[str, float]:
    audit, tool, rule = case
    up_port, proxy_port = _free_port(), _free_port()
    upstream = [sys.executable, str(HERE), "serve-http", str(up_port)]
    up_url = f"http://127.0.0.1:{up_port}/mcp"
    proxy = [
        sys.executable,
        "-m",
        "helmlog.cli",
        "mcp-proxy",
        "--upstream-url",
        up_url,
        "--http",
        f"127.0.0.1:{proxy_port}",
        *_policy(rule),
    ]
    with (
        _process(upstream, _env(False), up_port),
        _process(proxy, _env(audit), proxy_port) as proxy_pid,
    ):
        async with (
            _http(up_url) as direct,
            _http(f"http://127.0.0.1:{proxy_port}/mcp") as p,
        ):
            return await _alternate(direct, p, calls, warmup, proxy_pid, tool)


def _median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """Of several rounds of one case, the one with the median added p50."""
    return sorted(runs, key=lambda r: r["added_p50"])[(len(runs) - 1) // 2]


def main() -> int:
    quick = "--quick" in sys.argv
    calls, warmup = (60, 10) if quick else (400, 40)
    rounds = next(
        (int(a.removeprefix("--rounds=")) for a in sys.argv if a[:9] == "--rounds="),
        1,
    )
    if rounds < 1:
        raise SystemExit("bench/proxy.py: --rounds=N takes N >= 1")
    results: dict[str, dict[str, float]] = {}
    only = [a.removeprefix("--case=") for a in sys.argv if a.startswith("--case=")]
    for transport, run in (("stdio", _stdio_run), ("http", _http_run)):
        for suffix, case in CASES.items():
            key = f"{transport}{suffix}"
            if only and key not in only:
                continue
            runs = [asyncio.run(run(case, calls, warmup)) for _ in range(rounds)]
            results[key] = r = _median_run(runs)
            print(
                f"{key:>10} (median of {rounds}): direct p50 "
                f"{r['direct_p50']:.3f} ms p99 "
                f"{r['direct_p99']:.3f} ms | proxied p50 {r['proxied_p50']:.3f} ms "
                f"p99 {r['proxied_p99']:.3f} ms | added p50 {r['added_p50']:.3f} ms "
                f"p99 {r['added_p99']:.3f} ms | proxy CPU "
                f"{r.get('proxy_cpu_us', float('nan')):.0f} us/call"
            )
    line: dict[str, Any] = {"bench": "proxy", "calls": calls, "rounds": rounds}
    for key, r in results.items():
        transport, _, rest = key.partition("_")
        suffix = f"_{rest}" if rest else ""
        line[f"added_ms_p50_{transport}{suffix}"] = round(r["added_p50"], 3)
        line[f"added_ms_p99_{transport}{suffix}"] = round(r["added_p99"], 3)
        line[f"direct_ms_p50_{transport}{suffix}"] = round(r["direct_p50"], 3)
        if "proxy_cpu_us" in r:
            line[f"proxy_cpu_us_{transport}{suffix}"] = round(r["proxy_cpu_us"])
    targets = {
        "": TARGET_P50_MS,
        "_audit": TARGET_P50_AUDIT_MS,
        "_5ms": TARGET_P50_MS,
        "_5ms_rule": TARGET_P50_RULE_MS,
    }
    line["targets_met"] = all(
        line[f"added_ms_p50_{t}{suffix}"] <= target
        for t in ("stdio", "http")
        for suffix, target in targets.items()
        if f"added_ms_p50_{t}{suffix}" in line
    )
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(None)
    elif sys.argv[1:2] == ["serve-http"]:
        serve(int(sys.argv[2]))
    else:
        raise SystemExit(main())
