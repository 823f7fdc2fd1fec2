"""The PII scrub: rewrite personal data out of the text a run carries.

Pattern: a link over a pluggable detector (text to ``PiiMatch`` spans);
         ``regex_detector`` builds one, ``default_detector`` is the default.
Role:    the face, behind ``helmlog.rules``; public ``helmlog.runtime`` only.
Emits:   nothing itself; each rewrite is a row and a fact.

Laws: G2 (each rewrite counts what it scrubbed, never a value), G5, G7 (a
detector that raises or returns a span outside the text is a denial), G49.

Why arguments are off by default: a tool that must send an e-mail needs the
address; scrubbing what the model reads protects the record.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from helmlog.runtime import (
    Allow,
    MessageContext,
    ToolCallContext,
    ToolResultContext,
    allow,
)


@dataclasses.dataclass(frozen=True, slots=True)
class PiiMatch:
    """One piece of personal data a detector found: its kind and its span."""

    kind: str
    start: int
    end: int


Detector = Callable[[str], Iterable[PiiMatch]]
"""A function from text to the personal data in it (any order; overlaps allowed)."""

PII_PATTERNS: Mapping[str, str] = {
    "email": r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+",
    "card": r"(?<![\d-])(?<!\d )(?:\d[ -]?){12,18}\d(?![ -]?\d)",
    "ssn": r"(?<!\d)\d{3}-\d{2}-\d{4}(?!\d)",
    "phone": r"(?<![\w+])(?<!\d[ .()-])\+?(?:\d[ .()-]?){9,14}\d(?![ .()-]?\d)",
    "ipv4": r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}"
    r"(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\d.])",
}
"""The default detector's patterns, by kind, in priority order (first wins)."""


def luhn_valid(text: str) -> bool:
    """Whether the digits of ``text`` pass the Luhn check (card numbers do)."""
    digits = [int(c) for c in text if c.isdigit()]
    if len(digits) < 13:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def regex_detector(
    patterns: Mapping[str, str | re.Pattern[str]],
    *,
    checks: Mapping[str, Callable[[str], bool]] | None = None,
) -> Detector:
    """A detector from ``{kind: pattern}``; ``checks`` confirm a kind's matches.

    Example: ``regex_detector({"order-ref": r"ORD-\\d{6}"})``.
    """
    compiled = [
        (kind, p if isinstance(p, re.Pattern) else re.compile(p))
        for kind, p in patterns.items()
    ]
    confirm = dict(checks or {})

    def detect(text: str) -> list[PiiMatch]:
        found: list[PiiMatch] = []
        for kind, pattern in compiled:
            check = confirm.get(kind)
            for m in pattern.finditer(text):
                if m.end() > m.start() and (check is None or check(m.group())):
                    found.append(PiiMatch(kind, m.start(), m.end()))
        return found

    return detect


def default_detector() -> Detector:
    """E-mail addresses, card numbers (Luhn-checked), US SSNs, phones, IPv4."""
    return regex_detector(PII_PATTERNS, checks={"card": luhn_valid})


class PiiScrub:
    """Rewrites personal data out of text, as a link (G2: says what, never which).

    Attach it where text flows: ``.act(input=[s], after_tool=[s],
    output=[s])``, or one of those. At a message moment the text is
    rewritten; after a tool, every string inside the result (nested lists
    and dicts included); before a tool, the arguments' strings, only when
    built with ``arguments=True`` (a tool that must send an e-mail needs the
    address).

    Args:
        name: the link's name, as rows and facts show it.
        detector: finds the data; default ``default_detector()``. Any
            function from text to ``PiiMatch`` spans will do (a
            named-entity model, a service); one that raises denies (G7).
        placeholder: what replaces a match; ``{kind}`` is the match's kind.
        messages: scrub at the input and output message moments.
        results: scrub tool results (after-tool).
        arguments: scrub tool arguments (before-tool).
        keep_values: store what it replaced in its rows' ``before``. By default
            the rows hold the placeholder instead (``masks_values``): the row
            survives, the personal data does not reach the record, with or
            without a redaction policy (issue 28 item 7).
    """

    def __init__(
        self,
        name: str = "pii-scrub",
        *,
        detector: Detector | None = None,
        placeholder: str = "[{kind}]",
        messages: bool = True,
        results: bool = True,
        arguments: bool = False,
        keep_values: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("PiiScrub needs a non-empty name")
        if not (messages or results or arguments):
            raise ValueError(
                f"PiiScrub '{name}' scrubs nothing: enable messages, results "
                "or arguments"
            )
        self.name = name
        self.detector = detector if detector is not None else default_detector()
        self.placeholder = placeholder
        self.masks_values = not keep_values
        self.on_message = self._on_message if messages else None
        self.on_tool_result = self._on_tool_result if results else None
        self.on_tool_call = self._on_tool_call if arguments else None

    def scrub(self, text: str) -> tuple[str, Counter[str]]:
        """The text with every match replaced, and how many of each kind.

        Raises:
            ValueError: the detector returned a span outside the text.
        """
        found = sorted(self.detector(text), key=lambda m: (m.start, -(m.end - m.start)))
        out: list[str] = []
        counts: Counter[str] = Counter()
        at = 0
        for m in found:
            if not (0 <= m.start < m.end <= len(text)):
                raise ValueError(
                    f"PiiScrub '{self.name}': the detector returned the span "
                    f"{m.start}..{m.end} of a text {len(text)} long"
                )
            if m.start < at:  # overlaps one already replaced
                continue
            out.append(text[at : m.start])
            out.append(self.placeholder.format(kind=m.kind))
            counts[m.kind] += 1
            at = m.end
        out.append(text[at:])
        return "".join(out), counts

    def _value(self, value: Any, counts: Counter[str]) -> Any:
        if isinstance(value, str):
            scrubbed, found = self.scrub(value)
            counts.update(found)
            return scrubbed
        if isinstance(value, Mapping):
            return {k: self._value(v, counts) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._value(v, counts) for v in value]
        return value

    def _verdict(self, value: Any) -> Allow:
        counts: Counter[str] = Counter()
        scrubbed = self._value(value, counts)
        if not counts:
            return allow()
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        return allow(scrubbed, f"scrubbed {kinds}")

    def _on_message(self, msg: MessageContext) -> Allow:
        return self._verdict(msg.content)

    def _on_tool_result(self, call: ToolResultContext) -> Allow:
        return self._verdict(call.result)

    def _on_tool_call(self, call: ToolCallContext) -> Allow:
        return self._verdict(call.args)
