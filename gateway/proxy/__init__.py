"""helmlog.gateway.proxy — the MCP governance proxy (section P of the laws).

``McpProxy`` puts onion middleware, hidden and pass-through routing, helmlog
governance links and one keyed audit chain in front of any MCP server; it
serves clients over stdio or Streamable HTTP. The names imported here are
for ``helmlog.gateway`` to re-export: that is their one public namespace.

Layout: ``_layers`` (onion, context, reasons), ``_calls`` (a call's values),
``_observers``, ``_audit`` (the ledger), ``_governance`` (+ ``_asks``: an
ask's pause, task and decision), ``_accounting``,
``_routing`` (the one tool route, on models or on JSON), ``_session`` (an SDK
``Server`` per session), ``_proxy``; HTTP ``_http`` (+ ``_resume``),
``_uvicorn``; stdio is the SDK's.
"""

from ._audit import (
    ProxyAudit as ProxyAudit,
)
from ._audit import (
    open_payload as open_payload,
)
from ._audit import (
    verify_manifest as verify_manifest,
)
from ._calls import ToolCallTelemetry as ToolCallTelemetry
from ._layers import (
    ProxyContext as ProxyContext,
)
from ._layers import (
    RejectionReason as RejectionReason,
)
from ._layers import (
    compose as compose,
)
from ._layers import (
    mark_pass_through_observer as mark_pass_through_observer,
)
from ._proxy import McpProxy as McpProxy
