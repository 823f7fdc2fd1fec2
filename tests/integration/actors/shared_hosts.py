"""A second client process of a running cluster (run by test_cluster_scale.py).

Usage: ``python -m tests.integration.actors.shared_hosts ADDRESS STORE_URL NAME CP``:
joins the Ray at ADDRESS, reaches the named cluster's hosts with
``Cluster.connect``, continues the session whose checkpoint JSON is in the
file CP, and prints one JSON line: the answer, the session id, the host count
and the sessions each host holds.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from helmlog.actors import Cluster

from .cluster_agents import desk_agent


async def main(address: str, store_url: str, name: str, cp_path: str) -> None:
    cluster = Cluster.connect(address, store_url, name=name)
    try:
        agent = cluster.agent(desk_agent)
        checkpoint = Path(cp_path).read_text()
        answer = await agent.run("and again", continue_from=checkpoint)
        print(
            json.dumps(
                {
                    "answer": answer,
                    "session_id": agent.session_id,
                    "n_hosts": cluster.n_hosts,
                    "hosted": await cluster.hosted(),
                }
            )
        )
    finally:
        await cluster.shutdown()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
