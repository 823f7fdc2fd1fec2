"""Benchmark the in-process governed loop: turns per second, cost per call.

Pattern: a micro-benchmark in one process: warm up, then the median of timed
         repetitions, each turn a fresh ``agent.run`` on one long-lived agent;
         configurations take turns in every repetition.
Role:    bench; ``uv run python bench/turns.py``; a summary and one JSON line.
Emits:   nothing of helmlog's; stdout only.

Measures: a governed one-tool turn (3 ``allow()`` before-tool, 1 transform
after-tool); the same with no links (G11); µs per call when a reply proposes
1, 10 or 100 calls; the same turn in LangChain v1 and the OpenAI Agents SDK
(bench/sessions.py's cases). Targets (issue 29 item 3): <= 150 µs a governed
turn, >= 25x LangChain and >= 15x the Agents SDK; N=100 within 1.3x of N=10.

Why ``AnswerModel``, not ``scripted()``: the peers run on their own fake
models, which answer from the request and keep nothing; ``scripted()`` keeps a
deep copy of every request as test evidence (G89), which no real provider
does. ``AnswerModel`` is measured the same way: it answers from the request,
keeps nothing, and its cost is reported (the "provider share").
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest

REPETITIONS = 9
TURN_WORK = 300  # tool calls per timed repetition, whatever the batch size
WARMUP_TURN_WORK = 200
PEER_TURN_WORK = 40  # a peer's turns per repetition (each costs milliseconds)
BATCH_SIZES = (1, 10, 100)
TARGET_US_PER_TURN = 150.0
TARGET_RATIO = 1.3
ANSWER = "Done."


@tool(inline=True)
def lookup(order: int) -> dict[str, int]:
    """Look an order up."""
    return {"order": order, "status": 1}


class AnswerModel:
    """The N tool calls for a fresh user message, else the final answer: a
    model stub that answers from the request and keeps nothing, as the peers'
    fake models do (a provider by the ``Provider`` protocol)."""

    provider_name = "bench"

    def __init__(self, n_calls: int) -> None:
        self.n_calls = n_calls

    async def call(self, request: ProviderRequest, on_token: Any = None) -> Reply:
        if request.messages[-1].role != "user":
            return Reply(content=ANSWER)
        return Reply(
            tool_calls=[
                ToolCallRequest(id=f"c{i}", name="lookup", args={"order": i})
                for i in range(self.n_calls)
            ]
        )


def governed_links() -> list[ToolMiddleware]:
    """Three pass-throughs at before-tool, one transform at after-tool."""
    passes = [
        ToolMiddleware(name=f"pass-{i}", on_tool_call=lambda call: allow())
        for i in range(3)
    ]
    stamp = ToolMiddleware(
        name="stamp",
        on_tool_result=lambda res: allow({**res.result, "checked": True}, "stamped"),
    )
    return [*passes, stamp]


class TimedProvider:
    """Delegates to a provider and adds up the time spent inside it."""

    provider_name = "bench"

    def __init__(self, inner: AnswerModel) -> None:
        self.inner = inner
        self.seconds = 0.0

    async def call(self, request: ProviderRequest, on_token: Any = None) -> Reply:
        started = time.perf_counter()
        try:
            return await self.inner.call(request, on_token)
        finally:
            self.seconds += time.perf_counter() - started


class Case:
    """One agent, its provider, and the samples taken of it."""

    def __init__(
        self, label: str, n_calls: int, *, governed: bool, timed: bool = False
    ):
        self.label = label
        self.n_calls = n_calls
        self.turns = max(1, TURN_WORK // n_calls)
        inner = AnswerModel(n_calls)
        self.model: AnswerModel | TimedProvider = (
            TimedProvider(inner) if timed else inner
        )
        builder = Agent.create(provider=self.model, model="bench").system("Look up.")
        builder = builder.tool(lookup)
        if governed:
            builder = builder.tool_middleware(*governed_links())
        self.agent = builder.build()
        self.samples: list[float] = []

    async def run(self, turns: int) -> float:
        """Seconds for ``turns`` fresh runs, each one turn."""
        agent = self.agent
        started = time.perf_counter()
        for _ in range(turns):
            out = await agent.run("Look my orders up.")
            if out != ANSWER:
                raise RuntimeError(f"{self.label}: unexpected answer {out!r}")
        return time.perf_counter() - started

    async def warm_up(self) -> None:
        await self.run(max(1, WARMUP_TURN_WORK // self.n_calls))

    async def sample(self) -> None:
        self.samples.append(await self.run(self.turns) / self.turns * 1e6)

    @property
    def us_per_turn(self) -> float:
        return statistics.median(self.samples)


class Peer:
    """The same turn in another framework (bench/sessions.py's cases, with
    no model latency): a fresh session per turn, on one long-lived agent."""

    def __init__(self, label: str, case: Any) -> None:
        self.label = label
        self.case = case
        self.turns = PEER_TURN_WORK
        self.samples: list[float] = []
        self._n = 0

    async def run(self, turns: int) -> float:
        started = time.perf_counter()
        for _ in range(turns):
            self._n += 1
            await self.case.turn(self.case.session(f"t{self._n}"), "Look up.")
        return time.perf_counter() - started

    async def warm_up(self) -> None:
        await self.run(PEER_TURN_WORK // 4)

    async def sample(self) -> None:
        self.samples.append(await self.run(self.turns) / self.turns * 1e6)

    @property
    def us_per_turn(self) -> float:
        return statistics.median(self.samples)


def peers() -> list[Peer]:
    """LangChain v1 and the OpenAI Agents SDK, where installed (issue 29
    item 3: the ratio on the same turn, in one run)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sessions

    found: list[Peer] = []
    for label, make in (
        ("langchain", sessions.langchain_case),
        ("openai_agents", sessions.openai_agents_case),
    ):
        try:
            found.append(Peer(label, make(0.0)))
        except ImportError:
            continue
    return found


async def measure() -> tuple[dict[str, Any], float]:
    """Every case, interleaved; returns the JSON result and the provider share."""
    governed = Case("governed", 1, governed=True)
    bare = Case("bare", 1, governed=False)
    batches = [Case(f"N={n}", n, governed=True) for n in BATCH_SIZES]
    probe = Case("provider share", 1, governed=True, timed=True)
    others = peers()
    cases: list[Case | Peer] = [governed, bare, *batches, probe, *others]
    for case in cases:
        await case.warm_up()
    assert isinstance(probe.model, TimedProvider)
    probe.model.seconds = 0.0
    for _ in range(REPETITIONS):
        for case in cases:
            gc.collect()
            await case.sample()
    provider_us = probe.model.seconds / (REPETITIONS * probe.turns) * 1e6
    per_call = {str(c.n_calls): c.us_per_turn / c.n_calls for c in batches}
    result = {
        "bench": "turns",
        "governed_us_per_turn": round(governed.us_per_turn, 1),
        "bare_us_per_turn": round(bare.us_per_turn, 1),
        "us_per_call": {n: round(us, 1) for n, us in per_call.items()},
        "ratio_100_vs_10": round(per_call["100"] / per_call["10"], 3),
        "governed_vs_bare": round(governed.us_per_turn / bare.us_per_turn, 3),
    }
    for peer in others:
        # How many governed helmlog turns in the time of one of the peer's.
        result[f"{peer.label}_us_per_turn"] = round(peer.us_per_turn, 1)
        result[f"governed_vs_{peer.label}"] = round(
            peer.us_per_turn / governed.us_per_turn, 2
        )
    return result, provider_us


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def summary(result: dict[str, Any], provider_us: float) -> str:
    gov = result["governed_us_per_turn"]
    bare = result["bare_us_per_turn"]
    ratio = result["ratio_100_vs_10"]
    lines = [
        f"helmlog governed loop: in-process, memory store, a model stub, "
        f"median of {REPETITIONS}",
        f"  governed one-tool turn  {gov:8.1f} us  ({1e6 / gov:,.0f} turns/s)  "
        f"target <= {TARGET_US_PER_TURN:.0f}: {verdict(gov <= TARGET_US_PER_TURN)}",
        f"  bare one-tool turn      {bare:8.1f} us  ({1e6 / bare:,.0f} turns/s)  "
        f"governed/bare {result['governed_vs_bare']}x",
        f"  of a turn, in the model stub (two calls) ~{provider_us:.0f} us",
    ]
    for n, us in result["us_per_call"].items():
        lines.append(f"  per call, N={n:<3}        {us:8.1f} us")
    lines.append(
        f"  N=100 vs N=10 per call  {ratio:8.3f}x  target <= {TARGET_RATIO}: "
        f"{verdict(ratio <= TARGET_RATIO)}"
    )
    for label, target in (("langchain", 25.0), ("openai_agents", 15.0)):
        if f"{label}_us_per_turn" in result:
            times = result[f"governed_vs_{label}"]
            lines.append(
                f"  {label:<14} turn {result[f'{label}_us_per_turn']:8.1f} us: "
                f"governed helmlog is {times}x  target >= {target:.0f}x: "
                f"{verdict(times >= target)}"
            )
    return "\n".join(lines)


def main() -> None:
    result, provider_us = asyncio.run(measure())
    print(summary(result, provider_us))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
