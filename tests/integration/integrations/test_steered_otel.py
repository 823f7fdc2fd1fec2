"""A session another framework drove exports to OpenTelemetry as a native one does.

Pattern: the shared scenario's approve conversation steered through
         ``Governance`` (an ask decided by a second ``Governance`` on the
         store, as an approver's process does) and, beside it, the native
         loop's; both exported as ``helmlog replay --otlp`` does to a real
         OTLP/HTTP receiver (``tests/otlp_receiver.py``); the spans and the
         decision records compared.
Role:    integration test of ``integrations/_governance.py`` with ``sinks``.
Emits:   nothing.

Laws: issue 27 item 5 (one record: OTel works on an integration's session
unchanged), issue 26 item 6 (one root per trace, every record traced).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from helmlog import AskPause, check_in_approved
from helmlog.events import MemoryEventStore
from helmlog.integrations import Governance
from helmlog.sinks import OtlpExport, export
from tests.otlp_receiver import attributes, otlp_receiver

from . import scenario as sc
from .test_governance import steer


def _shape(spans: list[Any]) -> Counter[tuple[str, int, str]]:
    """Each span's name, status and error type: what a trace viewer shows."""
    return Counter(
        (
            s.name,
            s.status.code,
            str(attributes(s.attributes).get("error.type", "")),
        )
        for s in spans
    )


async def _exported(records: list[Any]) -> tuple[list[Any], list[Any]]:
    with otlp_receiver() as receiver:
        with OtlpExport(receiver.url) as collector:
            await export(records, collector.sink, target=receiver.url)
        return receiver.spans(), receiver.log_records()


async def test_a_steered_session_exports_the_native_sessions_spans() -> None:
    """The steered approve conversation exports the native loop's spans (the
    same names, statuses and error types) and as many decision records, each
    in a trace with one root."""
    name = sc.REFUND_800
    store = MemoryEventStore()
    governance = sc.governance(store)

    async def decide(pause: AskPause) -> None:
        await sc.governance(store).resume(
            pause.checkpoint, check_in_approved(by="dana@ops")
        )

    assert isinstance(governance, Governance)
    await steer(governance, name, decide=decide)
    steered = await store.read(name)

    native_store = MemoryEventStore()
    agent = sc.native_agent(native_store)
    out = await agent.run(sc.MESSAGES[name], session_id=name)
    assert isinstance(out, AskPause)
    await agent.resume(out.checkpoint, check_in_approved(by="dana@ops"))
    native = await native_store.read(name)

    steered_spans, steered_logs = await _exported(steered)
    native_spans, native_logs = await _exported(native)
    assert steered_spans and _shape(native_spans) == _shape(steered_spans)
    assert len(native_logs) == len(steered_logs) > 0
    traces = {s.trace_id for s in steered_spans}
    roots = [s for s in steered_spans if not s.parent_span_id]
    assert len(traces) == len(roots)
    span_ids = {s.span_id for s in steered_spans}
    assert all(r.span_id in span_ids for r in steered_logs)
