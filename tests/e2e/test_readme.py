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


UV_INSTALLER = "curl -LsSf https://astral.sh/uv/install.sh | sh"


def test_readme_installs_uv_as_a_fresh_debian_and_macos_allow() -> None:
    """Issue 28 item 5: uv comes from its official installer (or pipx, or
    Homebrew), never ``pip install uv``, which Debian 12 refuses
    (externally-managed-environment); the README and .ci/run say the same."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for text in (readme, ci):
        assert "pip install uv" not in text
        assert "pip install --quiet uv" not in text
    lines = readme.splitlines()
    needs = lines[lines.index("```sh") - 2]
    assert UV_INSTALLER in needs
    assert "pipx install uv" in needs
    assert UV_INSTALLER in ci.splitlines()[ci.splitlines().index(
        'if ! command -v uv >/dev/null 2>&1; then'
    ) + 1]  # fmt: skip


def test_readme_names_each_binary_with_its_install_command() -> None:
    """Issue 28 item 5: ``redis-server``, ``chromium`` and ``npx`` are named
    with the packages that give them on Debian (apt-get) and macOS (brew),
    and curl (the uv installer's) is in the Debian line."""
    lines = (ROOT / "README.md").read_text().splitlines()
    needs = lines[lines.index("```sh") - 2]
    (apt,) = re.findall(r"`sudo apt-get install ([a-z0-9 -]+)`", needs)
    (brew,) = re.findall(r"`brew install ([a-z0-9 -]+)`", needs)
    assert {"curl", "redis-server", "chromium", "npm"} <= set(apt.split())
    assert {"uv", "redis", "chromium", "node"} <= set(brew.split())
    for binary in ("`redis-server`", "`chromium`", "`npx`", "Debian 12/13", "macOS"):
        assert binary in needs
    ci = (ROOT / ".ci" / "run").read_text()
    for package in ("redis-server", "chromium", "npm", "curl"):
        assert f"missing+=({package}" in ci or f" {package})" in ci


def test_the_guide_and_the_laws_list_nothing_built_as_not_built() -> None:
    """Issue 28 item 4: the HTTP API (``helmlog serve``) and the MCP proxy
    are built; neither docs/guide.md nor docs/laws.md calls them unbuilt."""
    unbuilt = re.compile(
        r"not (?:yet )?built|not built yet|unbuilt|not implemented", re.IGNORECASE
    )
    for name in ("guide.md", "laws.md"):
        text = (ROOT / "docs" / name).read_text()
        for paragraph in text.split("\n\n"):
            if unbuilt.search(paragraph):
                # Only the laws' preamble speaks of "not built", as a rule.
                assert paragraph.startswith("Under each law, **Code**"), paragraph
    laws = (ROOT / "docs" / "laws.md").read_text()
    assert "Built in `gateway/` (issue 10): `McpProxy`" in laws
    guide = (ROOT / "docs" / "guide.md").read_text()
    assert "## Serving over HTTP" in guide
