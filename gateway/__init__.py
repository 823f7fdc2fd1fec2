"""helmlog.gateway — network edges: MCP serve and client; the proxy to come.

Sits on top of every other layer (ARCHITECTURE.md). ``mcp_serve`` serves
governed tools over MCP with their own chain (section S, S1–S6 of the laws);
``mcp_client`` connects to an MCP server and hands back ``Tool`` objects
stamped with the client's name as their source (S7, S8). ``McpProxy`` and the
HTTP app (section P) land with their own issues.
"""

from ._client import mcp_client
from ._serve import mcp_serve

__all__ = ["mcp_client", "mcp_serve"]
