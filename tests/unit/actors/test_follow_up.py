"""The cluster's ``follow_up`` says what ``Agent.follow_up`` says (G36, G38, R17).

No Ray here: a ``ClusterAgent`` view keeps what its host's ``Result``s leave
(the checkpoint, whether the last input was refused); these are the real wire
results a host sends, each error encoded as ``wire_error`` encodes it.
"""

from __future__ import annotations

from typing import Any

import pytest

from helmlog.actors import ClusterAgent
from helmlog.actors._wire import Result, wire_error
from helmlog.events import Checkpoint, LedgerAppendError
from helmlog.runtime import MessageDeniedError, NoConversationError

CONVERSATION = Checkpoint(kind="conversation", session_id="s1", seq=4)
REFUSED = wire_error(
    MessageDeniedError(reason="no", phase="input", middleware="gate"), "s1"
)
ANSWERED = Result(id=1, answer="one", checkpoint=CONVERSATION)


def _view(*results: tuple[str, Result]) -> ClusterAgent:
    view = ClusterAgent(cluster=None, links=[])  # type: ignore[arg-type]  # no hosts
    for kind, result in results:
        view._keep(kind, result)  # type: ignore[arg-type]  # what _op does per result
    return view


async def _reason(view: ClusterAgent) -> Any:
    with pytest.raises(NoConversationError) as raised:
        await view.follow_up("again")
    return raised.value.reason


async def test_g36_a_refused_input_after_an_admitted_run_is_last_input_refused() -> (
    None
):
    """G36: the refusal leaves no checkpoint and ``follow_up`` names it."""
    view = _view(("run", ANSWERED), ("run", Result(id=2, error=REFUSED)))
    assert None is view.checkpoint()
    assert "last-input-refused" == await _reason(view)


async def test_g36_a_refused_first_input_is_never_run() -> None:
    """G36: with no admitted run before the refusal, it is ``never-run``."""
    assert "never-run" == await _reason(_view(("run", Result(id=1, error=REFUSED))))


async def test_g38_a_refused_output_keeps_the_conversation_as_in_process() -> None:
    """G38: an output refusal (or another failure) after admission keeps the
    checkpoint the host left, as ``Agent`` keeps its fold's."""
    denied = wire_error(
        MessageDeniedError(reason="no", phase="output", middleware="gate"), "s1"
    )
    failed = wire_error(
        LedgerAppendError(session_id="s1", store="redis", cause="down"), "s1"
    )
    for error in (denied, failed):
        view = _view(("run", Result(id=1, error=error, checkpoint=CONVERSATION)))
        assert CONVERSATION == view.checkpoint()
