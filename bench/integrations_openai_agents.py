"""Benchmark what helmlog's governance adds per tool call in the OpenAI Agents SDK.

Pattern: a micro-benchmark in one process: warm up, then the median of timed
         repetitions; the bare SDK and the governed SDK take turns in every
         repetition, on the same scripted test model and tool.
Role:    bench; ``uv run python bench/integrations_openai_agents.py``
         (``--quick`` for a smoke run); a summary and one JSON line.
Emits:   nothing of helmlog's; stdout only.

Measures: µs per tool call of one ``Runner.run`` whose model (the SDK's
``agents.testing.ScriptedModel``) proposes CALLS calls one reply at a time,
then answers: (a) the plain agent; (b) the agent governed by
``AgentsGovernance`` (3 ``allow()`` before-tool, 1 transform after-tool, a
memory store, a new helmlog session per run). Target: (b) - (a) <= 10% of (a),
in CPU time (``added_ratio``: the median over repetitions of the governed
block's time over the bare block's beside it, less 1; wall clock beside it).
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import time
from importlib.metadata import version
from typing import Any

from agents import Agent as SdkAgent
from agents import Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from helmlog import Agent, Tool, ToolMiddleware, allow
from helmlog.events import MemoryEventStore
from helmlog.integrations.openai_agents import AgentsGovernance
from helmlog.runtime.providers import framework_model

CALLS = 10  # tool calls per run, one per model reply
REPETITIONS = 15
RUNS_PER_REPETITION = 6
WARMUP_RUNS = 10
TARGET_RATIO = 0.10


@function_tool
def lookup_order(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}: $80.00 paid with card 4111 1111 1111 1111"


def _script() -> list[list[Any]]:
    steps: list[list[Any]] = [
        [function_call("lookup_order", {"order_id": str(i)}, call_id=f"c{i}")]
        for i in range(CALLS)
    ]
    steps.append([assistant_message("Looked them up.")])
    return steps


def _governance() -> AgentsGovernance:
    passes = [
        ToolMiddleware(name=f"pass-{i}", on_tool_call=lambda call: allow())
        for i in range(3)
    ]
    mask = ToolMiddleware(
        name="card-redaction",
        on_tool_result=lambda r: allow(
            str(r.result).replace("4111 1111 1111 1111", "[card]"), "masked a card"
        ),
    )
    rules = (
        Agent.create(
            provider=framework_model("openai-agents"),
            model="bench",
            store=MemoryEventStore(),
        )
        .tool(Tool.from_openai_agents(lookup_order))
        .act(before_tool=passes, after_tool=[mask])
        .build()
    )
    return AgentsGovernance(rules)


async def _bare(model: ScriptedModel, agent: SdkAgent[Any]) -> None:
    model.extend(_script())
    await Runner.run(agent, "look up the orders", max_turns=CALLS + 2)


async def _governed(
    helm: AgentsGovernance, model: ScriptedModel, agent: SdkAgent[Any]
) -> None:
    model.extend(_script())
    await helm.session().run(agent, "look up the orders", max_turns=CALLS + 2)


async def _timed(run: Any, n: int) -> tuple[float, float]:
    """µs per tool call over ``n`` runs: CPU (every thread of the process:
    the SDK runs a sync tool in a worker thread) and wall clock."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        await run()
    calls = n * CALLS
    return (
        (time.process_time() - cpu) / calls * 1e6,
        (time.perf_counter() - wall) / calls * 1e6,
    )


async def main(quick: bool) -> dict[str, Any]:
    set_tracing_disabled(True)
    repetitions = 3 if quick else REPETITIONS
    per_rep = 3 if quick else RUNS_PER_REPETITION
    bare_model = ScriptedModel()
    bare_agent = SdkAgent(name="bare", tools=[lookup_order], model=bare_model)
    helm = _governance()
    gov_model = ScriptedModel()
    gov_agent = helm.govern(
        SdkAgent(name="governed", tools=[lookup_order], model=gov_model)
    )

    async def bare() -> None:
        await _bare(bare_model, bare_agent)

    async def governed() -> None:
        await _governed(helm, gov_model, gov_agent)

    for _ in range(2 if quick else WARMUP_RUNS):
        await bare()
        await governed()
    timed: dict[str, list[tuple[float, float]]] = {"bare": [], "governed": []}
    for rep in range(repetitions):
        # Alternate which goes first, so a burst of load lands on both alike.
        order = (("bare", bare), ("governed", governed))
        for name, run in order if rep % 2 == 0 else order[::-1]:
            timed[name].append(await _timed(run, per_rep))

    def med(name: str, at: int) -> float:
        return statistics.median(t[at] for t in timed[name])

    def paired(at: int) -> float:
        # Each repetition's two blocks ran back to back: the median of their
        # ratios is steadier than a ratio of medians on a loaded machine.
        pairs = zip(timed["bare"], timed["governed"], strict=True)
        return statistics.median(g[at] / b[at] - 1 for b, g in pairs)

    cpu_bare, cpu_gov = med("bare", 0), med("governed", 0)
    wall_bare, wall_gov = med("bare", 1), med("governed", 1)
    return {
        "bench": "integrations_openai_agents",
        "framework": "openai-agents",
        "framework_version": version("openai-agents"),
        "calls_per_run": CALLS,
        "bare_cpu_us_per_call": round(cpu_bare, 1),
        "governed_cpu_us_per_call": round(cpu_gov, 1),
        "added_cpu_us_per_call": round(cpu_gov - cpu_bare, 1),
        "added_ratio": round(paired(0), 4),
        "bare_wall_us_per_call": round(wall_bare, 1),
        "governed_wall_us_per_call": round(wall_gov, 1),
        "added_wall_ratio": round(paired(1), 4),
        "target_ratio": TARGET_RATIO,
        "repetitions": repetitions,
    }


if __name__ == "__main__":
    out = asyncio.run(main("--quick" in sys.argv[1:]))
    print(
        f"OpenAI Agents SDK {out['framework_version']}, per tool call: the SDK "
        f"{out['bare_cpu_us_per_call']:.0f} µs CPU "
        f"({out['bare_wall_us_per_call']:.0f} µs wall), governed "
        f"{out['governed_cpu_us_per_call']:.0f} µs CPU "
        f"({out['governed_wall_us_per_call']:.0f} µs wall): helmlog adds "
        f"{out['added_cpu_us_per_call']:.0f} µs CPU ({out['added_ratio']:.1%}; "
        f"wall {out['added_wall_ratio']:.1%}; target <= {TARGET_RATIO:.0%})"
    )
    print(json.dumps(out))
