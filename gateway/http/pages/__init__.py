"""The pages of ``helmlog serve``: approvals, history, a session's timeline.

Pattern: server-rendered HTML, one module per page over a shared frame
         (``_layout``); the approvals page alone carries a script (SSE and
         decisions). No build step, no CDN: everything ships in the wheel.
Role:    gateway layer (http); ``_routes`` and ``_streams`` render these.
Emits:   nothing.

Laws: issue 11 item 3, issue 28 items 1–2, G86 (values arrive served).
"""

from __future__ import annotations

from ._approvals import approvals_page, asks_fragment, auditor_home, sign_in_page
from ._history import history_page
from ._session import session_page

__all__ = [
    "approvals_page",
    "asks_fragment",
    "auditor_home",
    "history_page",
    "session_page",
    "sign_in_page",
]
