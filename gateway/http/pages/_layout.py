"""The pages' shared frame: the document shell, navigation, style, escaping.

Pattern: functions returning HTML strings; every value passes ``e`` (HTML
         escaping, quotes included) before it is placed.
Role:    gateway layer (http), for the approvals, history and session pages.
Emits:   nothing.

Laws: issue 28 items 1–2 (keyboard use, screen-reader labels, phone width),
G86 (what is rendered was served by the service: redacted values arrive as
their placeholder and are shown as such).

Why one stylesheet inline: no CDN and no static files to ship; each page is
one response that works offline and at any width (a 375 px test holds it).
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from typing import Any

from .._audit import when

__all__ = ["STYLE", "document", "e", "iso", "nav", "value", "when"]


def e(value: Any) -> str:
    """``value`` as text safe in HTML content and quoted attributes."""
    return html.escape(str(value), quote=True)


def iso(ms: int) -> str:
    """A time for ``<time datetime=...>``."""
    return datetime.fromtimestamp(max(0, ms) / 1000, UTC).isoformat()


def value(v: Any) -> str:
    """A recorded value (arguments, a result) as readable, stable text."""
    if isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, indent=1, sort_keys=True, default=str)


STYLE = """
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;padding:1rem;max-width:60rem;
color:#1f2328}
pre,code,a,.said{overflow-wrap:anywhere}
h1{font-size:1.3rem;margin:.4rem 0} h2{font-size:1.1rem;margin:1.2rem 0 .4rem}
h3{font-size:1rem;margin:.6rem 0 .3rem}
a{color:#0550ae} a:focus-visible,button:focus-visible,input:focus-visible,
select:focus-visible,summary:focus-visible{outline:3px solid #0969da;outline-offset:2px}
header.top{display:flex;flex-wrap:wrap;gap:.4rem 1rem;align-items:center;
border-bottom:1px solid #d0d7de;padding-bottom:.5rem}
nav ul{display:flex;gap:1rem;list-style:none;margin:0;padding:0}
.who{color:#57606a;font-size:.9rem;margin-left:auto}
.skip{position:absolute;left:-999px} .skip:focus{left:1rem;top:1rem;background:#fff}
.sr-only{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
ul.cards{list-style:none;padding:0;margin:0}
li.ask,li.resolved{border:1px solid #d0d7de;border-radius:6px;padding:.8rem 1rem;
margin:.8rem 0}
li.resolved{background:#f6f8fa} .question{font-weight:600;margin:0 0 .4rem}
dl{display:grid;grid-template-columns:8rem minmax(0,1fr);margin:0;gap:.15rem .6rem}
dt{color:#57606a} dd{margin:0;min-width:0} pre{margin:0;white-space:pre-wrap}
.conversation{margin:.5rem 0;padding:.4rem .6rem;border-left:3px solid #d0d7de}
.conversation ol{margin:0;padding-left:1.2rem} .said{color:#57606a;font-size:.85rem}
form.decide{margin-top:.6rem;display:flex;flex-wrap:wrap;gap:.4rem}
form.decide .note{flex:1 1 12rem;min-width:0}
input,select,button{font:inherit;padding:.35rem .5rem}
button{border:0;border-radius:4px;padding:.4rem .9rem;cursor:pointer}
button[disabled]{opacity:.55;cursor:wait}
.approve{background:#1a7f37;color:#fff} .decline{background:#b42318;color:#fff}
.empty{color:#57606a} #status{min-height:1.2rem;color:#57606a}
.deadline{color:#9a6700;font-size:.85rem} .error{color:#b42318;font-weight:600}
.outcome-approved{color:#1a7f37;font-weight:600}
.outcome-declined,.outcome-timed-out{color:#b42318;font-weight:600}
form.filters{display:grid;grid-template-columns:repeat(auto-fill,minmax(11rem,1fr));
gap:.5rem;align-items:end} form.filters label{display:flex;flex-direction:column;
font-size:.85rem;color:#57606a}
table{border-collapse:collapse;width:100%} th,td{text-align:left;padding:.35rem .4rem;
border-bottom:1px solid #d0d7de;vertical-align:top}
.pager{display:flex;gap:1rem;align-items:center;margin:.6rem 0}
#chain{padding:.5rem .8rem;border-radius:6px;font-weight:600}
#chain.intact{background:#dafbe1;color:#116329} #chain.broken{background:#ffebe9;
color:#82071e}
ol.timeline{list-style:none;padding:0;margin:0}
ol.timeline li{border-left:3px solid #d0d7de;padding:.3rem .7rem;margin:.3rem 0}
ol.timeline li.kind-decision{border-color:#8250df} ol.timeline li.kind-pause,
ol.timeline li.kind-resolved{border-color:#9a6700}
ol.timeline li.kind-error{border-color:#b42318}
ol.timeline li.unverified{background:#fff8f8}
.seq{color:#57606a;font-size:.8rem;font-variant-numeric:tabular-nums}
code{background:#f6f8fa;padding:.1rem .3rem;border-radius:4px}
@media (max-width:480px){
 dl{grid-template-columns:minmax(0,1fr)} dt{margin-top:.3rem}
 form.decide button{flex:1 1 40%}
 table.history thead{display:none} table.history tr{display:block;
 border-bottom:1px solid #d0d7de;padding:.4rem 0}
 table.history td{display:block;border:0;padding:.1rem 0}
 table.history td::before{content:attr(data-label) ": ";color:#57606a}
}
"""


def nav(who: str | None, roles: frozenset[str] = frozenset()) -> str:
    """The header: where one can go, who is signed in, and sign out."""
    links = []
    if "approver" in roles:
        links.append('<li><a href="/">Waiting on a person</a></li>')
    if roles & {"approver", "auditor"}:
        links.append('<li><a href="/history" id="nav-history">History</a></li>')
    signed = ""
    if who is not None:
        signed = (
            f'<div class="who">signed in as <b id="who">{e(who)}</b> '
            '<form method="post" action="/logout" style="display:inline">'
            '<button type="submit">sign out</button></form></div>'
        )
    return (
        '<a class="skip" href="#main">Skip to content</a>'
        '<header class="top"><nav aria-label="helmlog">'
        f"<ul>{''.join(links)}</ul></nav>{signed}</header>"
    )


def document(title: str, body: str, *, script: str = "") -> str:
    """A whole page: ``<head>`` with the viewport and style, then ``body``."""
    tail = f"<script>{script}</script>" if script else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}{tail}</body></html>"
    )
