"""Exports reach a real OTLP/HTTP receiver, and a failed one is raised (issue 8).

The collector is a real local HTTP server (``tests/otlp_receiver.py``); the
exporters are the SDK's own OTLP/HTTP ones.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from helmlog import Agent, tool
from helmlog.events import ToolCallRequest
from helmlog.runtime.providers import Reply, scripted
from helmlog.runtime.testing import FakeClock
from helmlog.sinks import ExportError, JsonlSink, OtlpExport, export, otlp_endpoints
from tests.otlp_receiver import Receiver, otlp_receiver


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


def _agent(*watchers: object) -> Agent:
    model = scripted(
        [
            Reply(
                tool_calls=[
                    ToolCallRequest(id="c1", name="refund", args={"order": "7"})
                ]
            ),
            "Done.",
        ]
    )
    return (
        Agent.create(provider=model, model="m", clock=FakeClock(step=3))
        .tool(refund)
        .watch(*watchers)
        .build()
    )


async def _records(agent: Agent) -> list:  # type: ignore[type-arg]
    assert "Done." == await agent.run("refund please")
    assert agent.session_id is not None
    return await agent.store.read(agent.session_id)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


EXPECTED_SPANS = ["chat m", "chat m", "execute_tool refund", "invoke_agent helmlog"]


def test_otlp_endpoints_accept_the_base_url_and_either_signal_url() -> None:
    """The base URL, ``/v1/traces`` and ``/v1/logs`` name the same collector."""
    both = ("http://c:4318/v1/traces", "http://c:4318/v1/logs")
    for url in ("http://c:4318", "http://c:4318/", both[0], both[1]):
        assert both == otlp_endpoints(url)


@pytest.mark.parametrize("path", ["", "/v1/traces"])
async def test_live_watcher_exports_spans_and_records_to_a_real_receiver(
    path: str,
) -> None:
    """A watching ``OtlpExport`` sends GenAI spans and fact records over HTTP."""
    with otlp_receiver() as receiver:
        otlp = OtlpExport(receiver.url + path)
        agent = _agent(otlp.sink)
        await _records(agent)
        otlp.close()
        assert EXPECTED_SPANS == sorted(receiver.span_names())
        assert len(agent.last_snapshot().middleware_decisions) == receiver.log_count()


async def test_the_standard_otel_environment_variables_configure_the_export(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no URL, ``OTEL_EXPORTER_OTLP_ENDPOINT`` names the collector."""
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "refund-desk")
        otlp = OtlpExport()
        await export(await _records(_agent()), otlp.sink, target=otlp.target)
        otlp.close()
        assert EXPECTED_SPANS == sorted(receiver.span_names())
        assert {"refund-desk"} == receiver.service_names()


async def test_without_otel_service_name_the_service_is_helmlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``OTEL_SERVICE_NAME``: the spans' resource says ``helmlog``."""
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    with otlp_receiver() as receiver:
        otlp = OtlpExport(receiver.url)
        await export(await _records(_agent()), otlp.sink, target=otlp.target)
        otlp.close()
        assert {"helmlog"} == receiver.service_names()


async def test_a_collector_that_refuses_the_batch_is_an_export_error() -> None:
    """A 400 from the collector is raised at close, never swallowed."""
    with otlp_receiver() as receiver:
        receiver.status = 400
        otlp = OtlpExport(receiver.url)
        await export(await _records(_agent()), otlp.sink, target=otlp.target)
        with pytest.raises(ExportError) as raised:
            otlp.close()
        assert receiver.url == raised.value.target


async def test_r16_a_live_export_goes_on_once_the_collector_answers_again() -> None:
    """Live: a refused batch is raised at the next ``flush`` with how much was
    not exported, and once the collector answers again (after the backoff)
    the export goes on; a strict export would fail every later batch."""
    with otlp_receiver() as receiver:
        receiver.status = 400
        otlp = OtlpExport(receiver.url, live=True)
        try:
            await refused_then_answered(receiver, otlp.sink, otlp.flush)
        finally:
            otlp.close()
        assert EXPECTED_SPANS == sorted(receiver.span_names())


async def refused_then_answered(
    receiver: Receiver, watcher: object, flush: Callable[[], None]
) -> None:
    """A turn the collector refuses (``flush`` raises, naming what was not
    exported), then one after it answers again, past the first backoff
    (``flush`` passes); the receiver keeps only the second turn's posts."""
    assert "Done." == await _agent(watcher).run("refund please")
    with pytest.raises(ExportError) as raised:
        flush()
    assert "not exported" in raised.value.reason
    with receiver.lock:  # what reached it so far was refused
        receiver.posts.clear()
    receiver.status = 200
    # Not a wait on a state: the first backoff (1 s) must pass on the clock; the
    # exporter shows no state to poll (and test_offload's is in a child).
    await asyncio.sleep(1.2)
    assert "Done." == await _agent(watcher).run("refund please")
    flush()  # nothing failed since the last flush


async def test_a_strict_export_fails_every_batch_after_its_first_failure() -> None:
    """Not live (replay, ``export``): the first refused batch ends the export,
    so an unreachable collector costs one timeout, not one per batch."""
    with otlp_receiver() as receiver:
        receiver.status = 400
        otlp = OtlpExport(receiver.url)
        try:
            assert "Done." == await _agent(otlp.sink).run("refund please")
            with pytest.raises(ExportError):
                otlp.flush()
            with receiver.lock:  # what reached it so far was refused
                receiver.posts.clear()
            receiver.status = 200
            # Not a wait: past a live export's first backoff (1 s), strict still fails.
            await asyncio.sleep(1.2)
            assert "Done." == await _agent(otlp.sink).run("refund please")
            with pytest.raises(ExportError):
                otlp.flush()
        finally:
            with pytest.raises(ExportError):
                otlp.close()
        assert [] == receiver.span_names()


async def test_an_unreachable_collector_is_an_export_error_within_its_timeout() -> None:
    """Nothing listening: the bounded retries end in an ``ExportError``."""
    url = f"http://127.0.0.1:{_free_port()}"
    otlp = OtlpExport(url, timeout=0.5)
    await export(await _records(_agent()), otlp.sink, target=otlp.target)
    with pytest.raises(ExportError) as raised:
        otlp.close()
    assert url == raised.value.target


async def test_export_into_an_unwritable_path_raises_instead_of_logging(
    tmp_path: Path,
) -> None:
    """A JSONL export whose folder does not exist stops with an ``ExportError``."""
    target = tmp_path / "missing" / "x.jsonl"
    records = await _records(_agent())
    with pytest.raises(ExportError) as raised:
        await export(records, JsonlSink(target), target=str(target))
    assert str(target) == raised.value.target
    assert not target.exists()
