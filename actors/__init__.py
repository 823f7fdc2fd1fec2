"""helmlog.actors — the Ray layer: session hosts and the cluster client.

Composes ``runtime`` + ``events`` + ``sinks`` (ARCHITECTURE.md). A fixed
number of ``SessionHost`` actors — named, detached, shared by every client
process of one cluster — host many sessions each, placed by a stable hash of
the session id (R8), keep a bounded number resident (R21) and finish their
shard's open turns when they (re)start (R22); the ``Cluster`` client gives
agents with the in-process ``Agent``'s shape whose sessions run there, in
batched calls, recording the same stream as they would in process (R17).
``Cluster.policy`` hosts a rule in a ``PolicyActor`` whose state every
session shares; ``Cluster.isolated`` runs tools in a ``ToolExecutor``.
"""

from ._cluster import Cluster
from ._cluster_agent import ClusterAgent
from ._errors import ClusterConfigError, ClusterError, HostError, HostUnavailableError
from ._host import AgentFactory, SessionHost
from ._placement import host_for
from ._policy import PolicyActor, PolicyLink, ToolExecutor

__all__ = [
    "AgentFactory",
    "Cluster",
    "ClusterAgent",
    "ClusterConfigError",
    "ClusterError",
    "HostError",
    "HostUnavailableError",
    "PolicyActor",
    "PolicyLink",
    "SessionHost",
    "ToolExecutor",
    "host_for",
]
