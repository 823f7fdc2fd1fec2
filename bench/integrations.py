"""Benchmark what helmlog adds per governed tool call in each framework, in one run.

Pattern: a driver: each framework's bench (``integrations_langchain.py``,
         ``integrations_openai_agents.py``, ``integrations_pydantic_ai.py``)
         runs in its own process, one after the other, and its last line (one
         JSON object) is gathered; one JSON line sums them up.
Role:    bench; ``uv run python bench/integrations.py`` (``--only NAME`` to
         run one); the frameworks' own summaries pass through to stdout.
Emits:   nothing of helmlog's; stdout only.

Measures: per framework, the added cost per governed tool call over that
framework's own cost per call (CPU time), against issue 27's target (<= 10%).
Why a process each: three frameworks imported into one interpreter would
share its heap and its collector, and each bench's warm-up would pay for the
others' garbage; apart, each measures only itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TARGET = 0.10
BENCHES = {
    "langchain": "integrations_langchain.py",
    "openai-agents": "integrations_openai_agents.py",
    "pydantic-ai": "integrations_pydantic_ai.py",
}


def added_ratio(name: str, line: dict[str, Any]) -> float:
    """Each bench's own CPU-time ratio of added to the framework's cost."""
    if name == "langchain":
        return float(line["cpu_added_ratio"])
    if name == "openai-agents":
        return float(line["added_ratio"])
    return float(line["calls_per_reply"]["1"]["ratio"])


def run(name: str) -> dict[str, Any]:
    """Run one framework's bench; its last stdout line, parsed."""
    done = subprocess.run(
        [sys.executable, str(HERE / BENCHES[name])],
        capture_output=True,
        text=True,
        check=True,
    )
    sys.stdout.write(done.stdout)
    last = done.stdout.strip().splitlines()[-1]
    parsed: dict[str, Any] = json.loads(last)
    return parsed


def main(argv: list[str]) -> None:
    names = list(BENCHES)
    if "--only" in argv:
        names = [argv[argv.index("--only") + 1]]
    lines = {name: run(name) for name in names}
    ratios = {name: round(added_ratio(name, line), 3) for name, line in lines.items()}
    print(
        json.dumps(
            {
                "bench": "integrations",
                "added_cpu_ratio": ratios,
                "target_ratio": TARGET,
                "met": {name: r <= TARGET for name, r in ratios.items()},
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
