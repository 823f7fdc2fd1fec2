"""The history page: past decisions, filtered and paged.

Pattern: a GET form (so a filter is a link one can share or bookmark) over a
         table of ``Resolution`` rows, with a pager.
Role:    gateway layer (http), ``GET /history`` for approvers and auditors.
Emits:   nothing.

Laws: issue 28 item 1 (filter by approver, rule, tool, outcome and time;
paged), item 2 (auditors read it), G86 (notes and questions as served).

Why plain links and a GET form, no script: the page works from the keyboard
and a screen reader as any document does, and a filtered view is a URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from .._audit import OUTCOMES, HistoryPage
from ._layout import document, e, iso, nav, when

HEADERS = ("Decided", "Outcome", "By", "Rule", "Tool", "Question", "Note", "Session")


def _select(name: str, label: str, options: tuple[str, ...], chosen: str) -> str:
    opts = ['<option value="">any</option>'] + [
        f'<option value="{e(o)}"{" selected" if o == chosen else ""}>{e(o)}</option>'
        for o in options
    ]
    return (
        f'<label for="f-{name}">{e(label)}'
        f'<select id="f-{name}" name="{name}">{"".join(opts)}</select></label>'
    )


def _date(name: str, label: str, chosen: str) -> str:
    return (
        f'<label for="f-{name}">{e(label)}'
        f'<input type="date" id="f-{name}" name="{name}" value="{e(chosen)}"></label>'
    )


def history_page(
    who: str, roles: frozenset[str], page: HistoryPage, query: Mapping[str, str]
) -> str:
    """The filter form, the matching decisions, the pager."""
    q = {k: v for k, v in query.items() if v and k != "page"}
    form = (
        '<form class="filters" method="get" action="/history" '
        'aria-label="filter the decisions">'
        + _select("approver", "Approver", page.approvers, q.get("approver", ""))
        + _select("rule", "Rule", page.rules, q.get("rule", ""))
        + _select("tool", "Tool", page.tools, q.get("tool", ""))
        + _select("outcome", "Outcome", OUTCOMES, q.get("outcome", ""))
        + _date("since", "Decided on or after", q.get("since", ""))
        + _date("until", "Decided before", q.get("until", ""))
        + '<button type="submit" id="apply">Filter</button>'
        '<a href="/history" id="clear">Clear filters</a></form>'
    )
    rows = []
    for r in page.rows:
        outcome = r.outcome.replace(" ", "-")
        note = e(r.note) if r.note else ""
        rows.append(
            f'<tr class="decision" data-session="{e(r.session_id)}">'
            f'<td data-label="Decided"><time datetime="{e(iso(r.decided_at))}">'
            f"{e(when(r.decided_at))}</time></td>"
            f'<td data-label="Outcome" class="outcome outcome-{e(outcome)}">'
            f"{e(r.outcome)}</td>"
            f'<td data-label="By" class="by">{e(r.by or "")}</td>'
            f'<td data-label="Rule" class="rule">{e(r.rule or "(the tool)")}</td>'
            f'<td data-label="Tool" class="tool">{e(r.tool_name)}</td>'
            f'<td data-label="Question">{e(r.question)}</td>'
            f'<td data-label="Note">{note}</td>'
            f'<td data-label="Session"><a href="/sessions/{e(r.session_id)}">'
            f"{e(r.session_id)}</a></td></tr>"
        )
    if rows:
        table = (
            '<table class="history"><caption class="sr-only">Past decisions, '
            "newest first</caption><thead><tr>"
            + "".join(f'<th scope="col">{h}</th>' for h in HEADERS)
            + "</tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table>"
        )
    else:
        table = '<p id="no-decisions" class="empty">No decision matches.</p>'
    pager = []
    if page.page > 1:
        link = urlencode({**q, "page": page.page - 1})
        pager.append(f'<a rel="prev" id="newer" href="/history?{e(link)}">Newer</a>')
    pager.append(f'<span id="page-of">page {page.page} of {page.pages}</span>')
    if page.page < page.pages:
        link = urlencode({**q, "page": page.page + 1})
        pager.append(f'<a rel="next" id="older" href="/history?{e(link)}">Older</a>')
    broken = ""
    if page.broken:
        items = "".join(
            f'<li><a href="/sessions/{e(sid)}">{e(sid)}</a>: broken at seq {seq}</li>'
            for sid, seq in page.broken
        )
        broken = (
            '<section id="unverified" aria-labelledby="unverified-title">'
            '<h2 id="unverified-title" class="error">Sessions whose record does '
            "not verify (their later decisions are not listed)</h2>"
            f"<ul>{items}</ul></section>"
        )
    count = "decision matches" if page.total == 1 else "decisions match"
    body = (
        nav(who, roles) + '<main id="main"><h1>Past decisions</h1>'
        f"{form}"
        f'<p id="count" role="status">{page.total} {count}.</p>'
        f'{table}<nav class="pager" aria-label="pages">{"".join(pager)}</nav>'
        f"{broken}</main>"
    )
    return document("helmlog history", body)
