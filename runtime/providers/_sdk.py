"""The one base of the SDK-backed providers: client, endpoint, failures.

Pattern: a template base: the three adapters (``openai_chat``,
         ``openai_responses``, ``anthropic_messages``) name their SDK and path
         and build the request and read the reply; this base holds the client
         (closing it when it made it), names the endpoint, routes ``call`` to a
         streamed or a complete call, and turns the SDK's failures and
         misshapen replies into ``ProviderError`` (``_wire.py``'s helpers).
Role:    runtime layer; nothing outside ``runtime/providers`` subclasses it.

Laws: G91 (a provider failure is a ``ProviderError``), issue 12 item 5 (a
reply the adapter cannot read is a ``ProviderError``; ``_wire.py`` says which
ones are retryable).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any, Self, TypeVar, cast

from .._errors import ProviderError
from ._base import ProviderRequest, Reply, TokenSink
from ._wire import SHAPE_ERRORS, endpoint_of, misshapen, sdk_failure

T = TypeVar("T")


class SdkProvider:
    """An adapter over an SDK client: its lifecycle, ``call``'s routing and failures.

    Use it as an async context manager, or call ``aclose()`` when done, to
    close the HTTP client it created; a client passed in is the caller's to
    close. Subclasses name their SDK (``sdk``, ``sdk_error``) and API
    (``path``, ``api``), build the request (``_params``) and read the reply
    (``_call_complete``, ``_call_streamed``, through ``_create``, ``_shaped``
    and ``_items``).
    """

    sdk: ModuleType  # the SDK module, for ``sdk_failure``
    sdk_error: type[Exception]  # the SDK's base error class
    path: str  # the API's path under the client's base URL
    api: str  # the API's name, in a misshapen reply's error

    def __init__(
        self,
        client: Any,
        *,
        model: str | None = None,
        stream: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        owns_client: bool = False,
    ) -> None:
        self.model = model
        self.stream = stream
        self.endpoint = endpoint_of(client.base_url, self.path)
        self._client = client
        self._extra_body = dict(extra_body) if extra_body else None
        self._owns_client = owns_client

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client, if this provider created it."""
        if self._owns_client:
            await self._client.close()

    async def call(
        self, request: ProviderRequest, on_token: TokenSink | None = None
    ) -> Reply:
        """Make one call (streamed when built with ``stream``)."""
        params = self._params(request)
        if self.stream:
            return await self._call_streamed(params, on_token)
        return await self._call_complete(params)

    async def _create(
        self, create: Callable[..., Awaitable[Any]], **params: Any
    ) -> Any:
        """``create(**params)``, the SDK's failures as ``ProviderError``s."""
        try:
            return await create(**params)
        except (self.sdk_error, json.JSONDecodeError) as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: Exception) -> ProviderError:
        return sdk_failure(self.endpoint, exc, self.sdk)

    def _shaped(self, read: Callable[..., T], *args: Any, what: str = "") -> T:
        """``read(*args)``, a reply of the wrong shape as a ``ProviderError``."""
        try:
            return read(*args)
        except SHAPE_ERRORS as exc:
            raise misshapen(self.endpoint, exc, f"{self.api}{what}") from None

    async def _items(self, stream: Any) -> AsyncGenerator[Any, None]:
        """An SDK stream's items, its read failures as ``ProviderError``s.

        Only the SDK's reads are translated: an error raised by ``on_token``
        or by a reply's assembly is the caller's and propagates as it is.
        """
        iterator = cast(AsyncIterator[Any], stream.__aiter__())
        while True:
            try:
                item = await iterator.__anext__()
            except StopAsyncIteration:
                return
            except json.JSONDecodeError:
                raise ProviderError(
                    f"{self.endpoint} sent a malformed stream event"
                ) from None
            except self.sdk_error as exc:
                raise sdk_failure(self.endpoint, exc, self.sdk) from None
            yield item

    def _params(self, request: ProviderRequest) -> dict[str, Any]:
        raise NotImplementedError

    async def _call_complete(self, params: dict[str, Any]) -> Reply:
        raise NotImplementedError

    async def _call_streamed(
        self, params: dict[str, Any], on_token: TokenSink | None
    ) -> Reply:
        raise NotImplementedError
