"""helmlog.gateway — network edges: MCP serve, MCP client, the MCP proxy.

Sits on top of every other layer (ARCHITECTURE.md). ``mcp_serve`` serves
governed tools over MCP with their own chain (section S, S1–S6 of the laws);
``mcp_client`` connects to an MCP server and hands back ``Tool`` objects
stamped with the client's name as their source (S7, S8). ``McpProxy`` puts
onion middleware, hidden and pass-through routing, helmlog governance links
and one keyed audit chain in front of any MCP server (section P); an
``HttpUpstream`` is its upstream URL with headers, credentials (a bearer,
OAuth client credentials) and TLS settings (P26).
"""

from ._client import mcp_client
from ._serve import mcp_serve
from .proxy import (
    McpProxy,
    ProxyAudit,
    ProxyContext,
    RejectionReason,
    ToolCallTelemetry,
    compose,
    mark_pass_through_observer,
    open_payload,
    verify_manifest,
)
from .upstream import (
    HttpUpstream,
    OAuthClientCredentials,
    UpstreamConfigError,
    UpstreamError,
)

__all__ = [
    "HttpUpstream",
    "McpProxy",
    "OAuthClientCredentials",
    "ProxyAudit",
    "ProxyContext",
    "RejectionReason",
    "ToolCallTelemetry",
    "UpstreamConfigError",
    "UpstreamError",
    "compose",
    "mark_pass_through_observer",
    "mcp_client",
    "mcp_serve",
    "open_payload",
    "verify_manifest",
]
