"""The code stays lint-clean (ruff) and strictly typed (mypy --strict), checked on every run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHECKS = [
    ("ruff", ["ruff", "check", "--no-cache", "src", "tests"]),
    ("mypy_strict", ["mypy"]),  # settings in pyproject.toml: strict, src/rwrouter
]


@pytest.mark.parametrize("command", [c for _, c in CHECKS], ids=[n for n, _ in CHECKS])
def test_static_check_passes(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
