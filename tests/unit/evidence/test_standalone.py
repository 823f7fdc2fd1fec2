"""The verifier stands alone: no helmlog, Redis or Ray, and a command line of its own.

Pattern: a real subprocess imports ``helmlog_evidence`` and verifies a bundle,
         then reports which of helmlog, redis, ray it loaded (none); a static
         walk of ``evidence/`` allows only the stdlib, msgspec, cryptography;
         ``python -m helmlog_evidence verify`` runs as an auditor runs it.
Role:    unit tests for the package boundary and ``evidence/__main__.py``.

Laws: issue 30 item 4 (a small module with no dependency on the runtime,
Redis or Ray; exits non-zero naming the first failure).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import msgspec

from helmlog_evidence import encode_bundle
from tests.unit.evidence.test_bundle import KEY, logged

ROOT = Path(__file__).resolve().parents[3]
ALLOWED_THIRD_PARTY = {"msgspec", "cryptography"}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-P", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)


def _verify(bundle: Path, key: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run(
        "-m", "helmlog_evidence", "verify", str(bundle), "--public-key", key, cwd=cwd
    )


def test_verifying_in_a_fresh_process_loads_no_helmlog_redis_or_ray(
    tmp_path: Path,
) -> None:
    """A process that imports the verifier and checks a bundle has not loaded
    ``helmlog``, ``redis`` or ``ray`` (issue 30 item 4)."""
    bundle, _log, _recs = logged()
    (tmp_path / "b.json").write_bytes(encode_bundle(bundle))
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "import helmlog_evidence as e\n"
        "v = e.verify(Path('b.json').read_bytes(), [sys.argv[1]])\n"
        "loaded = sorted(m for m in ('helmlog', 'redis', 'ray') if m in sys.modules)\n"
        "print(json.dumps({'ok': v.ok, 'loaded': loaded}))\n"
    )
    out = _run("-c", script, KEY.public.text(), cwd=tmp_path)
    assert 0 == out.returncode, out.stderr
    assert {"ok": True, "loaded": []} == json.loads(out.stdout)


def test_the_verifier_imports_only_the_stdlib_msgspec_and_cryptography() -> None:
    """Every import in ``evidence/`` is relative, the stdlib, msgspec or
    cryptography (static walk, lazy imports included)."""
    bad: list[str] = []
    for path in sorted((ROOT / "evidence").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names | ALLOWED_THIRD_PARTY:
                    bad.append(f"{path.name}: {name}")
    assert [] == bad


def test_the_auditors_command_line_exits_by_the_verdict(tmp_path: Path) -> None:
    """``python -m helmlog_evidence verify``: 0 and ``verified`` for a good
    bundle, 1 naming the first failure for a tampered one, 2 for a bad key."""
    bundle, _log, _recs = logged()
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_bytes(encode_bundle(bundle))
    bad.write_bytes(
        encode_bundle(msgspec.structs.replace(bundle, records=bundle.records[:-1]))
    )
    vkey = tmp_path / "helmlog.vkey"
    vkey.write_text(KEY.public.text() + "\n")
    ok = _verify(good, str(vkey), tmp_path)
    assert (0, "verified: session s-1") == (ok.returncode, ok.stdout[:21])
    failed = _verify(bad, str(vkey), tmp_path)
    assert 1 == failed.returncode
    assert failed.stdout.startswith("FAILED truncated at seq 6:"), failed.stdout
    junk = _verify(good, "junk", tmp_path)
    assert 2 == junk.returncode and "malformed key" in junk.stderr
