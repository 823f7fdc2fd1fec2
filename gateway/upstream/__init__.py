"""helmlog.gateway.upstream — the MCP client side of the proxy: its one upstream.

``Upstream`` is the proxy's one connection to the MCP server it stands in
front of (a command over stdio, a URL over Streamable HTTP, or a server in
this process), with a raw ``tools/call`` lane beside the SDK session.
``UpstreamError`` is what a start that failed raises (P25); its public
namespace is ``helmlog.gateway``.

Layout: ``_upstream`` (the connection), ``_raw`` (raw calls over SDK
streams), ``_stdio`` (a child's pipes), ``_http`` and ``_http_raw`` (the
Streamable HTTP link and its raw posts), ``_http_wire`` (keep-alive HTTP/1.1).
"""

from ._upstream import Upstream as Upstream
from ._upstream import UpstreamError as UpstreamError
