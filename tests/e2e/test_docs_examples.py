"""The user guide's examples run as written, and the law ids can be looked up.

Pattern: the README test's approach (``tests/e2e/test_readme.py``) applied
         to every ```python block of docs/guide.md: each block is executed in
         a fresh namespace and its stdout compared with the ```text block that
         follows it, when one does. Each ``helmlog ...`` line of a ```sh
         block must name a real command and options of that command.
Role:    e2e tests of the docs; they keep the guide honest as the code moves.
Emits:   nothing.

Laws: none of their own; the docs cite them all, and
``test_every_cited_law_id_has_an_entry`` checks that each id the code, tests
and docs cite has an anchor in docs/laws.md.

Why a block that names ``redis://localhost:6379/0`` runs on the fixture's
server: the guide shows the URL a reader types; the test swaps in the real
redis-server the fixtures started, so the example runs against Redis rather
than being skipped. A block that imports ``helmlog.actors`` also gets the
session's shared local Ray.

Why an example's output is the ```text block right after it: the guide says
what a reader will see, so a change of behaviour shows up as a failing docs
test, not as a guide that quietly lies.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide.md"
LAWS = ROOT / "docs" / "laws.md"
DOCS_REDIS_URL = "redis://localhost:6379/0"
# A ```python block, then optionally (only blank lines and one line of prose
# between) the ```text block holding what it prints.
BLOCK = re.compile(
    r"```python\n(?P<code>.*?)```\n(?:\n[^`\n]*\n\n```text\n(?P<out>.*?)```)?",
    re.S,
)
LAW_ID = re.compile(r"\b[GSPR][0-9]+\b")
CITING = ("events", "runtime", "sinks", "actors", "gateway", "helmlog", "tests")


def _blocks() -> list[tuple[str, str | None]]:
    text = GUIDE.read_text()
    return [(m["code"], m["out"]) for m in BLOCK.finditer(text)]


def _params() -> list[object]:
    params: list[object] = []
    for index, (code, out) in enumerate(_blocks(), start=1):
        marks = []
        if DOCS_REDIS_URL in code:
            marks.append(pytest.mark.redis)
        if "helmlog.actors" in code:
            marks += [pytest.mark.slow, pytest.mark.timeout(300)]
        params.append(pytest.param(code, out, id=f"block-{index}", marks=marks))
    return params


@pytest.mark.parametrize(("code", "expected"), _params())
def test_guide_python_block_runs_and_prints_what_the_guide_shows(
    code: str,
    expected: str | None,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each ```python block of the guide runs; its output is the text shown after it."""
    if DOCS_REDIS_URL in code:
        code = code.replace(DOCS_REDIS_URL, request.getfixturevalue("redis_url"))
    if "helmlog.actors" in code:
        request.getfixturevalue("ray_local")
    name = f"guide_{request.node.callspec.id.replace('-', '_')}"
    namespace: dict[str, object] = {"__name__": name}
    exec(compile(code, f"docs/guide.md ({name})", "exec"), namespace)
    if expected is not None:
        assert expected == capsys.readouterr().out


def test_guide_has_python_examples_with_their_output() -> None:
    """The block pattern finds the guide's examples and most show their output."""
    blocks = _blocks()
    shown = [out for _, out in blocks if out is not None]
    assert len(blocks) >= 8
    assert len(blocks) - 1 == len(shown)  # desk.py defines; it prints nothing


def _cited() -> set[str]:
    ids: set[str] = set()
    paths = [p for d in CITING for p in (ROOT / d).rglob("*.py")]
    paths += [*(ROOT / "docs").glob("*.md"), *(ROOT / "bench").rglob("*")]
    paths.append(ROOT / "README.md")
    for path in paths:
        if path.is_file() and path.suffix in (".py", ".md"):
            ids.update(LAW_ID.findall(path.read_text()))
    return ids


def test_every_cited_law_id_has_an_entry() -> None:
    """An id cited in the code, tests or docs has an anchor in docs/laws.md."""
    anchors = set(re.findall(r'<a id="([gspr][0-9]+)"></a>', LAWS.read_text()))
    missing = sorted(i for i in _cited() if i.lower() not in anchors)
    assert [] == missing


def test_every_law_of_each_section_has_an_entry() -> None:
    """laws.md holds G1–G95, S1–S10, P1–P27 and R1–R28, each once, in order."""
    anchors = re.findall(r'<a id="([gspr][0-9]+)"></a>', LAWS.read_text())
    sections = {"g": 95, "s": 10, "p": 27, "r": 28}
    expected = [f"{s}{n}" for s, count in sections.items() for n in range(1, count + 1)]
    assert expected == anchors


def test_readme_and_design_link_the_guide_and_the_laws() -> None:
    """README.md and docs/design.md point a newcomer at both documents."""
    readme = (ROOT / "README.md").read_text()
    design = (ROOT / "docs" / "design.md").read_text()
    opening = design.split("\n## ", 1)[0]
    for link in ("docs/guide.md", "docs/laws.md"):
        assert link in readme
    for link in ("guide.md", "laws.md"):
        assert link in opening


def _shell_commands() -> list[list[str]]:
    text = GUIDE.read_text()
    commands: list[list[str]] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("helmlog "):
                commands.append(shlex.split(line))
    return commands


def test_guide_shell_commands_use_real_commands_and_options() -> None:
    """Every ``helmlog`` line the guide shows names a real command and its options."""
    from typer.testing import CliRunner

    from helmlog.cli import app

    commands = _shell_commands()
    assert len(commands) >= 10
    runner = CliRunner()
    for words in commands:
        result = runner.invoke(app, [words[1], "--help"], terminal_width=200)
        assert 0 == result.exit_code, words
        options = [w.split("=")[0] for w in words if w.startswith("--")]
        assert [] == [o for o in options if o not in result.output], words
