"""The approvals page: server-rendered HTML, live over SSE, no build step.

Pattern: functions that render HTML strings with every value escaped; the
         page's script only swaps in server-rendered fragments and posts
         decisions.
Role:    gateway layer (http), for ``helmlog serve``'s ``GET /``.
Emits:   nothing.

Laws: issue 11 item 3 (pending asks, approve/decline with a note, live
updates), G86 (the views rendered here were redacted by the service).

Why fragments, not JSON rendered in the browser: one renderer for the first
paint and every update, so they cannot disagree.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from ._wire import AskView


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _age(asked_at: int, now_ms: int) -> str:
    seconds = max(0, (now_ms - asked_at) // 1000)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def _args(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True, default=str)


def asks_fragment(asks: Sequence[AskView], now_ms: int) -> str:
    """The list of pending asks (the part SSE replaces)."""
    if not asks:
        return '<p id="empty" class="empty">Nothing waits on a person.</p>'
    rows = []
    for a in asks:
        key = f"{a.session_id}/{a.tool_call_id}"
        deadline = ""
        if a.deadline is not None:
            left = max(0, (a.deadline - now_ms) // 1000)
            deadline = f'<div class="deadline">declined by timeout in {left}s</div>'
        asker = a.middleware or "(the tool)"
        rows.append(
            f'<li class="ask" data-ask="{_e(key)}">'
            f'<div class="question">{_e(a.question)}</div>'
            "<dl>"
            f'<dt>asked by</dt><dd class="middleware">{_e(asker)}</dd>'
            f'<dt>tool</dt><dd class="tool">{_e(a.tool_name)}</dd>'
            f'<dt>arguments</dt><dd><pre class="args">{_e(_args(a.args))}</pre></dd>'
            f'<dt>session</dt><dd class="session">{_e(a.session_id)}</dd>'
            f'<dt>age</dt><dd class="age">{_e(_age(a.asked_at, now_ms))}</dd>'
            "</dl>"
            f"{deadline}"
            f'<form class="decide" data-session="{_e(a.session_id)}" '
            f'data-call="{_e(a.tool_call_id)}">'
            '<input name="note" class="note" placeholder="note (recorded)">'
            '<button type="submit" name="verdict" value="approve" class="approve">'
            "Approve</button>"
            '<button type="submit" name="verdict" value="decline" class="decline">'
            "Decline</button>"
            "</form></li>"
        )
    return '<ul id="asks-list">' + "".join(rows) + "</ul>"


_STYLE = """
body{font:15px/1.4 system-ui,sans-serif;margin:2rem auto;max-width:56rem;color:#222}
h1{font-size:1.3rem} .who{color:#555;font-size:.9rem}
ul{list-style:none;padding:0} li.ask{border:1px solid #ccc;border-radius:6px;
padding:.8rem 1rem;margin:.8rem 0} .question{font-weight:600;margin-bottom:.4rem}
dl{display:grid;grid-template-columns:7rem 1fr;margin:0;gap:.1rem .6rem}
dt{color:#666} dd{margin:0} pre{margin:0;white-space:pre-wrap}
form.decide{margin-top:.6rem;display:flex;gap:.4rem} .note{flex:1}
.approve{background:#1a7f37;color:#fff} .decline{background:#b42318;color:#fff}
button{border:0;border-radius:4px;padding:.3rem .8rem} .empty{color:#666}
#status{min-height:1.2rem;color:#555} .deadline{color:#9a6700;font-size:.85rem}
.error{color:#b42318;font-weight:600}
"""

_SCRIPT = """
const list = document.getElementById('asks');
const status = document.getElementById('status');
const source = new EventSource('/page/asks/events');
// A refresh of the list must not wipe a note an approver is typing: notes
// (and the focused field, with its caret) are carried over by ask.
const key = (form) => form.dataset.session + '/' + form.dataset.call;
source.addEventListener('asks', (e) => {
  const notes = {};
  let focused = null, caret = null;
  for (const form of list.querySelectorAll('form.decide')) {
    const input = form.querySelector('.note');
    if (input.value) notes[key(form)] = input.value;
    if (input === document.activeElement) {
      focused = key(form); caret = input.selectionStart;
    }
  }
  list.innerHTML = e.data;
  for (const form of list.querySelectorAll('form.decide')) {
    const input = form.querySelector('.note');
    const k = key(form);
    if (k in notes) input.value = notes[k];
    if (k === focused) { input.focus(); input.setSelectionRange(caret, caret); }
  }
});
document.addEventListener('submit', async (e) => {
  const form = e.target.closest('form.decide');
  if (!form) return;
  e.preventDefault();
  const verdict = e.submitter ? e.submitter.value : 'approve';
  const note = form.querySelector('.note').value || null;
  const url = '/asks/' + encodeURIComponent(form.dataset.session) + '/' +
    encodeURIComponent(form.dataset.call) + '/' + verdict;
  const reply = await fetch(url, {method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json', 'X-Requested-With': 'helmlog'},
    body: JSON.stringify({note})});
  const body = await reply.json();
  status.textContent = reply.ok
    ? verdict + 'd: session ' + body.session_id + ' ' + body.status
    : (body.code + ': ' + body.detail);
});
"""


def page(
    who: str | None,
    asks: Sequence[AskView],
    now_ms: int,
    *,
    notice: str | None = None,
) -> str:
    """The whole page: the signed-in approver's list, or the sign-in form
    (with ``notice`` above it: a refused token, an ended sign-in; H5)."""
    head = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>helmlog approvals</title>"
        f"<style>{_STYLE}</style></head><body><h1>Waiting on a person</h1>"
    )
    if who is None:
        return (
            head
            + '<form method="post" action="/login" id="login">'
            + (
                f'<p id="login-error" class="error" role="alert">{_e(notice)}</p>'
                if notice
                else ""
            )
            + "<p>Sign in with an approver token.</p>"
            '<input type="password" name="token" id="token" autocomplete="off">'
            ' <button type="submit" id="sign-in">Sign in</button></form></body></html>'
        )
    return (
        head + f'<div class="who">signed in as <b id="who">{_e(who)}</b> '
        '<form method="post" action="/logout" style="display:inline">'
        '<button type="submit">sign out</button></form></div>'
        '<p id="status" role="status"></p>'
        f'<div id="asks">{asks_fragment(asks, now_ms)}</div>'
        f"<script>{_SCRIPT}</script></body></html>"
    )
