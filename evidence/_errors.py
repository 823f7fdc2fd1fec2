"""The verifier's errors: one root, a format error per input an auditor passes.

Pattern: a small drawn tree (httpx's): ``EvidenceError`` roots
         ``EvidenceFormatError`` (``.what``, ``.reason``), raised on bad input
         (a bundle, a signed note, a key); a failed check is not an error but
         a ``Verdict`` naming the first thing that failed.
Role:    helmlog_evidence (standalone; no helmlog import).

Laws: issue 30 item 4 (only typed errors from a parser; a verdict, not an
exception, names the first check that failed).

Tree::

    EvidenceError
    └── EvidenceFormatError      what ∈ {"bundle", "note", "key", "checkpoint", "head"}
"""

from __future__ import annotations


class EvidenceError(Exception):
    """The root of the verifier's errors."""


class EvidenceFormatError(EvidenceError, ValueError):
    """Input that is not what it claims to be: ``what`` it was, and why.

    Not retryable: the same bytes fail the same way.
    """

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"malformed {what}: {reason}")
        self.what = what
        self.reason = reason
