"""The session view: one session as a timeline of its turns, for an auditor.

Pattern: a server-rendered document over a ``Timeline`` (built by the
         service from the stream, served): the chain's verdict first, the
         export links, then each turn's moments in seq order.
Role:    gateway layer (http), ``GET /sessions/{id}`` asked for HTML.
Emits:   nothing.

Laws: issue 28 item 2 (messages, each rule's decision with its why and
before/after, tool calls and results, pauses and who resolved them, errors;
intact or broken at seq N; JSON lines export, the OTel replay command), R18,
G86 (values as the policy serves them: a redacted one shows its placeholder).

Why the verdict comes first: a reader must know whether to believe the rest.
"""

from __future__ import annotations

from .._audit import Entry, Timeline
from ._layout import document, e, iso, nav, value, when


def _entry(entry: Entry) -> str:
    cls = f"kind-{entry.kind}" + ("" if entry.verified else " unverified")
    text = f'<p class="text">{e(entry.text)}</p>' if entry.text is not None else ""
    values = "".join(
        f'<div class="value"><span class="said">{e(label)}</span>'
        f"<pre>{e(value(v))}</pre></div>"
        for label, v in entry.values
    )
    flag = (
        "" if entry.verified else ' <b class="error">(after the break: unverified)</b>'
    )
    stamp = (
        f' · <time datetime="{e(iso(entry.at))}">{e(when(entry.at))}</time>'
        if entry.at
        else ""
    )
    return (
        f'<li class="{cls}" data-seq="{entry.seq}">'
        f'<span class="seq">seq {entry.seq}{stamp}</span>'
        f'<h4 class="title">{e(entry.title)}{flag}</h4>{text}{values}</li>'
    )


def session_page(
    who: str, roles: frozenset[str], timeline: Timeline, replay_command: str
) -> str:
    """The whole view of one session."""
    sid = timeline.session_id
    state = "intact" if timeline.intact else "broken"
    if timeline.intact:
        said = f"Chain intact: all {timeline.count} events verify."
    else:
        said = (
            f"Chain broken at seq {timeline.broken}: the record was altered or cut "
            f"there; what follows it is not verified. ({timeline.verdict})"
        )
    turns = []
    for i, turn in enumerate(timeline.turns):
        entries = "".join(_entry(x) for x in turn.entries)
        turns.append(
            f'<section class="turn" aria-labelledby="turn-{i}">'
            f'<h3 id="turn-{i}">{e(turn.title.capitalize())}</h3>'
            f'<ol class="timeline">{entries}</ol></section>'
        )
    body = (
        nav(who, roles) + f'<main id="main"><h1>Session <code>{e(sid)}</code></h1>'
        f'<p id="chain" class="{state}" role="status">{e(said)}</p>'
        '<section aria-labelledby="export-title"><h2 id="export-title">Export</h2>'
        f'<p><a id="export" href="/sessions/{e(sid)}/export" download>'
        "Download the session as JSON lines</a> (as this server serves it: "
        "redacted where the policy says).</p>"
        "<p>To send it to OpenTelemetry as spans, run:</p>"
        f'<pre><code id="otel">{e(replay_command)}</code></pre></section>'
        '<h2 id="timeline-title">Timeline</h2>'
        + ("".join(turns) or '<p class="empty">The stream holds no moments.</p>')
        + "</main>"
    )
    return document(f"helmlog session {sid}", body)
