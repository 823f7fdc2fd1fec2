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
memory store, a new helmlog session per run); beside them, the SDK hosting
the same hooks doing nothing (``hosting_ratio``: the SDK's own share).
Target: (b) - (a) <= 10% of (a), in CPU time (``added_ratio``: the median
over repetitions of the governed block's time over the bare block's beside
it, less 1; wall clock beside it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import statistics
import sys
import time
from importlib.metadata import version
from typing import Any

from agents import Agent as SdkAgent
from agents import (
    AgentHooks,
    FunctionTool,
    GuardrailFunctionOutput,
    InputGuardrail,
    OutputGuardrail,
    RunConfig,
    Runner,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    function_tool,
    set_tracing_disabled,
)
from agents.run_config import ModelInputData, ToolExecutionConfig
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


# -- the pass-through: the SDK hosting the hooks governance uses, doing nothing


async def _allow_message(
    context: Any, agent: Any, value: Any
) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


async def _allow_tool(data: Any) -> ToolGuardrailFunctionOutput:
    return ToolGuardrailFunctionOutput.allow()


async def _no_approval(context: Any, params: Any, call_id: str) -> bool:
    return False


async def _same_input(data: Any) -> ModelInputData:
    return ModelInputData(
        input=list(data.model_data.input), instructions=data.model_data.instructions
    )


class _NoHooks(AgentHooks[Any]):
    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        return None


def _passing_tool(ft: FunctionTool) -> FunctionTool:
    inner = ft.on_invoke_tool

    async def invoke(context: Any, arguments: str) -> Any:
        return await inner(context, arguments)

    return dataclasses.replace(
        ft,
        on_invoke_tool=invoke,
        needs_approval=_no_approval,
        tool_input_guardrails=[
            ToolInputGuardrail[Any](guardrail_function=_allow_tool, name="pass")
        ],
    )


def _passing(model: ScriptedModel) -> tuple[SdkAgent[Any], RunConfig]:
    """The hooks ``AgentsGovernance`` sets (a blocking input guardrail, an output
    guardrail, ``on_llm_end``, the model-input filter, ``needs_approval``, a
    tool input guardrail, the tool's call wrapped, calls one at a time), each
    doing nothing: what the SDK itself spends on hosting them."""
    agent = SdkAgent(
        name="passing",
        tools=[_passing_tool(lookup_order)],
        model=model,
        input_guardrails=[
            InputGuardrail[Any](
                guardrail_function=_allow_message, name="pass", run_in_parallel=False
            )
        ],
        output_guardrails=[
            OutputGuardrail[Any](guardrail_function=_allow_message, name="pass")
        ],
        hooks=_NoHooks(),
    )
    config = RunConfig(
        call_model_input_filter=_same_input,
        tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1),
    )
    return agent, config


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

    pass_model = ScriptedModel()
    pass_agent, pass_config = _passing(pass_model)

    async def bare() -> None:
        await _bare(bare_model, bare_agent)

    async def passing() -> None:
        pass_model.extend(_script())
        await Runner.run(
            pass_agent,
            "look up the orders",
            max_turns=CALLS + 2,
            run_config=pass_config,
        )

    async def governed() -> None:
        await _governed(helm, gov_model, gov_agent)

    for _ in range(2 if quick else WARMUP_RUNS):
        await bare()
        await passing()
        await governed()
    timed: dict[str, list[tuple[float, float]]] = {
        "bare": [],
        "passing": [],
        "governed": [],
    }
    for rep in range(repetitions):
        # Alternate the order, so a burst of load lands on every case alike.
        order = (("bare", bare), ("passing", passing), ("governed", governed))
        for name, run in order if rep % 2 == 0 else order[::-1]:
            timed[name].append(await _timed(run, per_rep))

    def med(name: str, at: int) -> float:
        return statistics.median(t[at] for t in timed[name])

    def paired(at: int, case: str = "governed") -> float:
        # Each repetition's blocks ran back to back: the median of their
        # ratios is steadier than a ratio of medians on a loaded machine.
        pairs = zip(timed["bare"], timed[case], strict=True)
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
        # The SDK hosting the same hooks doing nothing (``_passing``): its own
        # cost of the guardrails, filter, approval check and wrapped call.
        "hosting_cpu_us_per_call": round(med("passing", 0) - cpu_bare, 1),
        "hosting_ratio": round(paired(0, "passing"), 4),
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
        f"wall {out['added_wall_ratio']:.1%}; target <= {TARGET_RATIO:.0%}); "
        f"of which the SDK hosting the hooks {out['hosting_cpu_us_per_call']:.0f}"
        f" µs ({out['hosting_ratio']:.1%})"
    )
    print(json.dumps(out))
