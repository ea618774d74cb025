"""The Go-built real peers (``scripts/peers.txt``, built by ``scripts/build-peers``): where
their binaries are, and a skip (a failure when ``CI`` is set) when one is missing.

Binaries live in the peers cache, ``$RWROUTER_PEERS_DIR`` or
``${XDG_CACHE_HOME:-~/.cache}/rwrouter-peers``, as ``<name>-<version>/<name>``::

    prometheus3 = peer_binary("prometheus")  # Prometheus 3.x (module v0.3NN.x)
    vmagent = peer_binary("vmagent")
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rwrouter.testing.prometheus import PrometheusNotFoundError
from tests.support.prometheus import missing_prometheus

ROOT = Path(__file__).resolve().parents[2]
PEERS_FILE = ROOT / "scripts" / "peers.txt"
BUILD_HINT = "scripts/build-peers"


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


def peer_binary(name: str) -> str:
    """The binary of peer ``name``; skips the calling test (fails it when ``CI`` is set)
    when it was not built."""
    path = peer_path(name)
    if not os.access(path, os.X_OK):
        missing_prometheus(PrometheusNotFoundError(
            f"{name} {peers()[name].version} is not built at {path} (run {BUILD_HINT})"
        ))  # fmt: skip
    return str(path)
