"""Install stays two commands: without a C compiler the package still builds and runs, on the
pure-Python path, and says so."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_without_a_compiler_the_package_builds_and_runs_pure(tmp_path: Path) -> None:
    source = tmp_path / "src"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(source)], check=True, timeout=60)
    env = {**os.environ, "CC": "/bin/false"}  # every compile fails, as with no gcc at all
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp_path / "wheels"),
            str(source),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "wheels").glob("rwrouter-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "rwrouter/routing/scan.py" in names
    assert not [n for n in names if n.endswith(".so")]
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        timeout=120,
    )
    code = (
        "import rwrouter.wire.accelerator as s, rwrouter.metrics as m;"
        f"print(s.__file__.startswith({str(site)!r}), s.ACCELERATED,"
        " b'accelerated=\"false\"' in m.Metrics().exposition()[0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["True", "False", "True"]
