"""The code stays lint-clean and formatted (ruff check, ruff format) and strictly typed
(mypy --strict: the package, the tests, the benchmark and scripts/build-peers), checked on
every run."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHECKS = [
    ("ruff", ["ruff", "check", "--no-cache", "src", "tests", "bench", "scripts/build-peers"]),
    (
        "ruff_format",
        ["ruff", "format", "--check", "--no-cache", "src", "tests", "bench", "scripts/build-peers"],
    ),
    ("mypy_strict", ["mypy"]),  # settings in pyproject.toml: strict, the files below
]
MYPY_FILES = ["src/rwrouter", "tests", "bench", "scripts/build-peers"]


@pytest.mark.parametrize("command", [c for _, c in CHECKS], ids=[n for n, _ in CHECKS])
def test_static_check_passes(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_checks_the_package_tests_benchmark_and_scripts() -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert settings["strict"] is True
    assert settings["files"] == MYPY_FILES


def test_scripts_check_is_an_executable_bash_script() -> None:
    """scripts/check runs these checks outside pytest (not run here: it would run pytest)."""
    script = ROOT / "scripts" / "check"
    assert os.access(script, os.X_OK)
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    parsed = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert parsed.returncode == 0, parsed.stderr
