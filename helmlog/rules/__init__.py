"""helmlog.rules — ready-made rules, written as ordinary links.

Pattern: links (a ``name`` and hooks) built from a few options, so each is
         attached, walked, recorded and hosted exactly as a rule a user
         writes: ``.act(...)``, ``.tool_middleware(...)``,
         ``.message_middleware(...)`` or ``Cluster.policy(factory)``.
Role:    the face layer; the public module ``helmlog.rules``, re-exporting
         ``_pii`` (the scrub and its detectors), ``_limits`` (the limits
         that count), ``_bounds`` (the checks of one call alone) and
         ``_trust`` (session trust: ask once, then remember); built on the
         public names of ``helmlog.runtime`` (the verbs and the contexts)
         and of ``helmlog.events`` (an approval and its digest).
Emits:   nothing itself; every decision is a row and a fact, as for any link.

Rules: ``PiiScrub`` (rewrite personal data out of messages and tool results,
and optionally arguments; regex detectors by default, any detector
pluggable), ``RateLimit`` (at most N calls per window), ``Budget`` (a total
to spend, per call or by an argument), ``ToolAllowList`` (which tools each
``tool_source`` may offer), ``ArgumentCeiling`` (a number an argument may
not exceed: denied, or asked about), ``ApproveOnce``/``approve_once`` (ask
a person once per distinct call, then pass saying who approved; remembered
from the session's own stream, so across eviction, failover and redaction).

Laws: G2 (every rewrite says why: the count of each kind scrubbed, never a
value), G5 (none of them answers for a tool: they allow, rewrite, deny or
ask), G7 (a detector, key or cost function that raises is a denial: the
rules fail closed), G14 (a limit's denial stops the walk), G49 (a reason is
a fact watchers see, so no reason quotes an argument or a match), G78
(``ToolAllowList`` judges ``tool_source``), R17 (``RateLimit`` and
``Budget`` keep their state in the link, so one hosted by a ``PolicyActor``
is shared by every session on every host).

Why one public module over three private ones: a user imports every rule
from ``helmlog.rules``; each private module holds one kind (rewriting,
counting, bounding one call), so a new rule goes beside its kind, and why
the limits count at before-tool is told in ``_limits``, where they count.

Why the reasons say what to do next: the model reads a denial as the tool's
message (G15); "try again in 12 s" or "ask for at most 500" lets it recover
in one turn, where a bare "denied" invites the same call again.
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
