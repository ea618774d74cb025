"""The Go-built real peers (``scripts/peers.txt``, built by ``scripts/build-peers``): where
their binaries are, and a skip (a failure when ``CI`` is set) when one is missing.

Binaries live in the peers cache, ``$RWROUTER_PEERS_DIR`` or
``${XDG_CACHE_HOME:-~/.cache}/rwrouter-peers``, as ``<name>-<version>/<name>``::

    prometheus3 = peer_binary("prometheus")  # Prometheus 3.x (module v0.3NN.x)
    vmagent = peer_binary("vmagent")

:func:`report_lines` gives the versions of the peers a run uses (the pytest report header).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rwrouter.doubles.prometheus import PrometheusNotFoundError
from tests.support.prometheus import missing_prometheus

ROOT = Path(__file__).resolve().parents[2]
PEERS_FILE = ROOT / "scripts" / "peers.txt"
BUILD_HINT = "scripts/build-peers"
#: The argument that makes each peer print its version.
VERSION_FLAGS = {"prometheus": "--version", "vmagent": "-version"}


@dataclass(frozen=True)
class Peer:
    """One line of ``scripts/peers.txt``."""

    name: str
    module: str
    version: str
    package: str
    tags: str


def peers() -> dict[str, Peer]:
    """The pinned peers, by name."""
    out = {}
    for line in PEERS_FILE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, module, version, package, tags = line.split()
            out[name] = Peer(name, module, version, package, tags)
    return out


def cache_dir() -> Path:
    """The peers cache (outside the work tree)."""
    if os.environ.get("RWROUTER_PEERS_DIR"):
        return Path(os.environ["RWROUTER_PEERS_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rwrouter-peers"


def peer_path(name: str) -> Path:
    """Where the pinned version of peer ``name`` is (it may not exist)."""
    peer = peers()[name]
    return cache_dir() / f"{peer.name}-{peer.version}" / peer.name


BUILD_SCRIPT = ROOT / "scripts" / "build-peers"
BUILD_TIMEOUT = 3600.0  # seconds: a cold build of Prometheus on 2 cores takes minutes


@functools.cache
def _build(name: str) -> str:
    """Run ``scripts/build-peers name`` once per session (the test that first needs a peer
    builds it: ``pytest`` on a fresh machine with Go works without a step before it); ``""``
    when it succeeded, else why not."""
    if shutil.which("go") is None:
        return "go is not installed (Go >= 1.26 builds it)"
    print(
        f"\nbuilding {name} {peers()[name].version} with {BUILD_HINT} (once; cached)",
        file=sys.stderr,
        flush=True,
    )
    try:
        done = subprocess.run(
            [sys.executable, str(BUILD_SCRIPT), name],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{BUILD_HINT} {name} took over {BUILD_TIMEOUT:g} s"
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return lines[-1] if lines else f"{BUILD_HINT} exited {done.returncode}"
    return ""


def peer_binary(name: str) -> str:
    """The binary of peer ``name``, built first (:func:`_build`) when the cache lacks it;
    skips the calling test (fails it when ``CI`` is set) when it cannot be built."""
    path = peer_path(name)
    if not os.access(path, os.X_OK):
        why = _build(name)
        if why or not os.access(path, os.X_OK):
            missing_prometheus(
                PrometheusNotFoundError(
                    f"{name} {peers()[name].version} is not built at {path} and could not be "
                    f"built: {why or 'no binary after the build'} (run {BUILD_HINT})"
                )
            )
    return str(path)


@functools.cache
def version_line(path: str, flag: str) -> str:
    """The first line ``path flag`` prints (stdout, else stderr), run once per (path, flag)
    in a session; a short reason in parentheses when there is none."""
    try:
        proc = subprocess.run([path, flag], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(cannot run it: {exc})"
    lines = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
    return lines[0].strip() if lines else f"(printed nothing, exit status {proc.returncode})"


def report_lines() -> list[str]:
    """One line per real peer the suites run: the built Prometheus 3 and vmagent (path and
    the first line of their version output, or why they are missing) and Debian's
    ``prometheus`` on PATH (or "not installed")."""
    lines = []
    for name, title in (("prometheus", "Prometheus 3"), ("vmagent", "vmagent")):
        path = peer_path(name)
        if os.access(path, os.X_OK):
            lines.append(f"peer {title}: {path}: {version_line(str(path), VERSION_FLAGS[name])}")
        else:
            lines.append(
                f"peer {title}: {peers()[name].version} not built at {path} (run {BUILD_HINT})"
            )
    debian = shutil.which("prometheus")
    lines.append(
        "peer Debian prometheus: "
        + (f"{debian}: {version_line(debian, '--version')}" if debian else "not installed")
    )
    return lines
