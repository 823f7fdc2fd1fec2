"""helmlog.integrations — helmlog's governance inside other agent frameworks.

Pattern: one module per framework (``langchain``, ``openai_agents``,
         ``pydantic_ai``), each an optional extra (``helmlog[langchain]``,
         ``helmlog[openai-agents]``, ``helmlog[pydantic-ai]``), over one core
         that drives the runtime's own moments for a loop another framework runs
         (``Governance``, over ``helmlog.runtime.lowlevel.Steering``).
Role:    the integrations layer, beside ``gateway``: built on ``runtime``'s
         public names (``helmlog.runtime.lowlevel``) and ``events``; never on
         each other's insides. Importing this package imports no framework.

Laws: issue 27 (one record: a governed framework session is an ordinary
helmlog session, its rows the rows the native loop files for the same decisions).
"""

from __future__ import annotations

from ._governance import Governance, GovernanceError

__all__ = ["Governance", "GovernanceError"]
