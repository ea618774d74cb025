"""Small local HTTP helpers of the runner (stdlib: the runner stays free of an event loop)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
POLL = 0.05  # seconds between polls of a sink or a readiness endpoint


def http(method: str, url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """One request; (status, body). Connection errors give status 0."""
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, b""


def wait_ready(url: str, proc: subprocess.Popen[Any], timeout: float, what: str) -> None:
    """Poll ``url`` until it answers 200; raise if ``proc`` exits or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before ready")
        if http("GET", url, timeout=1.0)[0] == 200:
            return
        time.sleep(POLL)
    raise RuntimeError(f"{what} not ready at {url} after {timeout:.0f} s")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
