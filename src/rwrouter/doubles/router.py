"""rwrouter as a real subprocess, for tests and the demo: ``python -m rwrouter run``.

The process gets its own session, so a terminal's Ctrl-C reaches only the parent, which stops it
in order (SIGTERM: the router stops listening and drains its queues).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from rwrouter.doubles.prometheus import MetricSample, parse_metrics, wait_ready


class RouterProcess:
    """``python -m rwrouter run --config FILE`` as a subprocess (own session: a terminal's
    Ctrl-C reaches only the demo, which stops it in order), log in ``log_path`` (appended:
    a restarted router keeps one log). It runs in the config file's directory, so a relative
    ``storage.path`` lands next to the file."""

    def __init__(
        self, *, config_path: Path, port: int, log_path: Path, args: Sequence[str] = ()
    ) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.config_path = config_path
        self.args = list(args)  # more ``rwrouter run`` options, e.g. ["--workers", "2"]
        self._spawn()

    def wait_ready(self, *, timeout_s: float) -> None:
        """Poll ``/-/ready``; ``RuntimeError`` with the log tail on exit or timeout."""
        wait_ready(self.url, self.process, name="rwrouter", timeout=timeout_s, log=self._log_tail)

    def metrics(self) -> list[MetricSample]:
        """The router's own ``/metrics``, parsed."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as response:
            return list(parse_metrics(response.read().decode()))

    def metric_value(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels`` (0 if none)."""
        return sum(
            sample.value
            for sample in self.metrics()
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )

    def kill(self, *, timeout_s: float = 10.0) -> int:
        """``kill -9`` the router (SIGKILL: no drain, no cleanup, as a crash) and reap it;
        returns its exit status (``-9``). Idempotent."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        return self.process.wait(timeout_s)

    def restart(self) -> None:
        """Start the router again with the same config file, working directory and log (so
        the same ``storage.path`` and listen address), once the previous process has exited
        (:meth:`stop` or :meth:`kill`); ``RuntimeError`` while it still runs. Call
        :meth:`wait_ready` after."""
        if self.process.poll() is None:
            raise RuntimeError("rwrouter is still running: stop() or kill() it first")
        self._spawn()

    def _spawn(self) -> None:
        command = [sys.executable, "-m", "rwrouter", "run", "--config", str(self.config_path)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*command, *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.config_path.parent,
            )

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """SIGTERM (the router drains for ``server.shutdown_timeout``), wait up to
        ``timeout_s``, then kill. Idempotent."""
        stop_process(self.process, timeout_s=timeout_s)


def stop_process(process: subprocess.Popen[bytes], *, timeout_s: float) -> None:
    """Terminate ``process``, wait up to ``timeout_s`` seconds, then kill and reap it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout_s)
