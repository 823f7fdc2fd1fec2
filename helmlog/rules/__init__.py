"""helmlog.rules — ready-made rules, written as ordinary links.

Pattern: links built from a few options, attached, walked, recorded and
         hosted exactly as a user's: ``.act``, ``.tool_middleware``, ...
Role:    the face; re-exports ``_pii`` (``PiiScrub``), ``_limits``
         (``RateLimit``, ``Budget``), ``_bounds`` (``ToolAllowList``,
         ``ArgumentCeiling``), ``_trust`` (``ApproveOnce``); built on the
         public names of ``helmlog.runtime`` and ``helmlog.events``.
Emits:   nothing itself; every decision is a row and a fact.

Laws: G2, G5, G7 (the rules fail closed), G14, G49 (no reason quotes a
value), G78, R17 (``RateLimit``/``Budget`` state is in the link).

Why the reasons say what to do next: the model reads a denial as the tool's
message (G15); "try again in 12 s" lets it recover in one turn.
"""

from __future__ import annotations

from ._bounds import ArgumentCeiling, ToolAllowList
from ._limits import Budget, RateLimit
from ._pii import (
    PII_PATTERNS,
    Detector,
    PiiMatch,
    PiiScrub,
    default_detector,
    luhn_valid,
    regex_detector,
)
from ._trust import ApproveOnce, TrustKey, approve_once

__all__ = [
    "PII_PATTERNS",
    "ApproveOnce",
    "ArgumentCeiling",
    "Budget",
    "Detector",
    "PiiMatch",
    "PiiScrub",
    "RateLimit",
    "ToolAllowList",
    "TrustKey",
    "approve_once",
    "default_detector",
    "luhn_valid",
    "regex_detector",
]
