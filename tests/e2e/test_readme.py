"""The README's example runs as written (its first lines are a promise)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_python_example_runs(capsys: object) -> None:
    """The README's Python block runs and prints the answer it claims."""
    text = (ROOT / "README.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    namespace: dict[str, object] = {"__name__": "readme"}
    exec(compile(block, "README.md", "exec"), namespace)
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "Refunded.\n" == out


def test_readme_first_lines_are_the_two_commands() -> None:
    """The README opens with the demo command and the test command, under one
    line naming the system binaries they need and how to install them."""
    lines = (ROOT / "README.md").read_text().splitlines()
    block = lines.index("```sh")
    assert block <= 4, "the commands open the README"
    needs = lines[block - 2]
    for binary in ("uv", "redis-server", "chromium", "apt-get install", "brew install"):
        assert binary in needs
    commands = [ln.split("#")[0].strip() for ln in lines[block + 1 : block + 3]]
    assert ["uv sync && uv run helmlog demo", "uv sync && uv run pytest"] == commands
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "uv run pytest" in ci, ".ci/run runs the README's test command verbatim"
