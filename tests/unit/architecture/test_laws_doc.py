"""docs/laws.md, checked against the code: every law names where it is enforced.

Role:    architecture test over docs/laws.md and the source tree.

Laws: every law (G, S, P, R, H) has an entry whose ``Code:`` line names the
modules that enforce it, each of which exists; every id the code, tests and
docs cite has an entry (tests/e2e/test_docs_examples.py holds the G/S/P/R
ids in order; this file adds the H ids and the module paths).

Why paths are checked: files move (issue 25 reshaped the house); a law whose
``Code:`` line names a module that is gone sends a reader nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LAWS = ROOT / "docs" / "laws.md"
ANCHOR = re.compile(r'<a id="([a-z]+[0-9]+)"></a>')
CODE = re.compile(r"^Code: (.*?)(?:\n\n|\n<a id|\Z)", re.M | re.S)
PATH = re.compile(
    r"`((?:events|runtime|sinks|actors|gateway|helmlog|integrations)/[\w/]+(?:\.py|/))`"
)
CITING = (
    "events",
    "runtime",
    "sinks",
    "actors",
    "gateway",
    "integrations",
    "helmlog",
    "tests",
)


def _entries() -> dict[str, str]:
    parts = ANCHOR.split(LAWS.read_text())
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_law_names_the_code_that_enforces_it() -> None:
    """Each entry has a ``Code:`` line naming at least one module."""
    missing = [
        law
        for law, body in _entries().items()
        if not (m := CODE.search(body)) or not PATH.search(m.group(1))
    ]
    assert [] == missing


def test_every_module_a_law_names_exists() -> None:
    """A path in a ``Code:`` line is a file or folder of the tree."""
    gone = sorted(
        f"{law}: {path}"
        for law, body in _entries().items()
        if (m := CODE.search(body))
        for path in PATH.findall(m.group(1))
        if not (ROOT / path).exists()
    )
    assert [] == gone


def test_every_cited_h_law_has_an_entry() -> None:
    """An H id (the edges: HTTP service, login, the proxy's edge) cited in the
    code, tests or docs has an entry."""
    cited: set[str] = set()
    for d in CITING:
        for path in (ROOT / d).rglob("*.py"):
            cited.update(re.findall(r"\bH[0-9]+\b", path.read_text()))
    for path in (ROOT / "docs").glob("*.md"):
        cited.update(re.findall(r"\bH[0-9]+\b", path.read_text()))
    entries = set(_entries())
    assert [] == sorted(i for i in cited if i.lower() not in entries)
