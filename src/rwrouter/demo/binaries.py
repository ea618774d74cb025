"""Which Prometheus the demo runs: Debian's (installed with apt-get when missing and root), or
the one given with ``--prometheus`` (its version decides the remote write version); and how
the commands the demo prints call rwrouter (:func:`rwrouter_command`)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

from rwrouter.doubles.prometheus import INSTALL_HINT, PrometheusNotFoundError, prometheus_binary

__all__ = ["ensure_prometheus", "prometheus_version", "rwrouter_command", "this_rwrouter"]


def rwrouter_command(*, argv0: str, on_path: str | None, python: str) -> str:
    """How a command the demo prints calls rwrouter, so that it runs when pasted into the same
    shell. ``argv0``: how this process was started (``sys.argv[0]``); ``on_path``: what
    ``rwrouter`` on PATH is (``shutil.which``; None: not on PATH); ``python``: the running
    interpreter (``sys.executable``). Gives ``rwrouter`` when the shell finds the running
    executable by that name; the running ``rwrouter`` executable's absolute path when it does
    not (``.venv/bin/rwrouter demo`` without the venv activated, as the README runs it);
    ``<python> -m rwrouter`` (shell-quoted) when started so (``argv0`` is
    ``.../rwrouter/__main__.py``), or from another program (a test) with no rwrouter on
    PATH."""
    module = f"{shlex.quote(python)} -m rwrouter"
    if os.path.basename(argv0) != "rwrouter":
        started_as_module = argv0.endswith(os.path.join("rwrouter", "__main__.py"))
        return "rwrouter" if on_path is not None and not started_as_module else module
    if os.sep not in argv0:  # the shell found it on PATH
        return "rwrouter"
    if on_path is not None and os.path.realpath(on_path) == os.path.realpath(argv0):
        return "rwrouter"
    return shlex.quote(os.path.abspath(argv0))


def this_rwrouter() -> str:
    """:func:`rwrouter_command` of this process."""
    return rwrouter_command(
        argv0=sys.argv[0], on_path=shutil.which("rwrouter"), python=sys.executable
    )


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
