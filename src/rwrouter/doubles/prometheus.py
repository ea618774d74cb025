"""Run a real Prometheus (Debian's ``/usr/bin/prometheus``) as a peer, for tests and the demo.

``PrometheusProcess.start(config_text)`` starts ``prometheus`` on 127.0.0.1 with a free port, a
``--storage.tsdb.path`` in its work directory (a temp dir unless ``workdir`` is given),
``--web.enable-remote-write-receiver`` and ``--web.enable-lifecycle``, and waits (bounded) for
``/-/ready``. If the binary is missing it raises :class:`PrometheusNotFoundError` (the test
wrapper ``tests/support/prometheus.py`` turns that into a skip, or a failure on CI). All calls
are synchronous (stdlib ``urllib``), so it works from sync code, threads and fixtures::

    with PrometheusProcess.start(CONFIG) as prom:
        prom.query('count by (__name__) ({__name__=~".+"})')

The process log is kept in the work dir (``log_text()``) and quoted in start-up errors. This
module never imports pytest.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from prometheus_client.parser import text_string_to_metric_families

from rwrouter.errors import PrometheusNotFoundError

__all__ = [
    "INSTALL_HINT",
    "MetricSample",
    "PrometheusNotFoundError",
    "PrometheusProcess",
    "free_port",
    "prometheus_binary",
]

#: What to run to get the binary on Debian/Ubuntu.
INSTALL_HINT = "apt-get update && apt-get install -y prometheus"

#: Remote write 1.0 request headers (remote-write.md).
RW_HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}


def prometheus_binary() -> str:
    """Path of the ``prometheus`` binary; :class:`PrometheusNotFoundError` when not installed."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise PrometheusNotFoundError(
            "the 'prometheus' binary is not installed (Debian package 'prometheus'; "
            f"install it with: {INSTALL_HINT})"
        )
    return binary


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class MetricSample:
    """One sample of Prometheus's own ``/metrics``."""

    name: str
    labels: dict[str, str]
    value: float


class PrometheusProcess:
    """A running Prometheus; build with :meth:`start`, end with :meth:`stop` (or ``with``)."""

    def __init__(
        self, process: subprocess.Popen[bytes], port: int, workdir: Path, *, owns_workdir: bool
    ) -> None:
        self.process = process
        self.port = port
        self.workdir = workdir
        self.url = f"http://127.0.0.1:{port}"
        self._owns_workdir = owns_workdir

    @classmethod
    def start(
        cls,
        config_text: str,
        *,
        ready_timeout: float = 30.0,
        extra_args: tuple[str, ...] = (),
        workdir: Path | None = None,
        new_session: bool = False,
        binary: str | None = None,
    ) -> PrometheusProcess:
        """Start Prometheus with ``config_text`` (YAML) and wait for ``/-/ready``.

        ``binary``: the Prometheus to run (default: :func:`prometheus_binary`, Debian's); a
        Prometheus 3 takes the same flags (its remote-write receiver accepts RW 1.0 and 2.0).

        ``new_session=True`` starts it in its own session, so a terminal's Ctrl-C reaches only
        the caller, which then stops it in order.

        ``workdir`` (created if needed) holds ``prometheus.yml``, ``data/`` and
        ``prometheus.log`` and is kept on :meth:`stop`; without it a temp dir is used and
        removed. Raises :class:`PrometheusNotFoundError`, or ``RuntimeError`` (with the log
        tail) when the process exits or is not ready within ``ready_timeout`` seconds.
        """
        binary = binary or prometheus_binary()
        owns = workdir is None
        if workdir is None:
            workdir = Path(tempfile.mkdtemp(prefix="rwrouter-prometheus-"))
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(config_text)
        port = free_port()
        args = [
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-remote-write-receiver",
            "--web.enable-lifecycle",
            "--log.level=info",
            *extra_args,
        ]
        with (workdir / "prometheus.log").open("wb") as log:
            process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, start_new_session=new_session
            )
        prom = cls(process, port, workdir, owns_workdir=owns)
        try:
            prom.wait_ready(timeout=ready_timeout)
        except BaseException:
            prom.stop()
            raise
        return prom

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def log_text(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_ready(self, *, timeout: float = 30.0) -> None:
        """Poll ``/-/ready`` until 200; ``RuntimeError`` (with the log tail) on exit or timeout."""
        wait_ready(
            self.url,
            self.process,
            name="prometheus",
            timeout=timeout,
            log=lambda: self.log_text()[-4000:],
        )

    def _request(
        self,
        path: str,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, bytes]:
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            headers=headers or {},
            method="POST" if data is not None else "GET",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def write(self, body: bytes, *, timeout: float = 10.0) -> tuple[int, bytes]:
        """POST a snappy remote write body to ``/api/v1/write``; returns (status, response body)."""
        return self._request("/api/v1/write", data=body, headers=RW_HEADERS, timeout=timeout)

    def query(self, promql: str, *, time_s: float | None = None) -> list[dict[str, Any]]:
        """Instant query via ``/api/v1/query`` (``time_s``: unix seconds, default now);
        returns ``data.result``; ``RuntimeError`` on an error answer."""
        params = {"query": promql}
        if time_s is not None:
            params["time"] = f"{time_s:.3f}"
        status, body = self._request(f"/api/v1/query?{urllib.parse.urlencode(params)}")
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {}
        if status != 200 or payload.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed ({status}): {body[:500]!r}")
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result

    def metrics(self) -> list[MetricSample]:
        """Prometheus's own ``/metrics``, parsed."""
        status, body = self._request("/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        return list(parse_metrics(body.decode()))

    def metric_value(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (0 if none)."""
        return sum(
            sample.value
            for sample in self.metrics()
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )

    def reload(self, config_text: str) -> None:
        """Write a new config and ``POST /-/reload``; raises if Prometheus refuses it."""
        (self.workdir / "prometheus.yml").write_text(config_text)
        status, body = self._request("/-/reload", data=b"", timeout=30)
        if status != 200:
            raise RuntimeError(f"reload failed ({status}): {body.decode(errors='replace')}")

    def stop(self, *, timeout: float = 10.0) -> None:
        """Terminate, wait up to ``timeout`` s, then kill; remove the work dir if it was a
        temp dir. Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def wait_ready(
    url: str,
    process: subprocess.Popen[bytes],
    *,
    name: str,
    timeout: float,
    log: Callable[[], str],
) -> None:
    """Poll ``<url>/-/ready`` until it answers 200. ``RuntimeError`` naming the program, with
    ``log()`` (its log tail), when ``process`` exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited early:\n{log()}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{name} not ready in {timeout} s:\n{log()}")


def parse_metrics(text: str) -> Iterator[MetricSample]:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            yield MetricSample(sample.name, dict(sample.labels), float(sample.value))
