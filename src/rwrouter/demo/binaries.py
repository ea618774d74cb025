"""Which Prometheus the demo runs: Debian's (installed with apt-get when missing and root), or
the one given with ``--prometheus`` (its version decides the remote write version)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from rwrouter.doubles.prometheus import INSTALL_HINT, PrometheusNotFoundError, prometheus_binary

__all__ = ["ensure_prometheus", "prometheus_version"]


def ensure_prometheus() -> bool:
    """True when ``prometheus`` is on PATH, installing it with apt-get when running as root."""
    try:
        prometheus_binary()
        return True
    except PrometheusNotFoundError:
        pass
    if os.geteuid() != 0:
        print(
            f"rwrouter demo: the 'prometheus' binary is missing; install it with:\n"
            f"  sudo sh -c '{INSTALL_HINT}'",
            file=sys.stderr,
        )
        return False
    print(f"rwrouter demo: 'prometheus' is missing; running: {INSTALL_HINT}", flush=True)
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "prometheus"]):
        print("+ " + " ".join(command), flush=True)
        if subprocess.run(command, check=False).returncode != 0:
            print(f"rwrouter demo: {' '.join(command)} failed", file=sys.stderr)
            return False
    return shutil.which("prometheus") is not None


def prometheus_version(binary: str) -> tuple[int, int] | None:
    """(major, minor) of what ``binary --version`` prints first (``prometheus, version
    3.16.0 ...``); None when it prints no such version or does not run."""
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"version (\d+)\.(\d+)\.", done.stdout or done.stderr)
    return (int(match.group(1)), int(match.group(2))) if match else None
