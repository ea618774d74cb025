"""Tools of the loopback attack tests (tests/integration/test_bounds.py): rwrouter as a
subprocess (optionally under a low ``RLIMIT_NOFILE``) with its RSS, metrics and log; raw
sockets that hold connections; a pump that pushes bodies into them without blocking."""

from __future__ import annotations

import contextlib
import http.client
import resource
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from rwrouter.doubles.prometheus import parse_metrics
from rwrouter.doubles.router import stop_process
from tests.support.polling import wait_for
from tests.support.series import HEADERS, Series, build_body


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def small_body() -> bytes:
    """An ordinary remote write body (one series, one sample)."""
    return build_body([Series((("__name__", "up"), ("job", "bounds")), [(1_700_000_000_000, 1.0)])])


class Router:
    """``python -m rwrouter run --config <tmp>/rwrouter.yaml`` listening on 127.0.0.1:port,
    ``server`` keys from ``server`` (YAML lines), one destination at ``destination``;
    ``nofile``: its ``RLIMIT_NOFILE`` (soft and hard)."""

    def __init__(
        self, tmp: Path, *, server: str, destination: str, nofile: int | None = None
    ) -> None:
        self.port = free_port()
        self.log_path = tmp / "rwrouter.log"
        config = tmp / "rwrouter.yaml"
        config.write_text(
            f"server:\n  listen_address: 127.0.0.1:{self.port}\n  shutdown_timeout: 1s\n"
            + "".join(f"  {line}\n" for line in server.strip().splitlines())
            + f"storage:\n  path: {tmp / 'data'}\n"
            + f"remote_write:\n  - name: sink\n    url: {destination}\n"
        )

        def limit() -> None:  # in the child, before exec
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "rwrouter", "run", "--config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=limit,
            )
        wait_for(self._ready, timeout=30, what=f"rwrouter ready (log: {self.log_path})")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"rwrouter exited: {self.log()[-3000:]}")
        with contextlib.suppress(OSError):
            return self.get("/-/ready")[0] == 200
        return False

    def get(self, path: str) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def write(self, body: bytes) -> tuple[int, dict[str, str]]:
        """POST ``body`` on a new connection: (status, headers)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("POST", "/api/v1/write", body=body, headers=HEADERS)
            response = connection.getresponse()
            response.read()
            return response.status, dict(response.getheaders())
        finally:
            connection.close()

    def metric(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels`` (0 if none)."""
        text = self.get("/metrics")[1].decode()
        return sum(
            s.value
            for s in parse_metrics(text)
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def rss(self) -> int:
        """The process's resident set size, bytes (``VmRSS``)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise LookupError("VmRSS")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.process, timeout_s=15)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setblocking(False)
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    """True once the router closed ``sock`` (end of file or reset), False while it is open."""
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def upload_head(length: int) -> bytes:
    """The request line and headers of a write of ``length`` body bytes."""
    fields = "".join(f"{k}: {v}\r\n" for k, v in HEADERS.items())
    return (
        f"POST /api/v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\n{fields}"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


class Pump:
    """Pushes ``payloads`` into ``socks`` (non-blocking) as fast as the router takes them."""

    def __init__(self, socks: list[socket.socket], payloads: list[bytes]) -> None:
        self.socks = socks
        self.views = [memoryview(p) for p in payloads]
        self.sent = [0] * len(socks)

    def run_for(self, seconds: float) -> None:
        """Push for at most ``seconds`` (or until everything is sent)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            pending = [i for i, v in enumerate(self.views) if self.sent[i] < len(v)]
            if not pending:
                return
            _, ready, _ = select.select([], [self.socks[i] for i in pending], [], 0.05)
            ready_set = set(ready)
            for i in pending:
                if self.socks[i] not in ready_set:
                    continue
                try:
                    self.sent[i] += self.socks[i].send(self.views[i][self.sent[i] :])
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:  # closed by the router: nothing more goes in
                    self.views[i] = self.views[i][: self.sent[i]]


@contextlib.contextmanager
def held(socks: list[socket.socket]) -> Iterator[list[socket.socket]]:
    """Close every socket on the way out."""
    try:
        yield socks
    finally:
        for sock in socks:
            sock.close()
