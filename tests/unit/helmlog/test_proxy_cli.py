"""``helmlog mcp-proxy``'s options: what ``build_proxy`` makes of a policy.

Role:    unit tests of helmlog/_proxy_cli.py (the e2e runs are in
         tests/e2e/test_cli_mcp_proxy.py).

Laws: P18 (a policy's ``drain_s`` bounds how long an ending session waits for
its calls in flight, and ``--store`` must not reset it), P20 (the audit goes
to the store ``--store`` names when the policy names none).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helmlog._proxy_cli import build_proxy


def test_p18_store_keeps_the_policys_audit_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P18/P20: --store gives the policy's audit a store and keeps its key id
    and drain_s (it used to rebuild the audit from secret and key id only)."""
    (tmp_path / "cli_policy.py").write_text(
        "from helmlog.gateway import ProxyAudit\n"
        "POLICY = {'audit': ProxyAudit(b'k' * 32, 'ops-key', drain_s=1.5)}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        proxy = build_proxy(
            f"{sys.executable} -c pass", None, "cli_policy:POLICY", "memory://"
        )
        ledger = proxy.ledger
        assert ledger is not None and ledger.audit is not None
        assert ("ops-key", 1.5, True) == (
            ledger.audit.key_id,
            ledger.audit.drain_s,
            ledger.audit.store is not None,
        )
    finally:
        sys.modules.pop("cli_policy", None)
