"""Cheap reads with ``rwrouter run --workers 2`` (a real process tree on 127.0.0.1): 8
concurrent ``GET /-/audit?top=0`` of 200,000 metric names spread over the workers are merged
from every worker's counts off the event loops: the workers' RSS growth and ``/-/healthy``
p99 meanwhile stay under bounds (issue 14's audit amplification, with workers)."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rwrouter.doubles.prometheus import free_port
from rwrouter.doubles.router import RouterProcess
from rwrouter.server.reads import MAX_AUDIT_TOP
from tests.integration.test_cheap_reads import NAMES, READERS, bodies, p99
from tests.support.polling import poll
from tests.support.workers import children, send

CONFIG = """
server: {{listen_address: "127.0.0.1:{port}", shutdown_timeout: 2s}}
storage: {{path: data}}
remote_write:
  - {{name: everything, shadow: true}}
"""
RSS_GROWTH_BOUND = 300 * 2**20  # bytes, all workers together
HEALTHY_P99_BOUND = 1.0  # seconds


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    tmp = tmp_path_factory.mktemp("reads-workers")
    port = free_port()
    config = tmp / "rwrouter.yaml"
    config.write_text(CONFIG.format(port=port))
    router = RouterProcess(
        config_path=config, port=port, log_path=tmp / "rwrouter.log", args=["--workers", "2"]
    )
    try:
        router.wait_ready(timeout_s=30)
        poll(lambda: len(children(router.process.pid)) == 2, what="two workers")
        yield router
    finally:
        router.stop(timeout_s=15)


def workers_rss(router: RouterProcess) -> int:
    """The workers' resident set sizes together, bytes."""
    total = 0
    for pid in children(router.process.pid):
        statm = Path(f"/proc/{pid}/statm").read_text()
        total += int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return total


def get(router: RouterProcess, path: str) -> tuple[int, bytes]:
    """GET on a new connection (the kernel picks the worker)."""
    host, port = router.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_concurrent_merged_audits_keep_the_workers_free(router: RouterProcess) -> None:
    for body in bodies(NAMES):
        assert send(router, body) == 204
    before, peak = workers_rss(router), 0
    done = threading.Event()
    latencies: list[float] = []

    def probe() -> None:
        nonlocal peak
        while not done.is_set():
            started = time.perf_counter()
            assert get(router, "/-/healthy")[0] == 200
            latencies.append(time.perf_counter() - started)
            peak = max(peak, workers_rss(router))
            time.sleep(0.01)

    with concurrent.futures.ThreadPoolExecutor(READERS + 1) as pool:
        probing = pool.submit(probe)
        time.sleep(0.05)
        started = time.perf_counter()
        answers = list(pool.map(lambda _: get(router, "/-/audit?top=0"), range(READERS)))
        took = time.perf_counter() - started
        done.set()
        probing.result(timeout=30)
    growth = max(peak, workers_rss(router)) - before
    print(
        f"\n--workers 2: {READERS} concurrent GET /-/audit?top=0 of {NAMES:,} names: {took:.2f} s;"
        f" workers' RSS {before / 2**20:.0f} MiB, +{growth / 2**20:.1f} MiB at the peak (bound"
        f" {RSS_GROWTH_BOUND / 2**20:.0f}); /-/healthy: {len(latencies)} probes, p99"
        f" {p99(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms (bound"
        f" {HEALTHY_P99_BOUND * 1000:.0f} ms)"
    )
    for status, body in answers:
        assert status == 200, body[:200]
        report = json.loads(body)
        (dest,) = report["destinations"]
        assert (report["workers"], report["top"], report["top_capped"]) == (2, MAX_AUDIT_TOP, True)
        assert (dest["metric_names"], dest["active_series"]) == (NAMES, NAMES)
        assert len(dest["metrics"]) == MAX_AUDIT_TOP
    assert growth < RSS_GROWTH_BOUND
    assert p99(latencies) < HEALTHY_P99_BOUND
