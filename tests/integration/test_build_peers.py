"""scripts/build-peers as a command: a second run builds nothing, and it fails with one line
when go is missing or a go command fails (a stand-in ``go`` on PATH: no network), leaving a
stale binary in place."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rwrouter.doubles.prometheus import PrometheusNotFoundError
from tests.support.peers import peer_path, peers
from tests.support.prometheus import missing_prometheus

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-peers"


def run(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


@pytest.mark.timeout(3600)  # the first run is a full build when the cache is cold
def test_second_run_builds_nothing() -> None:
    if shutil.which("go") is None:
        missing_prometheus(
            PrometheusNotFoundError("go is not on PATH: scripts/build-peers cannot build the peers")
        )
    first = run(dict(os.environ), timeout=3500)
    assert first.returncode == 0, first.stdout + first.stderr
    before = {name: identity(peer_path(name)) for name in peers()}
    second = run(dict(os.environ))
    assert second.returncode == 0, second.stdout + second.stderr
    lines = second.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        f"{p.name} {p.version}" for p in peers().values()
    ]
    assert all(": up to date: " in line for line in lines), second.stdout
    assert second.stderr == ""
    assert {name: identity(peer_path(name)) for name in peers()} == before


def failing_go(tmp_path: Path) -> Path:
    """A directory with a ``go`` that prints two lines and exits 1."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(
        "#!/bin/sh\necho 'go: downloading something' >&2\n"
        "echo 'go: simulated failure' >&2\nexit 1\n"
    )
    go.chmod(0o755)
    return bin_dir


def stale_prometheus(cache: Path) -> Path:
    """A cached prometheus that reports no version (as an unstamped build does)."""
    peer = peers()["prometheus"]
    path = cache / f"{peer.name}-{peer.version}" / peer.name
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\necho 'prometheus, version  (branch: , revision: unknown)'\n")
    path.chmod(0o755)
    return path


VERSION = peers()["prometheus"].version
FAILURES = [
    (
        "go_missing",
        False,
        f"build-peers: prometheus {VERSION} needs a build (not built) but go is not on PATH (",
    ),
    (
        "go_fails",
        True,
        "build-peers: go mod download of prometheus failed (exit status 1): go: simulated failure",
    ),
]


@pytest.mark.parametrize(
    ("with_go", "why"), [c[1:] for c in FAILURES], ids=[c[0] for c in FAILURES]
)
def test_failure_is_one_line_and_nonzero(tmp_path: Path, with_go: bool, why: str) -> None:
    cache = tmp_path / "cache"
    path = "/nonexistent" if not with_go else str(failing_go(tmp_path))
    env = {"PATH": path, "HOME": str(tmp_path), "RWROUTER_PEERS_DIR": str(cache)}
    result = run(env, "prometheus")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(why), result.stderr
    assert not list(cache.rglob("prometheus")) and not list(cache.rglob(".*partial*"))


def test_stale_binary_detected_and_kept_when_the_build_fails(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    stale = stale_prometheus(cache)
    env = {
        "PATH": str(failing_go(tmp_path)),
        "HOME": str(tmp_path),
        "RWROUTER_PEERS_DIR": str(cache),
    }
    result = run(env, "prometheus")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"prometheus {VERSION}: reports 'prometheus, version  (branch: , revision: unknown)', "
        "not 3.16.0: building github.com/prometheus/prometheus/cmd/prometheus "
        "-tags remove_all_sd ..."
    ]
    assert result.stderr.splitlines()[-1].startswith("build-peers: go mod download")
    assert stale.read_text().startswith("#!/bin/sh")  # not replaced, not removed
    assert sorted(p.name for p in stale.parent.iterdir()) == ["prometheus"]
