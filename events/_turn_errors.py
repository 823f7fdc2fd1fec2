"""The errors of a turn its agent's bounds stopped: a limit, an output type.

Pattern: two leaves of the drawn tree (``events/_errors.py``), each carrying
         the bound it met and never a value.
Role:    events layer; the runtime raises them from inside a turn (its budget,
         ``runtime/_limits.py``; its output moment, ``Loop.typed``) and
         records each as ``error.fatal`` with its code (G91).
Emits:   nothing.

Laws: R23 (``TurnLimitError``: ``max_model_calls``, ``max_tool_calls``,
``max_turn_s``), G92 (``OutputValidationError``: no answer parsed to the
``output_type`` within ``max_output_retries``; its error names paths, never
the draft, G43). After either the session continues from its last answer.

Why a module of their own: both end a turn that ran as it should and met a
bound its agent set, so a caller handles them alike (raise the bound, or
continue); the root module keeps the tree.
"""

from __future__ import annotations

from ._errors import HelmlogError


class TurnLimitError(HelmlogError):
    """A turn reached one of its agent's limits and stopped (issue 12 item 1).

    ``limit`` names it (``"max_model_calls"``, ``"max_tool_calls"``,
    ``"max_turn_s"``) and ``value`` is its setting. The turn is recorded as
    ``error.fatal`` with this code; the session stays continuable from its
    last conversation, as after any failed turn. Not retryable as is: the
    same turn would reach the same limit.
    """

    code = "ERR_TURN_LIMIT"

    def __init__(self, *, limit: str, value: float) -> None:
        self.limit = limit
        self.value = value
        super().__init__(
            f"the turn reached its agent's limit {limit}={value:g} and stopped; "
            "the session continues from its last answer (raise the limit with "
            f"Agent.create(..., {limit}=...))"
        )


class OutputValidationError(HelmlogError):
    """The model's answer failed the agent's ``output_type`` after every retry (G92).

    ``output_type`` names the type, ``attempts`` counts the answers that
    failed this turn (``max_output_retries + 1``), ``error`` is the last
    validation error: where and why, never the draft or its values (G43).
    Recorded as ``error.fatal`` with this code; the session stays continuable
    from its last answer, as after any failed turn. Not retryable as is: the
    turn already asked the model again ``max_output_retries`` times.
    """

    code = "ERR_OUTPUT_INVALID"

    def __init__(self, *, output_type: str, attempts: int, error: str) -> None:
        self.output_type = output_type
        self.attempts = attempts
        self.error = error
        super().__init__(
            f"the model's answer failed the output type '{output_type}' "
            f"{attempts} time{'s' if attempts != 1 else ''}; last error: {error}. "
            "The session continues from its last answer (raise "
            "Agent.create(..., max_output_retries=...) to ask again more often)"
        )
