"""OtelProcess: the OTel projection in a child process, failures raised (R16).

The child exports over OTLP/HTTP to a real local receiver; a refusing one, or
a child that died, is an ``ExportError`` at ``close`` and never reaches the
watched run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from helmlog import Agent, ToolMiddleware, allow, conversation_redaction
from helmlog.events import DecisionFiled, StoredEvent, ToolCallRequest
from helmlog.events.lowlevel import RecordTaker
from helmlog.runtime.providers import Reply, scripted
from helmlog.runtime.testing import FakeClock
from helmlog.sinks import (
    ExportError,
    FinishedTelemetry,
    OtelProcess,
    OtelSink,
    _export_child,
)
from tests.otlp_receiver import otlp_receiver
from tests.polling import until, until_sync
from tests.unit.sinks.file_exporters import FileExporter, file_exporters, projection
from tests.unit.sinks.test_export import _agent, refund, refused_then_answered


async def test_r16_a_child_process_exports_the_genai_spans_and_records() -> None:
    """The child's ``OtelSink`` sends the spans an in-process one makes."""
    with otlp_receiver() as receiver:
        process = OtelProcess(receiver.url)
        agent = _agent(process)
        assert "Done." == await agent.run("refund please")
        await agent.idle()
        process.close()
        expected = ["chat m", "chat m", "execute_tool refund", "invoke_agent helmlog"]
        assert expected == sorted(receiver.span_names())
        assert len(agent.last_snapshot().middleware_decisions) == receiver.log_count()


async def test_live_export_is_configured_from_the_standard_otel_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no URL, the child exports where ``OTEL_EXPORTER_OTLP_ENDPOINT``
    says, as ``OTEL_SERVICE_NAME``: live export configured as the SDK is."""
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "refund-desk")
        process = OtelProcess()
        try:
            agent = _agent(process)
            assert "Done." == await agent.run("refund please")
        finally:
            process.close()
        assert 4 == len(receiver.span_names())
        assert {"refund-desk"} == receiver.service_names()


async def test_r16_a_finished_turn_reaches_the_child_without_a_flush() -> None:
    """A quiet run's last turn is written ``linger_s`` after it ended (a
    timer on the run's loop): nothing is held until a flush or a close that
    may never come."""
    with otlp_receiver() as receiver:
        process = OtelProcess(receiver.url, linger_s=0.01)
        try:
            agent = _agent(process)
            assert "Done." == await agent.run("refund please")
            await agent.idle()
            await until("four spans", lambda: len(receiver.span_names()) >= 4, 30)
            expected = ["chat m", "chat m", "execute_tool refund"]
            assert [*expected, "invoke_agent helmlog"] == sorted(receiver.span_names())
        finally:
            process.close()


def test_r16_turns_sealed_on_loops_that_ended_reach_the_child_unflushed() -> None:
    """A run on a loop that stops at once (``asyncio.run`` per turn) never
    sees its timer fire; what it held is written all the same (the sweeper),
    with no flush."""
    with otlp_receiver() as receiver:
        process = OtelProcess(receiver.url, linger_s=0.05)
        try:
            for agent in (_agent(process), _agent(process)):
                assert "Done." == asyncio.run(agent.run("refund please"))

            names = until_sync(
                "both turns' spans",
                receiver.span_names,
                30,
                ok=lambda names: names.count("invoke_agent helmlog") == 2,
            )
            assert 2 == names.count("invoke_agent helmlog")
        finally:
            process.close()


async def test_r16_many_turns_arrive_whole_across_batched_writes() -> None:
    """Turns sealed one by one and written together arrive each whole, once."""
    with otlp_receiver() as receiver:
        process = OtelProcess(receiver.url, linger_s=5.0)
        agents = [_agent(process) for _ in range(30)]
        for agent in agents:
            assert "Done." == await agent.run("refund please")
            await agent.idle()
        process.close()
        names = receiver.span_names()
        assert 30 == names.count("invoke_agent helmlog")
        assert 30 == names.count("execute_tool refund")
        assert 60 == names.count("chat m")


def test_r16_what_is_held_is_exported_when_the_process_exits_unclosed(
    tmp_path: Path,
) -> None:
    """A program that never calls ``close`` still exports its last turn: the
    interpreter's exit closes the ``OtelProcess`` (an exit hook), before
    multiprocessing ends the child."""
    out = tmp_path / "child.jsonl"
    program = f"""
import asyncio, functools
from helmlog.sinks import OtelProcess
from tests.unit.sinks.file_exporters import file_exporters
from tests.unit.sinks.test_export import _agent

if __name__ == "__main__":
    process = OtelProcess(
        setup=functools.partial(file_exporters, {str(out)!r}), linger_s=60.0
    )
    assert "Done." == asyncio.run(_agent(process).run("refund please"))
"""
    script = tmp_path / "unclosed.py"
    script.write_text(program)
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert 0 == done.returncode, done.stderr
    names = sorted(row["name"] for row in projection(str(out)) if row["kind"] == "span")
    assert ["chat m", "chat m", "execute_tool refund", "invoke_agent helmlog"] == names


_NO_MAIN_GUARD = """
import asyncio, sys
from pathlib import Path

from helmlog import Agent, tool
from helmlog.runtime.providers import Reply, ToolCallRequest, scripted
from helmlog.runtime.testing import FakeClock
from helmlog.sinks import OtelProcess

out = Path(sys.argv[1])
with (out / "imported.txt").open("a") as imported:  # once per import of this file
    imported.write("imported\\n")


@tool
def refund(order: str) -> str:
    \"\"\"Refund an order: not idempotent, each run appends a line.\"\"\"
    with (out / "refunds.txt").open("a") as refunds:
        refunds.write(f"refunded {order}\\n")
    return f"refunded {order}"


model = scripted(
    [Reply(tool_calls=[ToolCallRequest(id="c1", name="refund", args={"order": "7"})]),
     "Done."]
)
process = OtelProcess(sys.argv[2])
agent = (
    Agent.create(provider=model, model="m", clock=FakeClock(step=3))
    .tool(refund)
    .watch(process)
    .build()
)
print(asyncio.run(agent.run("refund please")))
process.close()
"""


def test_r28_a_script_with_no_main_guard_runs_its_tool_once(tmp_path: Path) -> None:
    """R28: a script with no main guard that attaches ``OtelProcess`` is
    imported once, its non-idempotent tool runs once, the export arrives."""
    script = tmp_path / "refund_desk.py"
    script.write_text(_NO_MAIN_GUARD)
    root = Path(__file__).resolve().parents[3]
    with otlp_receiver() as receiver:
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path), receiver.url],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(root)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        spans = sorted(receiver.span_names())
    assert (0, "Done.\n") == (done.returncode, done.stdout), done.stderr
    assert "imported\n" == (tmp_path / "imported.txt").read_text()
    assert "refunded 7\n" == (tmp_path / "refunds.txt").read_text()
    assert ["chat m", "chat m", "execute_tool refund", "invoke_agent helmlog"] == spans


def test_r28_a_setup_defined_in_main_is_refused_before_a_child_starts() -> None:
    """R28: the child never imports ``__main__``, so a ``setup`` that lives
    there is a ``TypeError`` at once, not a child that fails to find it."""

    def setup() -> tuple[Any, Any]:
        raise AssertionError("never called")

    setup.__module__ = "__main__"
    with pytest.raises(TypeError, match="__main__"):
        OtelProcess(setup=functools.partial(setup))


def test_r16_a_forked_copy_that_exits_leaves_the_owners_child_running() -> None:
    """A process forked after the ``OtelProcess`` was made inherits its exit
    hook; run there, the hook must not close the owner's export child."""
    with otlp_receiver() as receiver:
        process = OtelProcess(receiver.url)
        try:
            pid = os.fork()
            if pid == 0:  # the copy: run the hook as its exit would
                try:
                    process._at_exit()
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            assert process._process.poll() is None
            agent = _agent(process)
            assert "Done." == asyncio.run(agent.run("refund please"))
            process.flush()
            assert 4 == len(receiver.span_names())
        finally:
            process.close()


async def test_r16_a_refusing_collector_is_raised_at_close_not_in_the_run() -> None:
    """A 400 from the collector: the run answers, ``close`` raises."""
    with otlp_receiver() as receiver:
        receiver.status = 400
        process = OtelProcess(receiver.url)
        agent = _agent(process)
        assert "Done." == await agent.run("refund please")
        with pytest.raises(ExportError) as raised:
            process.close()
        assert receiver.url == raised.value.target


async def test_r16_the_child_exports_again_once_the_collector_answers_again() -> None:
    """A collector that refused a batch and then answers: the refusal is
    raised at the next ``flush``, and the turns after it are exported (the
    child's export is live)."""
    with otlp_receiver() as receiver:
        receiver.status = 400
        process = OtelProcess(receiver.url)
        try:
            await refused_then_answered(receiver, process, process.flush)
        finally:
            process.close()
        expected = ["chat m", "chat m", "execute_tool refund", "invoke_agent helmlog"]
        assert expected == sorted(receiver.span_names())


async def test_r16_a_dead_child_never_reaches_the_run_and_is_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The child killed: runs still answer; the loss is logged once when the
    run's write finds it, and ``close`` names the lost process."""
    with otlp_receiver() as receiver:
        process = OtelProcess(receiver.url)
        process._process.kill()
        process._process.wait()
        with caplog.at_level(logging.ERROR, logger="helmlog"):
            for agent in (_agent(process), _agent(process)):
                assert "Done." == await agent.run("refund please")
            process._write_soon()  # what the run's loop timer does
            process._write_soon()
        lost = [r for r in caplog.records if "export process is gone" in r.message]
        assert 1 == len(lost)
        with pytest.raises(ExportError) as raised:
            process.close()
        assert "export process is gone" in raised.value.reason


async def test_r6_the_child_projects_the_stored_records_as_a_sink_in_process_does(
    tmp_path: Path,
) -> None:
    """R6: fed an append's stored records (``on_records``), the child exports
    the spans and records an in-process ``OtelSink`` makes of the same run:
    names, parents, attributes, statuses, times."""
    child_file, local_file = tmp_path / "child.jsonl", tmp_path / "local.jsonl"
    process = OtelProcess(setup=functools.partial(file_exporters, str(child_file)))
    local = FinishedTelemetry(
        FileExporter(str(local_file)), FileExporter(str(local_file))
    )
    try:
        for watcher in (process, OtelSink(local, local)):
            agent = _governed_agent(watcher)
            assert "Done." == await agent.run("refund please", session_id="s-1")
            await agent.idle()
        process.flush()
        local.flush()
    finally:
        process.close()
        local.shutdown()
    expected = projection(str(local_file))
    assert 4 == len([row for row in expected if row["kind"] == "span"])
    assert any(row["kind"] == "record" for row in expected)
    assert expected == projection(str(child_file))


class _Appends(RecordTaker):
    """A record taker that keeps each append's records as handed."""

    readonly = True

    def __init__(self) -> None:
        self.appends: list[list[StoredEvent]] = []

    def on_event(self, event: object) -> None:
        return None

    def on_records(self, records: list[StoredEvent]) -> None:
        self.appends.append(records)


async def test_r4_r6_records_projected_per_append_are_the_watched_projection(
    tmp_path: Path,
) -> None:
    """R6: an ``OtelSink`` fed a run's appends as stored (``on_recorded``,
    rows standing for their facts) exports what one watching the same run
    exports; R4: fed them again, or as events, it exports nothing more."""
    watched_file, recorded_file = tmp_path / "watched.jsonl", tmp_path / "rec.jsonl"
    watched = FinishedTelemetry(
        FileExporter(str(watched_file)), FileExporter(str(watched_file))
    )
    recorded = FinishedTelemetry(
        FileExporter(str(recorded_file)), FileExporter(str(recorded_file))
    )
    taker = _Appends()
    agent = _governed_agent(OtelSink(watched, watched), taker)
    assert "Done." == await agent.run("refund please", session_id="s-1")
    await agent.idle()
    sink = OtelSink(recorded, recorded)
    decoded = [[record.decode() for record in append] for append in taker.appends]
    assert any(type(event) is DecisionFiled for append in decoded for event in append)
    for append in decoded:
        sink.on_recorded("s-1", append)
    for append in decoded:
        sink.on_recorded("s-1", append)
        for event in append:
            sink.on_event(event)
    watched.shutdown()
    recorded.shutdown()
    expected = projection(str(watched_file))
    assert any(row["kind"] == "record" for row in expected)
    assert expected == projection(str(recorded_file))


async def test_g86_a_redacting_agent_feeds_the_child_its_served_events(
    tmp_path: Path,
) -> None:
    """G86: a redacting agent hands ``OtelProcess`` its served events (not the
    stored records); the child still exports every span and no tool value."""
    child_file = tmp_path / "child.jsonl"
    process = OtelProcess(
        setup=functools.partial(file_exporters, str(child_file)), values=True
    )
    try:
        agent = _governed_agent(process, redact=conversation_redaction())
        assert "Done." == await agent.run("refund please")
        process.flush()
    finally:
        process.close()
    rows = projection(str(child_file))
    names = sorted(row["name"] for row in rows if row["kind"] == "span")
    assert ["chat m", "chat m", "execute_tool refund", "invoke_agent helmlog"] == names
    (tool_span,) = [row for row in rows if row.get("name") == "execute_tool refund"]
    arguments = tool_span["attributes"]["gen_ai.tool.call.arguments"]
    assert "7" not in arguments
    assert "[redacted]" in arguments


def _governed_agent(*watchers: object, **options: object) -> Agent:
    """The refund turn of ``_agent`` with a gate at before-tool: decision facts."""
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
    gate = ToolMiddleware(name="gate", on_tool_call=lambda _call: allow())
    return (
        Agent.create(provider=model, model="m", clock=FakeClock(step=3), **options)
        .tool(refund)
        .tool_middleware(gate)
        .watch(*watchers)
        .build()
    )


def _read_back(frames: Any, expected: int) -> list[bytes]:
    got: list[bytes] = []

    def all_read() -> bool:
        got.extend(frames.drain())
        return len(got) >= expected

    until_sync(f"{expected} frames read back", all_read, 30, every=0)
    return got


def test_r16_held_messages_cross_the_pipe_whole_past_iov_max_and_partial_writes() -> (
    None
):
    """What the run holds is written in one go and read back message by
    message: more parts than one ``writev`` takes, and more bytes than the
    pipe holds (the writer resumes where the pipe stopped it)."""
    reading, writing = multiprocessing.Pipe(duplex=False)
    frames = _export_child.Frames(reading)
    try:
        tiny = [f"m{i}".encode() for i in range(3000)]
        big = [bytes([i % 251]) * 300_000 for i in range(3)]
        for messages in (tiny, big):
            parts = [
                part
                for message in messages
                for part in (len(message).to_bytes(4, "big"), message)
            ]
            writer = threading.Thread(
                target=_export_child.write_all, args=(writing.fileno(), parts)
            )
            writer.start()
            assert messages == _read_back(frames, len(messages))
            writer.join()
        writing.close()
        with pytest.raises(EOFError):
            frames.drain()
    finally:
        reading.close()
        writing.close()
