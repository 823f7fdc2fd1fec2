"""helmlog.gateway — network edges: HTTP API, MCP serve/client, the MCP proxy.

Sits on top of every other layer (ARCHITECTURE.md). Nothing is exported yet:
``mcp_serve``, ``mcp_client``, ``McpProxy`` and the HTTP app (sections S and P
of the laws) land with their own issues.
"""

__all__: list[str] = []
