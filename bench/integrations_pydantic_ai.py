"""Benchmark what helmlog's governance adds per tool call inside Pydantic AI.

Pattern: a micro-benchmark in one process: the same Pydantic AI agent
         (``FunctionModel``, one tool) run bare, with a pass-through
         capability of the same hooks, and under ``HelmlogCapability``, all
         taking turns in every repetition; the median of timed repetitions.
Role:    bench; ``uv run python bench/integrations_pydantic_ai.py``; a
         summary and one JSON line (the lead merges the frameworks' lines).
Emits:   nothing of helmlog's; stdout only.

Measures: per tool call, Pydantic AI's own cost (the bare run over its calls,
the model requests included: a call needs a reply proposing it) and what
governance adds (the walks, the record on the memory store, the model
requests and replies recorded, the turn opened and finished), split into
Pydantic AI hosting a capability with these hooks at all (the pass-through)
and helmlog's work. Shapes: 1 and 10 calls per reply. Target: <= 10%,
the ratio paired within each repetition (``paired``).

Why CPU time (``process_time``): on a loaded machine wall time measures the
neighbours; everything runs on the event loop's thread, so it is the work.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import time
from typing import Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset

from helmlog import Agent, ToolMiddleware, allow
from helmlog.events import MemoryEventStore
from helmlog.integrations import Governance
from helmlog.integrations.pydantic_ai import HelmlogCapability
from helmlog.runtime.providers import framework_model

REPETITIONS = 11
CALL_WORK = 200  # tool calls per timed repetition, whatever the shape
WARMUP_CALL_WORK = 100
SHAPES = (1, 10)  # tool calls per model reply
TARGET = 0.10
ANSWER = "Done."


def responder(n_calls: int) -> Any:
    """N tool calls for a fresh prompt, else the final answer."""

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(
            isinstance(p, UserPromptPart) for p in last.parts
        ):
            return ModelResponse(
                parts=[
                    ToolCallPart("lookup", {"order": i}, tool_call_id=f"c{i}")
                    for i in range(n_calls)
                ]
            )
        return ModelResponse(parts=[TextPart(ANSWER)])

    return respond


def governed_links() -> list[ToolMiddleware]:
    """Three pass-throughs at before-tool, one transform at after-tool
    (``bench/turns.py``'s governed table)."""
    passes = [
        ToolMiddleware(name=f"pass-{i}", on_tool_call=lambda call: allow())
        for i in range(3)
    ]
    stamp = ToolMiddleware(
        name="stamp",
        on_tool_result=lambda res: allow({**res.result, "checked": True}, "stamped"),
    )
    return [*passes, stamp]


class PassThrough(AbstractCapability[Any]):
    """The hooks ``HelmlogCapability`` implements, doing nothing: what
    Pydantic AI itself spends on hosting such a capability."""

    async def for_run(self, ctx: Any) -> AbstractCapability[Any]:
        return PassThrough()

    def get_wrapper_toolset(
        self, toolset: AbstractToolset[Any]
    ) -> AbstractToolset[Any] | None:
        return WrapperToolset(toolset)

    async def before_node_run(self, ctx: Any, *, node: Any) -> Any:
        return node

    async def wrap_model_request(
        self, ctx: Any, *, request_context: Any, handler: Any
    ) -> Any:
        return await handler(request_context)

    async def after_output_process(
        self, ctx: Any, *, output_context: Any, output: Any
    ) -> Any:
        return output

    async def on_run_error(self, ctx: Any, *, error: BaseException) -> Any:
        raise error


class Case:
    """One Pydantic AI agent, bare or governed, and its samples."""

    def __init__(self, n_calls: int, kind: str) -> None:
        self.n_calls = n_calls
        self.kind = kind
        self.runs = max(1, CALL_WORK // n_calls)
        capabilities: list[Any] = []
        if kind == "pass-through":
            capabilities.append(PassThrough())
        elif kind == "governed":
            rules = (
                Agent.create(
                    provider=framework_model("pydantic-ai"),
                    model="function",
                    store=MemoryEventStore(),
                )
                .tool_middleware(*governed_links())
                .build()
            )
            capabilities.append(HelmlogCapability(Governance(rules)))
        self.agent: PydanticAgent[None, Any] = PydanticAgent(
            FunctionModel(responder(n_calls)),
            output_type=[str, DeferredToolRequests],
            capabilities=capabilities,
        )

        @self.agent.tool_plain
        async def lookup(order: int) -> dict[str, int]:
            """Look an order up."""
            return {"order": order, "status": 1}

        self.samples: list[float] = []

    async def run(self, runs: int) -> float:
        started = time.process_time()
        for _ in range(runs):
            result = await self.agent.run("Look my orders up.")
            if result.output != ANSWER:
                raise RuntimeError(f"unexpected answer {result.output!r}")
        return time.process_time() - started

    async def warm_up(self) -> None:
        await self.run(max(1, WARMUP_CALL_WORK // self.n_calls))

    async def sample(self) -> None:
        seconds = await self.run(self.runs)
        self.samples.append(seconds / (self.runs * self.n_calls) * 1e6)

    @property
    def us_per_call(self) -> float:
        return statistics.median(self.samples)


async def measure() -> dict[str, Any]:
    """Every case, interleaved; the JSON result."""
    triples = [
        tuple(Case(n, kind) for kind in ("bare", "pass-through", "governed"))
        for n in SHAPES
    ]
    cases = [c for triple in triples for c in triple]
    for case in cases:
        await case.warm_up()
    for rep in range(REPETITIONS):
        # Alternate the order, so a burst of load lands on every case alike.
        for case in cases if rep % 2 == 0 else cases[::-1]:
            gc.collect()
            await case.sample()

    def paired(case: Case, bare: Case) -> float:
        """Median over repetitions of this case's per-call cost over the bare
        one's taken beside it, less 1: steadier on a loaded machine than a
        ratio of two medians (a burst of load on one case alone moves that)."""
        return statistics.median(
            c / b - 1 for c, b in zip(case.samples, bare.samples, strict=True)
        )

    shapes: dict[str, Any] = {}
    for bare, hosted, governed in triples:
        added = governed.us_per_call - bare.us_per_call
        hosting = hosted.us_per_call - bare.us_per_call
        shapes[str(bare.n_calls)] = {
            "framework_us_per_call": round(bare.us_per_call, 1),
            "governed_us_per_call": round(governed.us_per_call, 1),
            "added_us_per_call": round(added, 1),
            # Paired within each repetition, then the median (``paired``).
            "ratio": round(paired(governed, bare), 3),
            "of_which_capability_hosting_us": round(hosting, 1),
            "of_which_helmlog_us": round(added - hosting, 1),
            "helmlog_ratio": round((added - hosting) / bare.us_per_call, 3),
            "hosting_ratio": round(paired(hosted, bare), 3),
        }
    return {
        "bench": "integrations_pydantic_ai",
        "framework": "pydantic-ai",
        "calls_per_reply": shapes,
        "target_ratio": TARGET,
        "clock": "process_time",
    }


def summary(result: dict[str, Any]) -> str:
    lines = [
        "helmlog inside Pydantic AI: FunctionModel, memory store, 3 allow + 1 "
        f"transform per call, CPU time, median of {REPETITIONS}",
    ]
    for n, s in result["calls_per_reply"].items():
        met = "met" if s["ratio"] <= TARGET else "MISSED"
        lines.append(
            f"  {n:>2} call(s)/reply: framework "
            f"{s['framework_us_per_call']:8.1f} us/call, governed "
            f"{s['governed_us_per_call']:8.1f}, adds {s['added_us_per_call']:7.1f} "
            f"us ({s['ratio']:.1%}); target <= {TARGET:.0%}: {met}"
        )
        lines.append(
            f"     of which Pydantic AI hosting a capability "
            f"{s['of_which_capability_hosting_us']:7.1f} us, helmlog "
            f"{s['of_which_helmlog_us']:7.1f} us ({s['helmlog_ratio']:.1%})"
        )
    return "\n".join(lines)


def main() -> None:
    result = asyncio.run(measure())
    print(summary(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
