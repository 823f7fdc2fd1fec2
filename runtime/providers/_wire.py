"""What every HTTP provider shares: naming the endpoint, translating failures.

Pattern: small pure helpers behind ``SdkProvider`` (``_sdk.py``) and its
         adapters (``openai_chat``, ``openai_responses``, ``anthropic_messages``).
Role:    runtime layer; turn what went wrong into one ``ProviderError`` and
         what came back into the port's types.

Laws: G91 (a provider failure is a ``ProviderError``: ``ERR_PROVIDER``),
issue 12 item 5 (a reply a provider cannot parse is a ``ProviderError``).
Why one translation for both SDKs: ``openai`` and ``anthropic`` draw the same
error tree, so texts and retry rules stay alike. Why an unparsable 200 is
retryable and a wrong shape is not: an HTML error page is passing trouble;
well-formed JSON of another API will not change on a retry.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._errors import ProviderError

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
