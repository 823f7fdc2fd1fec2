"""OtelProcess: the OTel projection in a child process, failures raised (R16).

The child exports over OTLP/HTTP to a real local receiver; a refusing one, or
a child that died, is an ``ExportError`` at ``close`` and never reaches the
watched run.
"""

from __future__ import annotations

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
