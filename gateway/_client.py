"""Connect to an MCP server and hand its tools to an agent, stamped with provenance.

Pattern: an async context manager over the SDK's ``Client``, with one of three
         transports (Streamable HTTP, stdio, or the served tools in process).
Role:    gateway layer; ``mcp_client(name, url=... | command=... | server=...)``
         yields ``Tool`` objects whose ``execute`` calls the remote tool.
Emits:   nothing; the agent that calls the tools records what happens.

Laws: S7 (``source`` is the client's ``name``, G78; ``url=`` may be an
``HttpUpstream``, P26), S8 (a tool error or a transport failure is raised,
naming tool and server, so after-tool sees ``error=True``, G18), issue 10
item 4 (``tool_call_id`` in ``_meta``).

Why the remote error is raised rather than returned: to the agent a remote
tool that failed is a tool that raised; returned text would read as success.
Why the SDK's ``Client`` in ``auto`` mode: it lands on 2026-07-28 where the
server speaks it, else on the ``initialize`` handshake (issue 26). Why an
``HttpUpstream`` builds the one ``httpx2`` client: its headers, credentials
and TLS/proxy settings reach the server as they reach the proxy's upstream.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, cast

import mcp.types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from helmlog.runtime import Tool
from helmlog.runtime.lowlevel import running_tool

from ._serve import ServedTools
from .upstream import HttpUpstream, UpstreamError
from .upstream._credentials import shown_url

CALL_ID_META = "helmlog/tool_call_id"
"""The ``_meta`` key carrying the calling agent's ``tool_call_id``."""


class McpToolError(Exception):
    """A remote tool failed; the message is exactly what S8 says the walk sees."""


def returned_error_text(tool: str, server: str, text: str) -> str:
    """S8: a server's tool error, as the agent's after-tool walk reads it."""
    return f"MCP tool '{tool}' (server '{server}') returned an error: {text}"


def failed_text(tool: str, server: str, message: str) -> str:
    """S8: a transport failure, as the agent's after-tool walk reads it."""
    return f"MCP tool '{tool}' (server '{server}') failed: {message}"


def _block_text(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    return str(block.model_dump_json(exclude_none=True))


def _cause(exc: BaseException) -> str:
    """The first leaf of a task group's exception, as one line."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _cause(exc.exceptions[0])
    return str(exc) or type(exc).__name__


def _content_text(result: types.CallToolResult) -> str:
    return "\n".join(_block_text(block) for block in result.content)


class McpClient:
    """One connection to an MCP server; ``tools`` once connected.

    Use ``async with mcp_client(...) as tools:``, or ``await connect()`` and
    ``await close()`` from the same task.
    """

    def __init__(
        self,
        name: str = "mcp",
        *,
        url: str | HttpUpstream | None = None,
        command: str | None = None,
        args: Sequence[str] = (),
        server: ServedTools | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("mcp_client needs a non-empty name")
        given = [x for x in (url, command, server) if x is not None]
        if len(given) != 1:
            raise ValueError(
                "mcp_client needs exactly one of url=, command= or server="
            )
        if url is not None and not isinstance(url, (str, HttpUpstream)):
            raise ValueError(
                "mcp_client's url= is a Streamable HTTP URL or an HttpUpstream "
                f"(got {type(url).__name__})"
            )
        self.name = name
        self.url = url
        self.command = command
        self.args = tuple(args)
        self.served = server
        self.tools: list[Tool] = []
        self._client: Client | None = None

    def __repr__(self) -> str:
        return f"McpClient(name={self.name!r})"

    async def connect(self) -> list[Tool]:
        """Open the transport, negotiate the protocol, list the tools (S7).

        Raises:
            UpstreamError: the server could not be reached or initialized
                (refused, a 401/403, a TLS failure); the message names the
                client and the server, never a credential (P26).
        """
        if self._client is not None:
            raise RuntimeError(f"mcp_client '{self.name}' is already connected")
        client = Client(self._target(), cache=None)
        try:
            await client.__aenter__()
        except Exception as exc:
            raise UpstreamError(self._shown(), _cause(exc)) from exc
        try:
            listed = await client.list_tools()
        except BaseException as exc:
            await client.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._client = client
        self.tools = [self._tool(t) for t in listed.tools]
        return list(self.tools)

    async def close(self) -> None:
        """Close the session and its transport; the tools then fail (S8)."""
        client, self._client = self._client, None
        if client is not None:
            await client.__aexit__(None, None, None)

    async def __aenter__(self) -> list[Tool]:
        return await self.connect()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _shown(self) -> str:
        """The server, as an error names it: no user info, query or secret."""
        if self.served is not None:
            where = f"{self.served.name} (in memory)"
        elif self.command is not None:
            where = self.command
        else:
            assert self.url is not None
            url = self.url.url if isinstance(self.url, HttpUpstream) else self.url
            where = shown_url(url)
        return f"'{self.name}' at {where}"

    def _target(self) -> Any:
        if self.served is not None:
            return self.served.memory_streams()
        if self.command is not None:
            return StdioServerParameters(command=self.command, args=list(self.args))
        assert self.url is not None
        if isinstance(self.url, HttpUpstream):
            return _over(self.url)
        return self.url

    def _tool(self, remote: types.Tool) -> Tool:
        tool_name = remote.name

        async def execute(**kwargs: Any) -> Any:
            return await self.call(tool_name, kwargs)

        return Tool(
            tool_name,
            remote.description or "",
            dict(remote.input_schema),
            execute,
            self.name,
            output_schema=remote.output_schema,
        )

    async def call(self, tool_name: str, arguments: dict[str, Any]) -> Any:
        """Call one remote tool; raise ``McpToolError`` with S8's text on failure."""
        client = self._client
        if client is None:
            raise McpToolError(
                failed_text(tool_name, self.name, "the client is not connected")
            )
        # Correlation (issue 10 item 4): the agent's call id rides in ``_meta``,
        # so a proxy's audit of this call names the agent's call.
        call_id = running_tool().get()
        meta = (
            cast("types.RequestParamsMeta", {CALL_ID_META: call_id})
            if call_id is not None
            else None
        )
        try:
            result = await client.call_tool(tool_name, arguments, meta=meta)
        except Exception as exc:
            raise McpToolError(
                failed_text(tool_name, self.name, str(exc) or type(exc).__name__)
            ) from exc
        if result.is_error:
            raise McpToolError(
                returned_error_text(tool_name, self.name, _content_text(result))
            )
        if result.structured_content is not None and not result.content:
            return result.structured_content
        return _content_text(result)


@contextlib.asynccontextmanager
async def _over(upstream: HttpUpstream) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's Streamable HTTP transport on ``upstream``'s one client (P26)."""
    async with (
        upstream.client() as http,
        streamable_http_client(upstream.url, http_client=http) as streams,
    ):
        yield streams


def mcp_client(
    name: str = "mcp",
    *,
    url: str | HttpUpstream | None = None,
    command: str | None = None,
    args: Sequence[str] = (),
    server: ServedTools | None = None,
) -> McpClient:
    """Connect to an MCP server; its tools come back with ``source=name`` (S7).

    Exactly one of ``url`` (Streamable HTTP: a URL, or an ``HttpUpstream``
    for a server that needs headers, a bearer, OAuth or TLS settings),
    ``command``/``args`` (stdio) or ``server`` (an ``mcp_serve`` result, in
    memory) is given.

    Raises:
        ValueError: not exactly one transport, or ``url`` of another type.
    """
    return McpClient(name, url=url, command=command, args=args, server=server)
