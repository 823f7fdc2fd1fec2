"""The approvals page: the asks waiting on a person, and the ones just decided.

Pattern: server-rendered cards (``asks_fragment``), swapped in whole by SSE;
         a small script that posts decisions, keeps typed notes and focus
         across swaps, and says what happened in words.
Role:    gateway layer (http), ``GET /`` and ``/page/asks/events``.
Emits:   nothing.

Laws: issue 11 item 3, issue 28 item 1 (the conversation up to the ask, the
rule's detail, a link to the session; buttons disabled in flight; who
decided and when, live and after reload; a refused or ended sign-in said),
G86 (every value was served by the service), H5.

Why one renderer for the first paint and every update: they cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._audit import Entry, Resolution, said
from ._layout import document, e, iso, nav, value, when


def _age(asked_at: int, now_ms: int) -> str:
    seconds = max(0, (now_ms - asked_at) // 1000)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def _args(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, indent=1, sort_keys=True, default=str)


def _entry(entry: Entry) -> str:
    body = f' <span class="text">{e(entry.text)}</span>' if entry.text else ""
    values = "".join(
        f'<pre class="value" aria-label="{e(label)}">{e(label)}: {e(value(v))}</pre>'
        for label, v in entry.values
    )
    return (
        f'<li class="msg kind-{e(entry.kind)}"><span class="said">{e(entry.title)}'
        f"</span>{body}{values}</li>"
    )


def _conversation(card: Any, i: int) -> str:
    if card.broken is not None:
        return (
            f'<p class="error conversation">This session\'s record does not verify '
            f"(broken at seq {e(card.broken)}): open the session view before "
            "deciding.</p>"
        )
    if not card.messages and not card.turn:
        return ""
    messages = "".join(_entry(m) for m in card.messages)
    turn = ""
    if card.turn:
        turn = (
            f'<h4 id="turn-{i}">Decisions of this turn before the ask</h4>'
            f'<ul class="turn-decisions" aria-labelledby="turn-{i}">'
            + "".join(_entry(t) for t in card.turn)
            + "</ul>"
        )
    return (
        f'<section class="conversation" aria-labelledby="conv-{i}">'
        f'<h4 id="conv-{i}">The conversation up to the ask</h4>'
        f'<ol class="messages">{messages}</ol>{turn}</section>'
    )


def _said(r: Resolution) -> str:
    words = said(r)
    return words[:1].upper() + words[1:]


def _resolved(r: Resolution) -> str:
    key = f"{r.session_id}/{r.tool_call_id}"
    note = f'<dt>note</dt><dd class="note-said">{e(r.note)}</dd>' if r.note else ""
    outcome = r.outcome.replace(" ", "-")
    return (
        f'<li class="resolved" data-ask="{e(key)}">'
        f'<p class="resolved-said"><span class="outcome-{e(outcome)}">'
        f"{e(_said(r))}</span></p>"
        f'<p class="question">{e(r.question)}</p><dl>'
        f"<dt>asked by</dt><dd>{e(r.rule or '(the tool)')}</dd>"
        f"<dt>tool</dt><dd>{e(r.tool_name)}</dd>"
        f'<dt>session</dt><dd><a href="/sessions/{e(r.session_id)}">'
        f"{e(r.session_id)}</a></dd>{note}"
        f'<dt>decided</dt><dd><time datetime="{e(iso(r.decided_at))}">'
        f"{e(when(r.decided_at))}</time></dd></dl></li>"
    )


def _card(card: Any, i: int, now_ms: int) -> str:
    a = card.ask
    key = f"{a.session_id}/{a.tool_call_id}"
    deadline = ""
    if a.deadline is not None:
        left = max(0, (a.deadline - now_ms) // 1000)
        deadline = f'<p class="deadline">declined by timeout in {left}s</p>'
    asker = a.middleware or "(the tool)"
    detail = ""
    if a.detail is not None:
        detail = (
            "<dt>rule's detail</dt>"
            f'<dd><pre class="detail">{e(_args(a.detail))}</pre></dd>'
        )
    what = f"{a.tool_name} in session {a.session_id}"
    return (
        f'<li class="ask" data-ask="{e(key)}" aria-labelledby="q-{i}">'
        f'<h3 class="question" id="q-{i}">{e(a.question)}</h3>'
        "<dl>"
        f'<dt>asked by</dt><dd class="middleware">{e(asker)}</dd>'
        f'<dt>tool</dt><dd class="tool">{e(a.tool_name)}</dd>'
        f'<dt>arguments</dt><dd><pre class="args">{e(_args(a.args))}</pre></dd>'
        f"{detail}"
        f'<dt>session</dt><dd class="session"><a href="/sessions/{e(a.session_id)}"'
        f' aria-label="session {e(a.session_id)}: the whole timeline">'
        f"{e(a.session_id)}</a></dd>"
        f'<dt>age</dt><dd class="age">{e(_age(a.asked_at, now_ms))}</dd>'
        "</dl>"
        f"{_conversation(card, i)}{deadline}"
        f'<form class="decide" data-session="{e(a.session_id)}" '
        f'data-call="{e(a.tool_call_id)}" aria-label="decide: {e(what)}">'
        f'<label class="sr-only" for="note-{i}">Note for this decision '
        "(recorded with it)</label>"
        f'<input id="note-{i}" name="note" class="note" '
        'placeholder="note (recorded)" autocomplete="off">'
        '<button type="submit" name="verdict" value="approve" class="approve" '
        f'aria-label="Approve {e(what)}">Approve</button>'
        '<button type="submit" name="verdict" value="decline" class="decline" '
        f'aria-label="Decline {e(what)}">Decline</button>'
        "</form>"
        '<p class="outcome" aria-live="polite"></p></li>'
    )


def asks_fragment(
    cards: Sequence[Any], decided: Sequence[Resolution], now_ms: int
) -> str:
    """The pending cards and the recently decided ones (what SSE replaces)."""
    if cards:
        pending = (
            '<h2 class="sr-only">Asks waiting on a person</h2>'
            '<ul id="asks-list" class="cards" aria-label="asks waiting on a person">'
            + "".join(_card(c, i, now_ms) for i, c in enumerate(cards))
            + "</ul>"
        )
    else:
        pending = '<p id="empty" class="empty">Nothing waits on a person.</p>'
    done = ""
    if decided:
        done = (
            '<h2 id="decided-title">Just decided</h2>'
            '<ul id="decided-list" class="cards" aria-labelledby="decided-title">'
            + "".join(_resolved(r) for r in decided)
            + '</ul><p><a href="/history">All past decisions</a></p>'
        )
    return pending + done


_SCRIPT = """
const list = document.getElementById('asks');
const status = document.getElementById('status');
const announce = document.getElementById('announce');
const busy = new Set();
const key = (form) => form.dataset.session + '/' + form.dataset.call;
const ENDED = 'Your sign-in has expired or was ended: sign in again.';
function signedOut() {
  status.className = 'error';
  status.setAttribute('role', 'alert');
  status.innerHTML = '';
  status.append(ENDED + ' ');
  const a = document.createElement('a');
  a.href = '/'; a.id = 'sign-in-again'; a.textContent = 'Sign in';
  status.append(a);
  for (const b of list.querySelectorAll('button')) b.disabled = true;
}
function hold(form, held) {
  for (const b of form.querySelectorAll('button')) b.disabled = held;
  form.querySelector('.note').readOnly = held;
  form.setAttribute('aria-busy', held ? 'true' : 'false');
}
function resolve(form, words, cls) {
  const card = form.closest('li');
  card.className = 'resolved';
  const out = card.querySelector('.outcome');
  out.className = 'outcome ' + cls;
  out.textContent = words;
  form.remove();
}
const source = new EventSource('/page/asks/events');
let waiting = list.querySelectorAll('li.ask').length;
// A refresh of the list must not wipe a note an approver is typing: notes
// (and the focused field, with its caret) are carried over by ask, and an
// ask whose decision is in flight stays held.
source.addEventListener('asks', (ev) => {
  const notes = {};
  let focused = null, caret = null;
  for (const form of list.querySelectorAll('form.decide')) {
    const input = form.querySelector('.note');
    if (input.value) notes[key(form)] = input.value;
    if (input === document.activeElement) {
      focused = key(form); caret = input.selectionStart;
    }
  }
  list.innerHTML = ev.data;
  for (const form of list.querySelectorAll('form.decide')) {
    const input = form.querySelector('.note');
    const k = key(form);
    if (k in notes) input.value = notes[k];
    if (busy.has(k)) hold(form, true);
    if (k === focused) { input.focus(); input.setSelectionRange(caret, caret); }
  }
  const now = list.querySelectorAll('li.ask').length;
  if (now !== waiting) {
    announce.textContent = now === 0 ? 'Nothing waits on a person.'
      : now + (now === 1 ? ' ask waits' : ' asks wait') + ' on a person.';
    waiting = now;
  }
});
source.addEventListener('error', async () => {
  if (source.readyState !== EventSource.CLOSED) return;
  const r = await fetch('/asks', {credentials: 'same-origin'});
  if (r.status === 401) signedOut();
});
document.addEventListener('submit', async (ev) => {
  const form = ev.target.closest('form.decide');
  if (!form) return;
  ev.preventDefault();
  const k = key(form);
  if (busy.has(k)) return;  // a second click while the first is in flight
  busy.add(k);
  hold(form, true);
  const verdict = ev.submitter ? ev.submitter.value : 'approve';
  const note = form.querySelector('.note').value || null;
  status.className = ''; status.setAttribute('role', 'status');
  status.textContent = (verdict === 'approve' ? 'Approving' : 'Declining') + '…';
  const url = '/asks/' + encodeURIComponent(form.dataset.session) + '/' +
    encodeURIComponent(form.dataset.call) + '/' + verdict;
  let reply, body;
  try {
    reply = await fetch(url, {method: 'POST', credentials: 'same-origin',
      headers: {'Content-Type': 'application/json', 'X-Requested-With': 'helmlog'},
      body: JSON.stringify({note})});
    body = await reply.json();
  } catch (err) {
    busy.delete(k); hold(form, false);
    status.className = 'error';
    status.textContent = 'The server did not answer; nothing was decided. Try again.';
    return;
  }
  if (reply.ok) {
    const who = document.getElementById('who').textContent;
    resolve(form, (verdict === 'approve' ? 'Approved' : 'Declined') + ' by ' +
      who + ' just now.', 'outcome-' + verdict + 'd');
    status.textContent = verdict + 'd: session ' + body.session_id + ' ' +
      body.status;
    return;
  }
  if (reply.status === 401) { signedOut(); return; }
  if (reply.status === 409 && body.decided_by) {
    const words = body.detail.charAt(0).toUpperCase() + body.detail.slice(1);
    resolve(form, words + '.', 'outcome-' + (body.approved ? 'approved' : 'declined'));
    status.textContent = 'This ask was decided elsewhere: ' + body.detail + '.';
    return;
  }
  busy.delete(k); hold(form, false);
  const out = form.closest('li').querySelector('.outcome');
  out.className = 'outcome error';
  out.textContent = body.detail || ('The decision failed (' + reply.status + ').');
  status.textContent = '';
});
"""


BODY_TITLE = "Waiting on a person"


def sign_in_page(notice: str | None = None) -> str:
    """The sign-in form, with ``notice`` (a refused token, an ended sign-in,
    a caller who may not decide) said above it (H5, issue 28)."""
    alert = (
        f'<p id="login-error" class="error" role="alert">{e(notice)}</p>'
        if notice
        else ""
    )
    body = (
        nav(None) + f'<main id="main"><h1>{BODY_TITLE}</h1>'
        '<form method="post" action="/login" id="login" aria-describedby="login-help">'
        f"{alert}"
        '<p id="login-help">Sign in with an approver token.</p>'
        '<label for="token">Token</label> '
        '<input type="password" name="token" id="token" autocomplete="off" required>'
        ' <button type="submit" id="sign-in">Sign in</button></form></main>'
    )
    return document("helmlog approvals", body)


def approvals_page(
    who: str,
    roles: frozenset[str],
    cards: Sequence[Any],
    decided: Sequence[Resolution],
    now_ms: int,
) -> str:
    """The signed-in approver's page: the asks, live, and the ones decided."""
    body = (
        nav(who, roles) + f'<main id="main"><h1>{BODY_TITLE}</h1>'
        '<p id="status" role="status"></p>'
        '<p id="announce" class="sr-only" aria-live="polite"></p>'
        f'<div id="asks">{asks_fragment(cards, decided, now_ms)}</div></main>'
    )
    return document("helmlog approvals", body, script=_SCRIPT)


def auditor_home(who: str, roles: frozenset[str]) -> str:
    """What an auditor sees at ``/``: where to read; deciding is not theirs."""
    body = (
        nav(who, roles) + '<main id="main"><h1>Auditing</h1>'
        '<p id="auditor-note">You read the record: the '
        '<a href="/history">history of decisions</a> and each session\'s '
        "timeline. Deciding an ask needs an approver.</p></main>"
    )
    return document("helmlog audit", body)
