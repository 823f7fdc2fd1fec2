"""What a cluster's parts are called and known by, the same in every process.

Pattern: stable identities computed from values, never from a process's
         memory: an actor's Ray name from its cluster's name, a factory's key
         from its ``module:qualname``, a chain key's fingerprint from its hash.
Role:    actors layer; the ``Cluster`` names its actors with these, a
         ``SessionHost`` reports them in ``HostInfo``, a joining client
         compares them.

Laws: R12 (a factory that cannot be shipped is refused before any host
starts), R21, R22.
Why ``module:qualname``: two processes import one function as two objects. A
chain key travels as a digest; a store URL loses its credentials in messages
shown to people.
"""

from __future__ import annotations

import functools
import hashlib
import pickle
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from ._errors import ClusterConfigError

NAMESPACE: Final = "helmlog"
DEFAULT_NAME: Final = "desk"


def host_name(cluster: str, index: int) -> str:
    """The Ray actor name of one host of a cluster (in namespace ``helmlog``)."""
    return f"{cluster}.host.{index}"


def factory_key(factory: Any) -> str:
    """``module:qualname`` of an agent factory (a partial's adds its arguments'
    digest); refuses what a host in another process could not rebuild."""
    func = factory.func if isinstance(factory, functools.partial) else factory
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if not callable(factory) or module is None or qualname is None:
        raise _factory_error(factory, "is not a function")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise _factory_error(factory, "is a lambda or a function defined inside one")
    try:
        _pickle(factory)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise _factory_error(factory, f"cannot be pickled ({exc})") from exc
    key = f"{module}:{qualname}"
    if isinstance(factory, functools.partial):
        bound = _pickle((factory.args, sorted(factory.keywords.items())))
        key += f"[{hashlib.sha256(bound).hexdigest()[:12]}]"
    return key


def _pickle(value: Any) -> bytes:
    """What Ray will ship: ``cloudpickle`` (it pickles partials and mains)."""
    from ray import cloudpickle

    data: bytes = cloudpickle.dumps(value)  # type: ignore[no-untyped-call]
    return data


def _factory_error(factory: Any, why: str) -> ClusterConfigError:
    return ClusterConfigError(
        name="",
        what="the agent factory",
        existing="",
        requested=f"{factory!r} {why}",
        hint="hosts run it in other processes: pass a module-level function "
        "(or a functools.partial of one) taking the store",
    )


def key_digest(chain_key: bytes | None) -> str:
    """A chain key's fingerprint, so clients compare keys without sending them back."""
    return hashlib.sha256(chain_key).hexdigest()[:16] if chain_key else ""


def public_store_url(url: str) -> str:
    """A store URL without its credentials (for error messages)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
