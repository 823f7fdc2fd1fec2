"""What every HTTP provider shares: naming the endpoint, translating failures.

Pattern: small pure helpers behind the adapters (``openai_chat``,
         ``openai_responses``, ``anthropic_messages``).
Role:    runtime layer; each adapter calls its SDK, then these to turn what
         went wrong into one ``ProviderError`` and what came back into the
         port's types.
Emits:   nothing.

Laws: G91 (a provider failure is a ``ProviderError``, so the loop reports
``ERR_PROVIDER``), issue 12 item 5 (any reply a provider cannot parse — a 200
with a non-JSON body, an HTML page, JSON of another shape, a stream that is
not an event stream — is a ``ProviderError``; retryable when the server may
answer properly next time).

Why the SDK module is passed in rather than each adapter translating alone:
``openai`` and ``anthropic`` draw the same tree (``APITimeoutError``,
``APIConnectionError``, ``APIStatusError`` with ``status_code``), so one
translation keeps the texts and the retry rules alike for all of them.

Why one ``SdkProvider`` base: the three adapters hold an SDK client they may
own, close it the same way and route ``call`` to a streamed or a complete
call alike; only the request they build and the reply they read differ.

Why an unparsable 200 is retryable and a reply of the wrong shape is not: a
proxy's or load balancer's error page (HTML, plain text) is passing trouble,
while well-formed JSON that is not this API's reply says the endpoint speaks
something else, and asking again will not change that.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from types import ModuleType
from typing import Any, Self, cast

from helmlog.events import ProviderError

from ._base import ProviderRequest, Reply, TokenSink

# Invariant: a 4xx other than these says the request itself is wrong, and
# sending it again cannot help.
RETRYABLE_CLIENT_STATUSES = frozenset({408, 409, 425, 429})

# The exceptions a reply of an unexpected shape raises while it is read.
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)


def endpoint_of(base_url: object, path: str) -> str:
    """The URL a request goes to, without userinfo or query (they may hold keys)."""
    parts = urllib.parse.urlsplit(str(base_url))
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    full = parts.path.rstrip("/") + path
    return urllib.parse.urlunsplit((parts.scheme, host, full, "", ""))


def sdk_failure(endpoint: str, exc: Exception, sdk: ModuleType) -> ProviderError:
    """One SDK exception as a ``ProviderError`` naming the endpoint, not the text."""
    kind = type(exc).__name__
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderError(f"{endpoint} timed out ({kind})")
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderError(f"could not reach {endpoint} ({kind})")
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        code = getattr(exc, "code", None)
        detail = f", code {code}" if isinstance(code, str) else ""
        error = ProviderError(f"{endpoint} answered HTTP {status} ({kind}{detail})")
        if 400 <= status < 500 and status not in RETRYABLE_CLIENT_STATUSES:
            error.retryable = False
        return error
    if isinstance(exc, json.JSONDecodeError):
        return unparsable(endpoint, "a body that is not JSON", retryable=True)
    return ProviderError(f"{endpoint} failed ({kind})")


def unparsable(endpoint: str, what: str, *, retryable: bool) -> ProviderError:
    """A reply the adapter cannot read (issue 12 item 5)."""
    error = ProviderError(f"{endpoint} sent {what}, which is not a reply it can read")
    error.retryable = retryable
    return error


def not_a_reply(endpoint: str, value: object, expected: type) -> ProviderError:
    """What the SDK built is not ``expected``: non-JSON text, or another shape."""
    if isinstance(value, str):
        return unparsable(endpoint, "a body that is not JSON", retryable=True)
    return unparsable(
        endpoint,
        f"JSON that is not a {expected.__name__} (a {type(value).__name__})",
        retryable=False,
    )


def misshapen(endpoint: str, exc: Exception, api: str) -> ProviderError:
    """A reply whose fields are not what ``api`` sends."""
    return unparsable(
        endpoint,
        f"a {api} reply of the wrong shape ({type(exc).__name__})",
        retryable=False,
    )


def require_event_stream(endpoint: str, response: Any) -> None:
    """A streamed call must be answered with ``text/event-stream``.

    Raises:
        ProviderError: the body is something else (an HTML page, JSON); an
            SDK would read it as a stream of no events, an empty reply.
    """
    content_type = str(response.headers.get("content-type", ""))
    if not content_type.startswith("text/event-stream"):
        shown = content_type.split(";")[0] or "no content type"
        raise unparsable(endpoint, f"{shown} to a streamed call", retryable=True)


def parse_args(raw: str | None) -> Any:
    """A tool call's JSON arguments; broken JSON is passed on raw (see the adapters)."""
    if raw is None or not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def call_id(given: str | None) -> str:
    """The call's id, or a fresh one: some local servers omit ids."""
    return given or f"call_{uuid.uuid4().hex[:24]}"


def model_of(reported: object, sent: str) -> str:
    """The model the server says it used, else the one that was sent."""
    return reported if isinstance(reported, str) and reported else sent


def api_key(factory: str, given: str | None, env: str, base_url: str | None) -> str:
    """The key an adapter's factory builds its client with.

    ``given``, else ``$env``; a local server (``base_url`` set) needs none and
    gets a placeholder.

    Raises:
        ProviderError: none found and no ``base_url`` (not retryable).
    """
    key = given if given is not None else os.environ.get(env)
    if key is None and base_url is not None:
        key = "not-needed"
    if key is None:
        error = ProviderError(
            f"{factory}() found no API key: pass api_key= or set {env}"
        )
        error.retryable = False
        raise error
    return key


def client_for(
    factory: str,
    client: Any,
    base_url: str | None,
    given_key: str | None,
    env: str,
    build: Callable[[str], Any],
) -> tuple[Any, bool]:
    """The SDK client a factory's provider runs on, and whether it owns it.

    A ``client`` passed in is the caller's to close, and excludes
    ``base_url`` and ``api_key``; otherwise ``build`` makes one with the key
    ``api_key`` finds.

    Raises:
        ValueError: ``client`` together with ``base_url`` or ``api_key``.
        ProviderError: no key given or found and no ``base_url``.
    """
    if client is not None:
        if base_url is not None or given_key is not None:
            raise ValueError(
                f"{factory}() takes client= or base_url=/api_key=, not both"
            )
        return client, False
    return build(api_key(factory, given_key, env, base_url)), True


class SdkProvider:
    """An adapter over an SDK client: its lifecycle and ``call``'s routing.

    Use it as an async context manager, or call ``aclose()`` when done, to
    close the HTTP client it created; a client passed in is the caller's to
    close. Subclasses name their SDK (``sdk``, ``sdk_error``), build the
    request (``_params``) and read the reply (``_call_complete``,
    ``_call_streamed``, reading a stream through ``_items``).
    """

    sdk: ModuleType  # the SDK module, for ``sdk_failure``
    sdk_error: type[Exception]  # the SDK's base error class

    def __init__(
        self,
        client: Any,
        endpoint: str,
        *,
        model: str | None,
        stream: bool,
        extra_body: Mapping[str, Any] | None,
        owns_client: bool,
    ) -> None:
        self.model = model
        self.stream = stream
        self.endpoint = endpoint
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
