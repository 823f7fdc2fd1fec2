"""helmlog.gateway.upstream — the MCP client side of the proxy: its one upstream.

``Upstream`` is the proxy's one connection to the MCP server it stands in
front of (a command over stdio, a URL over Streamable HTTP, or a server in
this process), on the SDK's ``ClientSession``. ``UpstreamError`` is what a start
that failed raises (P25); its public namespace is ``helmlog.gateway``.

Layout: ``_upstream`` (the connection), ``_stdio`` (the SDK's stdio client),
``_http`` (the SDK's Streamable HTTP client on one ``httpx2`` client, made by
an ``HttpClientFactory``), ``..fast.upstream`` (the fast path: a plain
``tools/call`` as one raw POST on that same client), ``_credentials``
(``HttpUpstream``: the headers, credentials, TLS and proxy settings that
factory is built from, P26).
"""

from ._credentials import HttpUpstream as HttpUpstream
from ._credentials import OAuthClientCredentials as OAuthClientCredentials
from ._credentials import UpstreamConfigError as UpstreamConfigError
from ._http import HttpClientFactory as HttpClientFactory
from ._upstream import CALL_ERA as CALL_ERA
from ._upstream import Upstream as Upstream
from ._upstream import UpstreamError as UpstreamError
