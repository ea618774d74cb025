"""End to end: an HA pair of real Prometheus processes (external labels ``cluster`` and
``__replica__``) scraping the same target and writing to one ``rwrouter run`` whose workspace
destination has ``ha_dedup`` (failover_timeout 3 s), signed for the workspace double.

The target answers each scraper with its own value (the scrape URL's ``replica`` parameter,
which adds no label): the series are the same for both replicas, and a stored value tells
whose sample it is. Only the elected replica's samples reach the double, without the replica
label; once the leader is killed, the other replica takes over after the timeout, with no
gap in the stored series longer than the timeout plus a scrape interval and the senders'
batching, and no sample of both.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from rwrouter.doubles.router import RouterProcess
from rwrouter.doubles.workspace import Key, WorkspaceDouble
from rwrouter.doubles.workspace_runner import ThreadedWorkspace, run_in_thread
from rwrouter.doubles.workspace_store import bits_to_float
from tests.support.polling import wait_for
from tests.support.prometheus import PrometheusProcess, prometheus_binary
from tests.support.router import running_router

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(60)]

TIMEOUT_S = 3.0  # ha_dedup.failover_timeout
SCRAPE_S = 1.0
BATCH_S = 0.2  # the senders' batch_send_deadline
VALUES = {"prom-a": 1.0, "prom-b": 2.0}  # the target's answer to each replica
NAME = "ha_demo_value"


class _Target(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        replica = parse_qs(urlsplit(self.path).query).get("replica", [""])[0]
        body = f"# TYPE {NAME} gauge\n{NAME} {VALUES.get(replica, 0.0)}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def target() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Target)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def double() -> Iterator[ThreadedWorkspace]:
    with run_in_thread(WorkspaceDouble(credentials={"AKID": Key("secret")})) as running:
        yield running


@pytest.fixture
def router(tmp_path: Path, double: ThreadedWorkspace) -> Iterator[RouterProcess]:
    def configure(port: int) -> str:
        return f"""
server: {{listen_address: "127.0.0.1:{port}"}}
storage: {{path: {tmp_path / "queues"}}}
remote_write:
  - name: workspace
    url: {double.double.url("ws-1")}
    sigv4: {{region: us-east-1, access_key: AKID, secret_key: secret}}
    ha_dedup: {{cluster_label: cluster, replica_label: __replica__, failover_timeout: 3s}}
    queue_config: {{batch_send_deadline: 100ms}}
"""

    with running_router(tmp_path, configure) as router:
        yield router


def _prometheus(
    replica: str, target: str, router: RouterProcess, workdir: Path
) -> PrometheusProcess:
    config = f"""
global:
  scrape_interval: {SCRAPE_S:g}s
  scrape_timeout: 900ms
  external_labels: {{cluster: gpu, __replica__: {replica}}}
scrape_configs:
  - job_name: target
    params: {{replica: [{replica}]}}
    static_configs: [{{targets: ["{target}"]}}]
remote_write:
  - url: {router.url}/api/v1/write
    queue_config: {{batch_send_deadline: {int(BATCH_S * 1000)}ms, min_backoff: 50ms}}
"""
    return PrometheusProcess.start(config, workdir=workdir / replica)


def _stored(double: ThreadedWorkspace) -> dict[int, float]:
    """The double's samples of the target's series: {timestamp ms: value}."""
    stored = dict(double.double.series("ws-1"))  # a copy: the double's loop adds to it
    found = [series for key, series in stored.items() if ("__name__", NAME) in key]
    assert len(found) <= 1, [s.labels for s in found]  # one series: the replica label is gone
    return {t: bits_to_float(b) for s in found for t, b in dict(s.samples).items()}


def _elected(log: Path, after: int = 0) -> list[str]:
    text = log.read_text()[after:]
    return re.findall(r"ha_dedup[^\n]*elected[^\n]* replica=\"?([\w-]+)", text)


def test_ha_pair_fails_over_without_gap_or_duplicates(
    tmp_path: Path, target: str, double: ThreadedWorkspace, router: RouterProcess
) -> None:
    prometheus_binary()
    log = router.log_path
    procs = {r: _prometheus(r, target, router, tmp_path) for r in VALUES}
    try:
        leader = wait_for(lambda: _elected(log), timeout=20, what="a replica elected")[0]
        follower = next(r for r in VALUES if r != leader)
        wait_for(
            lambda: (
                len(_stored(double)) >= 4
                and router.metric_value("rwrouter_samples_dropped_total", reason="ha_replica") > 0
            ),
            timeout=20,
            what="the leader's samples stored, the follower's dropped",
        )
        before = _stored(double)
        assert set(before.values()) == {VALUES[leader]}, before
        for key in dict(double.double.series("ws-1")):
            assert "__replica__" not in dict(key)

        killed_at, logged = time.time(), len(log.read_text())
        killed = procs.pop(leader)
        killed.process.kill()  # SIGKILL: the leader stops sending at once
        killed.stop()  # reaped
        wait_for(
            lambda: VALUES[follower] in _stored(double).values(),
            timeout=TIMEOUT_S + 10,
            what=f"{follower}'s samples stored after {leader} was killed",
        )
        took_over = time.time() - killed_at
        assert _elected(log, logged) == [follower]
        assert "failover" in log.read_text()[logged:]
        wait_for(
            lambda: sum(v == VALUES[follower] for v in _stored(double).values()) >= 3,
            timeout=10,
            what="the follower's samples keep coming",
        )
    finally:
        for proc in procs.values():
            proc.stop()

    samples = sorted(_stored(double).items())
    values = [v for _, v in samples]
    switch = values.index(VALUES[follower])
    # No duplicates: the leader's samples, then only the follower's (never both interleaved).
    assert set(values[:switch]) == {VALUES[leader]}
    assert set(values[switch:]) == {VALUES[follower]}
    gaps = [(b - a) / 1000 for (a, _), (b, _) in itertools.pairwise(samples)]
    bound = TIMEOUT_S + SCRAPE_S + 2 * BATCH_S + 0.5  # + the senders' batching, + slack
    assert max(gaps) <= bound, (max(gaps), bound)
    assert min(gaps) >= SCRAPE_S * 0.5, min(gaps)  # one replica's scrapes at a time
    assert took_over <= TIMEOUT_S + 5
    dropped = router.metric_value("rwrouter_samples_dropped_total", reason="ha_replica")
    changes = router.metric_value("rwrouter_ha_leader_changes_total", cluster="gpu")
    assert dropped > 0 and changes == 2
