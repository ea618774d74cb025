"""End to end: a real Prometheus scraping the demo's synthetic DCGM exporter remote-writes to
``rwrouter capture`` (a real process); ``rwrouter audit --capture`` of that file counts, per
metric name, the series the Prometheus itself holds (its own ``count by (__name__)``)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from rwrouter.demo.exporter import ExporterFleet
from tests.support.prometheus import PrometheusProcess, free_port, prometheus_binary

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(90)]

T = TypeVar("T")
SERIES_PER_TARGET = 730 + 5  # the synthetic node, and Prometheus' up, scrape_* series

SENDER = """
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: gpu-node
    static_configs: [{{targets: ["{target}"]}}]
remote_write:
  - url: http://127.0.0.1:{port}/api/v1/write
    queue_config: {{batch_send_deadline: 1s, max_backoff: 1s}}
"""
AUDIT = """
remote_write:
  - {name: everything, shadow: true}
  - name: critical
    shadow: true
    write_relabel_configs:
      - {source_labels: [__name__], regex: "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_.*", action: keep}
"""


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.5)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_audit_of_a_real_prometheus_capture_counts_its_series(tmp_path: Path) -> None:
    prometheus_binary()  # skip locally / fail on CI when missing
    fleet = ExporterFleet(nodes=1, seed=5)
    fleet.start()
    port, output = free_port(), tmp_path / "traffic.rwcap"
    capture = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rwrouter",
            "capture",
            "--output",
            str(output),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    config = tmp_path / "audit.yaml"
    config.write_text(AUDIT)
    try:
        wait_for(
            lambda: listening(port) or capture.poll() is not None,
            timeout=20,
            what="rwrouter capture listening",
        )
        assert capture.poll() is None
        with PrometheusProcess.start(SENDER.format(target=fleet.targets[0], port=port)) as prom:

            def stored() -> dict[str, int] | None:
                rows = prom.query('count by (__name__) ({__name__=~".+"})')
                counts = {r["metric"]["__name__"]: int(r["value"][1]) for r in rows}
                return counts if sum(counts.values()) == SERIES_PER_TARGET else None

            def audited() -> tuple[dict[str, int], dict[str, int], dict[str, int]] | None:
                expected = stored()
                result = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "rwrouter",
                        "audit",
                        "--config",
                        str(config),
                        "--capture",
                        str(output),
                        "--json",
                        "--top",
                        "0",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                assert result.returncode == 0, result.stderr
                report = json.loads(result.stdout)
                counted: dict[str, dict[str, int]] = {
                    d["name"]: {m["name"]: m["active_series"] for m in d["metrics"]}
                    for d in report["destinations"]
                }
                if expected is None or counted["everything"] != expected:
                    return None
                return expected, counted["everything"], counted["critical"]

            found = wait_for(audited, timeout=40, what="the audit = Prometheus' series")
            expected, everything, critical = found
    finally:
        fleet.stop()
        capture.send_signal(signal.SIGTERM)
        _, err = capture.communicate(timeout=20)
    assert everything == expected and sum(everything.values()) == SERIES_PER_TARGET
    assert critical == {
        name: n
        for name, n in expected.items()
        if name == "DCGM_FI_DEV_GPU_UTIL" or name.startswith("DCGM_FI_PROF_")
    }
    assert critical and capture.returncode == 0, err
    assert "requests recorded" in err.splitlines()[-1]
