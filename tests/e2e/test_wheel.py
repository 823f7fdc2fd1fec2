"""A built wheel imports the same names as the editable install (ARCHITECTURE.md).

The root folders install as ``helmlog.events``, ``helmlog.runtime``, ... by a
package-dir mapping; a mapping that forgets a sub-package works in the
editable install and breaks only for users. This builds the wheel, installs it
into a fresh venv and imports the face and every layer from there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import helmlog
import helmlog.events
import helmlog.runtime
import helmlog.runtime.providers
import helmlog_evidence

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, helmlog, helmlog.events, helmlog.runtime, helmlog.runtime.providers
import helmlog.sinks, helmlog.actors, helmlog.gateway, helmlog.cli
import helmlog_evidence
print(json.dumps({
    "evidence": sorted(helmlog_evidence.__all__),
    "face": sorted(helmlog.__all__),
    "events": sorted(helmlog.events.__all__),
    "runtime": sorted(helmlog.runtime.__all__),
    "providers": sorted(helmlog.runtime.providers.__all__),
    "file": helmlog.events.__file__,
}))
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_wheel_imports_the_same_names_as_the_editable_install(tmp_path: Path) -> None:
    """Build the wheel, install it in a fresh venv, compare the public names."""
    import json

    uv = shutil.which("uv")
    assert uv is not None, "uv is needed to build the wheel"
    dist = tmp_path / "dist"
    subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("helmlog-*.whl")
    venv = tmp_path / "venv"
    subprocess.run(
        [uv, "venv", "--python", sys.executable, str(venv)],
        check=True,
        capture_output=True,
    )
    python = venv / "bin" / "python"
    # The [cluster] extra brings Ray, which helmlog.actors needs.
    subprocess.run(
        [uv, "pip", "install", "--python", str(python), f"{wheel}[cluster]"],
        check=True,
        capture_output=True,
    )
    out = subprocess.run(
        [str(python), "-c", PROBE], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert str(venv) in got["file"], "the probe imported the repo, not the wheel"
    assert sorted(helmlog.__all__) == got["face"]
    assert sorted(helmlog.events.__all__) == got["events"]
    assert sorted(helmlog.runtime.__all__) == got["runtime"]
    assert sorted(helmlog.runtime.providers.__all__) == got["providers"]
    # The standalone verifier ships in the same wheel (issue 30 item 4).
    assert sorted(helmlog_evidence.__all__) == got["evidence"]
