"""The cluster's errors: what a cluster of session hosts raises.

Role:    actors layer; leaves of the tree rooted at ``HelmlogError``
         (``helmlog.events``) for what only a cluster can fail at: a
         configuration its hosts do not share, a host that is gone, a host
         that raised something that is not helmlog's.
Laws: R8, R21, R22 (placement, residency, failover), R27 (leases).

Why here and not in ``events``: they name the cluster, which ``events`` must
not know; nothing imports Ray to use them (the module imports only events).
"""

from __future__ import annotations

from helmlog.events import HelmlogError


class ClusterError(HelmlogError):
    """A cluster of session hosts could not serve a call (R8, R21, R22)."""

    code = "ERR_CLUSTER"


class ClusterConfigError(ClusterError, ValueError):
    """A cluster was asked for something its hosts are not, or cannot use.

    ``what`` names the setting (``"store_url"``, ``"n_hosts"``, ``"factory"``,
    ``"chain_key"``); ``existing`` and ``requested`` are what the running hosts
    have and what this client asked for (a store URL without credentials).
    """

    code = "ERR_CLUSTER_CONFIG"

    def __init__(
        self, *, name: str, what: str, existing: str, requested: str, hint: str = ""
    ) -> None:
        self.name = name
        self.what = what
        self.existing = existing
        self.requested = requested
        text = (
            f"cluster '{name}': {what} is {existing}, not {requested}"
            if existing
            else f"cluster '{name}': {what} {requested}"
        )
        super().__init__(f"{text}; {hint}" if hint else text)


class HostUnavailableError(ClusterError):
    """The host of a session died, is restarting or stopped answering; the
    call may not have run.

    The session's turn, if one started, is finished by the restarted host's
    failover (R22) or by the host that takes over its lease (R27); retry a
    read, or continue from the session's checkpoint.
    """

    code = "ERR_HOST_UNAVAILABLE"
    retryable = True

    def __init__(self, *, session_id: str, host: int, cause: str) -> None:
        self.session_id = session_id
        self.host = host
        self.cause = cause
        super().__init__(
            f"the host of session '{session_id}' (host {host}) is unavailable: "
            f"{cause}; a turn it started is finished when the host restarts "
            "or another host takes over its lease"
        )


class HostError(ClusterError):
    """A host raised an error that is not one of helmlog's (its type is named)."""

    code = "ERR_HOST"

    def __init__(self, *, session_id: str, error_type: str, detail: str) -> None:
        self.session_id = session_id
        self.error_type = error_type
        self.detail = detail
        super().__init__(
            f"the host of session '{session_id}' raised {error_type}: {detail}"
        )
