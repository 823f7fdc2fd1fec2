"""Benchmark what helmlog's LangChain middleware adds per governed tool call.

Pattern: a micro-benchmark in one process: the same ``create_agent`` run with
         and without ``governance(rules)``, same fake model and tools, the two
         taking turns in every repetition; the median of timed repetitions.
Role:    bench; ``uv run python bench/integrations_langchain.py``; a summary
         and one JSON line (the lead merges the three frameworks' lines).
Emits:   nothing of helmlog's; stdout only.

Measures: per tool call, LangChain's own cost and what the middleware adds
(3 ``allow()`` before-tool, 1 transform after-tool, rows recorded on the
memory store): a run whose reply proposes N calls minus a run that answers
at once, over N. Target: added <= 10% of LangChain's. Per run (input,
window, output, the reply recorded) is reported beside it.

Why the difference of two runs: the issue asks a tool call's cost; the
per-run moments would otherwise be spread over however many calls we chose.
CPU time (beside the wall clock) counts the work, not the waits for a core;
its ratios are paired within each repetition (``paired``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.runtime import Runtime

from helmlog import Agent, ToolMiddleware, allow
from helmlog.events import MemoryEventStore
from helmlog.integrations.langchain import SESSION_KEY, HelmlogState, governance
from helmlog.runtime.providers import framework_model

REPETITIONS = 15
RUNS = 20  # agent runs per timed repetition
WARMUP_RUNS = 10
CALLS = 10  # tool calls the model proposes in its one tool turn
TARGET_RATIO = 0.10
ANSWER = "Done."


@tool
def lookup(order: int) -> dict[str, int]:
    """Look an order up."""
    return {"order": order, "status": 1}


class CyclingChat(FakeMessagesListChatModel):
    """LangChain's list-of-replies fake model (it cycles through its replies),
    with the no-op tool binding ``create_agent`` needs."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> CyclingChat:
        return self


def model(n_calls: int) -> CyclingChat:
    """N calls then the answer, or (N=0) the answer at once, on every run."""
    answer = AIMessage(content=ANSWER)
    if n_calls == 0:
        return CyclingChat(responses=[answer])
    calls = AIMessage(
        content="",
        tool_calls=[
            {"name": "lookup", "args": {"order": i}, "id": f"c{i}"}
            for i in range(n_calls)
        ],
    )
    return CyclingChat(responses=[calls, answer])


def governed_links() -> list[ToolMiddleware]:
    """Three pass-throughs at before-tool, one transform at after-tool."""
    passes = [
        ToolMiddleware(name=f"pass-{i}", on_tool_call=lambda call: allow())
        for i in range(3)
    ]
    stamp = ToolMiddleware(
        name="stamp",
        on_tool_result=lambda res: allow(f"{res.result} (checked)", "stamped"),
    )
    return [*passes, stamp]


class Passing(AgentMiddleware[HelmlogState, Any, Any]):
    """A middleware with the hooks and state key helmlog's has, in the same
    form (wrap hooks that return their handler's coroutine, as
    ``HelmlogMiddleware``'s do), doing nothing: what LangChain's own
    middleware plumbing costs (reported apart)."""

    state_schema = HelmlogState

    async def abefore_agent(
        self, state: HelmlogState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return {SESSION_KEY: "s"}

    def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)


class Case:
    """One LangChain agent and the samples taken of it."""

    def __init__(
        self, label: str, n_calls: int, *, governed: bool, passing: bool = False
    ) -> None:
        self.label = label
        self.n_calls = n_calls
        self.n_messages = n_calls + 3 if n_calls else 2
        middleware: list[AgentMiddleware[Any, Any, Any]] = []
        if passing:
            middleware.append(Passing())
        if governed:
            rules = (
                Agent.create(
                    provider=framework_model("langchain"),
                    model="fake",
                    store=MemoryEventStore(),
                )
                .act(before_tool=governed_links()[:3], after_tool=governed_links()[3:])
                .build()
            )
            middleware.append(governance(rules))
        self.agent = create_agent(model(n_calls), [lookup], middleware=middleware)
        self.samples: list[float] = []
        self.cpu_samples: list[float] = []

    async def run(self, runs: int) -> tuple[float, float]:
        """Wall and CPU seconds for ``runs`` fresh agent runs (one tool turn,
        one answer); CPU is the process's, its tool threads included."""
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(runs):
            out = await self.agent.ainvoke({"messages": [HumanMessage("Look up.")]})
            last: BaseMessage = out["messages"][-1]
            if last.content != ANSWER or len(out["messages"]) != self.n_messages:
                raise RuntimeError(f"{self.label}: unexpected run {out['messages']}")
        return time.perf_counter() - started, time.process_time() - cpu

    async def sample(self) -> None:
        wall, cpu = await self.run(RUNS)
        self.samples.append(wall / RUNS * 1e6)
        self.cpu_samples.append(cpu / RUNS * 1e6)

    @property
    def us_per_run(self) -> float:
        return statistics.median(self.samples)

    @property
    def cpu_us_per_run(self) -> float:
        return statistics.median(self.cpu_samples)


async def measure() -> dict[str, Any]:
    """The four runs, interleaved in every repetition; per call and per run."""
    bare = Case("langchain", CALLS, governed=False)
    governed = Case("langchain+helmlog", CALLS, governed=True)
    bare0 = Case("langchain, no call", 0, governed=False)
    governed0 = Case("langchain+helmlog, no call", 0, governed=True)
    passing = Case("langchain+passing", CALLS, governed=False, passing=True)
    passing0 = Case("langchain+passing, no call", 0, governed=False, passing=True)
    cases = [bare, governed, passing, bare0, governed0, passing0]
    for case in cases:
        await case.run(WARMUP_RUNS)  # warm caches; not sampled
    for rep in range(REPETITIONS):
        # Alternate the order, so a burst of load lands on every case alike.
        for case in cases if rep % 2 == 0 else cases[::-1]:
            gc.collect()
            await case.sample()

    def paired(with_n: Case, without: Case, base_n: Case, base_0: Case) -> float:
        """Median over repetitions of (per call, this case) / (per call, bare)
        - 1, each per-call figure a difference within one repetition (all six
        cases ran back to back in it, in alternating order): a ratio of four
        separate medians let a burst of load on one case alone move it (the
        pass-through's per-call figure came out negative)."""
        return statistics.median(
            (g - g0) / (b - b0) - 1
            for g, g0, b, b0 in zip(
                with_n.cpu_samples,
                without.cpu_samples,
                base_n.cpu_samples,
                base_0.cpu_samples,
                strict=True,
            )
        )

    framework_per_call = (bare.us_per_run - bare0.us_per_run) / CALLS
    governed_per_call = (governed.us_per_run - governed0.us_per_run) / CALLS
    added_per_call = governed_per_call - framework_per_call
    plumbing_per_call = (passing.us_per_run - passing0.us_per_run) / CALLS
    cpu_framework = (bare.cpu_us_per_run - bare0.cpu_us_per_run) / CALLS
    cpu_governed = (governed.cpu_us_per_run - governed0.cpu_us_per_run) / CALLS
    cpu_passing = (passing.cpu_us_per_run - passing0.cpu_us_per_run) / CALLS
    return {
        "bench": "integrations_langchain",
        "framework": "langchain",
        "calls_per_run": CALLS,
        "framework_us_per_call": round(framework_per_call, 1),
        "added_us_per_call": round(added_per_call, 1),
        "added_ratio": round(added_per_call / framework_per_call, 3),
        "target_ratio": TARGET_RATIO,
        "plumbing_us_per_call": round(plumbing_per_call - framework_per_call, 1),
        # What helmlog's own work adds, beside LangChain's middleware plumbing.
        "own_ratio": round(
            (governed_per_call - plumbing_per_call) / framework_per_call, 3
        ),
        # The same from the process's CPU time: on a shared machine, what the
        # work costs rather than how long it waited for a core.
        "cpu_framework_us_per_call": round(cpu_framework, 1),
        "cpu_added_us_per_call": round(cpu_governed - cpu_framework, 1),
        # Paired within each repetition, then the median (see the docstring).
        "cpu_added_ratio": round(paired(governed, governed0, bare, bare0), 3),
        "cpu_plumbing_us_per_call": round(cpu_passing - cpu_framework, 1),
        "cpu_plumbing_ratio": round(paired(passing, passing0, bare, bare0), 3),
        "repetitions": REPETITIONS,
        "framework_us_per_run_no_call": round(bare0.us_per_run, 1),
        "added_us_per_run": round(governed0.us_per_run - bare0.us_per_run, 1),
        "plumbing_us_per_run": round(passing0.us_per_run - bare0.us_per_run, 1),
        "framework_us_per_run": round(bare.us_per_run, 1),
        "governed_us_per_run": round(governed.us_per_run, 1),
    }


def summary(result: dict[str, Any]) -> str:
    ratio = result["added_ratio"]
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    return "\n".join(
        [
            f"helmlog in LangChain create_agent: fake chat model, {CALLS} tool calls "
            f"per run, memory store, median of {REPETITIONS}",
            f"  LangChain per tool call  {result['framework_us_per_call']:9.1f} us",
            f"  helmlog adds per call    {result['added_us_per_call']:9.1f} us  "
            f"= {ratio:.1%}; target <= {TARGET_RATIO:.0%}: {verdict}",
            f"    of which LangChain's middleware plumbing "
            f"{result['plumbing_us_per_call']:.1f} us (a pass-through middleware);"
            f" helmlog's own work {result['own_ratio']:.1%}",
            f"  CPU time: LangChain {result['cpu_framework_us_per_call']:.1f} us per "
            f"call, helmlog adds {result['cpu_added_us_per_call']:.1f} us = "
            f"{result['cpu_added_ratio']:.1%} (plumbing "
            f"{result['cpu_plumbing_us_per_call']:.1f} us = "
            f"{result['cpu_plumbing_ratio']:.1%}: LangChain traces every wrap_* "
            "hook with langsmith's traceable)",
            f"  LangChain per run        {result['framework_us_per_run_no_call']:9.1f}"
            f" us (answer at once); helmlog adds {result['added_us_per_run']:.1f} us"
            f" (plumbing {result['plumbing_us_per_run']:.1f})",
            f"  runs of {CALLS} calls          {result['framework_us_per_run']:9.1f} us"
            f" bare, {result['governed_us_per_run']:.1f} us governed",
        ]
    )


def main() -> None:
    result = asyncio.run(measure())
    print(summary(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
