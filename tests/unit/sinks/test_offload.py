"""OtelProcess: the OTel projection in a child process, failures raised (R16).

The child exports over OTLP/HTTP to a real local receiver; a refusing one, or
a child that died, is an ``ExportError`` at ``close`` and never reaches the
watched run.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from helmlog.sinks import ExportError, OtelProcess
from tests.otlp_receiver import otlp_receiver
from tests.unit.sinks.test_export import _agent


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


async def test_r16_a_finished_turn_reaches_the_child_without_a_flush() -> None:
    """A quiet run's last turn is written after ``linger_s``: nothing is held
    until a flush or a close that may never come."""
    with otlp_receiver() as receiver:
        process = OtelProcess(receiver.url, linger_s=0.01)
        try:
            agent = _agent(process)
            assert "Done." == await agent.run("refund please")
            await agent.idle()
            deadline = time.monotonic() + 30
            while len(receiver.span_names()) < 4 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            expected = ["chat m", "chat m", "execute_tool refund"]
            assert [*expected, "invoke_agent helmlog"] == sorted(receiver.span_names())
        finally:
            process.close()


async def test_r16_many_turns_arrive_whole_across_batched_writes() -> None:
    """Turns encoded one by one and written together arrive each whole, once."""
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


async def test_r16_a_dead_child_never_reaches_the_run_and_is_raised() -> None:
    """The child killed: runs still answer; ``close`` names the lost process."""
    with otlp_receiver() as receiver:
        process = OtelProcess(receiver.url)
        process._process.kill()
        process._process.join()
        agent = _agent(process)
        assert "Done." == await agent.run("refund please")
        with pytest.raises(ExportError) as raised:
            process.close()
        assert "export process is gone" in raised.value.reason
