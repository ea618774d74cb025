"""``rwrouter run --workers 2`` as a real process tree on 127.0.0.1: the supervisor and two
workers sharing the port (SO_REUSEPORT), a capture server as the destination."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rwrouter.doubles.router import RouterProcess
from rwrouter.server.balance import board_path
from rwrouter.server.workers import WorkerSpec
from tests.support.capture import CaptureServer
from tests.support.polling import poll
from tests.support.router import Configure
from tests.support.series import HEADERS, Series, build_body
from tests.support.workers import (
    WORKERS,
    alive,
    all_up,
    children,
    per_worker,
    running_workers,
    send,
    start_workers,
)

CONFIG = """
server: {{listen_address: "127.0.0.1:{port}", shutdown_timeout: 2s}}
storage: {{path: data}}
remote_write:
  - name: sink
    url: {url}
    queue_config: {{batch_send_deadline: 50ms, min_backoff: 50ms, max_backoff: 200ms}}
  - name: audit
    shadow: true
    write_relabel_configs: [{{source_labels: [__name__], regex: "audit_.*", action: keep}}]
"""
CONNECTIONS = 32  # the kernel picks a worker per connection: 2 * 2**-32 that one gets none


LIFECYCLE = ("--web.enable-lifecycle",)  # POST /-/reload


def configure(capture: CaptureServer, path: str) -> Configure:
    return lambda port: CONFIG.format(port=port, url=capture.url(path))


def start(tmp: Path, capture: CaptureServer, path: str) -> RouterProcess:
    return start_workers(tmp, configure(capture, path), args=LIFECYCLE)


@pytest.fixture(scope="module")
def router(
    tmp_path_factory: pytest.TempPathFactory, capture: CaptureServer
) -> Iterator[RouterProcess]:
    tmp = tmp_path_factory.mktemp("workers")
    with running_workers(tmp, configure(capture, "/workers"), args=LIFECYCLE) as router:
        yield router


def test_each_worker_has_its_own_queue(router: RouterProcess) -> None:
    data = router.config_path.parent / "data"
    assert (data / "queue" / "sink").is_dir()  # worker 0: the single-process layout
    assert (data / "worker-1" / "queue" / "sink").is_dir()


def test_connections_spread_over_workers_and_every_sample_arrives(
    router: RouterProcess, capture: CaptureServer
) -> None:
    before = per_worker(router, "rwrouter_received_requests_total", code="204")
    statuses = [
        send(router, build_body([Series((("__name__", "up"), ("conn", str(i))), [(1000, i)])]))
        for i in range(CONNECTIONS)
    ]
    assert statuses == [204] * CONNECTIONS
    after = per_worker(router, "rwrouter_received_requests_total", code="204")
    spread = {w: after.get(w, 0) - before.get(w, 0) for w in WORKERS}
    assert sum(spread.values()) == CONNECTIONS
    assert min(spread.values()) >= 4, spread  # binomial(32, 1/2): P(< 4) is about 1e-6
    poll(lambda: capture.sample_count("/workers") >= CONNECTIONS, what="all samples delivered")
    received = {dict(labels)["conn"] for labels in capture.label_sets("/workers")}
    assert received == {str(i) for i in range(CONNECTIONS)}
    sent = per_worker(router, "rwrouter_sent_samples_total", destination="sink")
    assert sum(sent.values()) == CONNECTIONS
    assert sent == {w: spread[w] for w in WORKERS}


def test_audit_counts_a_series_seen_by_both_workers_once(router: RouterProcess) -> None:
    """The same 6 series over many new connections reach both workers: each worker counts
    them, GET /-/audit counts them once (the union of the workers' series)."""
    body = build_body(
        [Series((("__name__", "audit_probe"), ("gpu", str(g))), [(1000, 1.0)]) for g in range(6)]
    )
    assert [send(router, body) for _ in range(CONNECTIONS)] == [204] * CONNECTIONS
    counted = per_worker(router, "rwrouter_audit_active_series", destination="audit")
    assert counted == dict.fromkeys(WORKERS, 6.0)  # each worker saw all 6 (P(not) ~ 1e-9)
    with urllib.request.urlopen(f"{router.url}/-/audit", timeout=10) as response:
        report = json.load(response)
    assert (report["workers"], report["workers_expected"]) == (2, 2)
    (dest,) = report["destinations"]
    assert (dest["name"], dest["shadow"], dest["active_series"]) == ("audit", True, 6)
    assert [(m["name"], m["active_series"]) for m in dest["metrics"]] == [("audit_probe", 6)]


KEEP_ALIVE = 4  # connections of one sender: over 2 workers, 3/1 or 4/0 is 10 in 16 likely
ROUNDS = 4  # each with new connections: all 4 balanced by luck alone is (6/16)**4, about 2 %
MEASURED = 25  # turns of the 4 connections once they are balanced


class Sender:
    """``KEEP_ALIVE`` keep-alive connections, each sending in turn and waiting for its answer
    (``http.client`` reconnects one the router ended with ``Connection: close``)."""

    def __init__(self, router: RouterProcess) -> None:
        host, port = router.url.removeprefix("http://").split(":")
        self.connections = [
            http.client.HTTPConnection(host, int(port), timeout=10) for _ in range(KEEP_ALIVE)
        ]
        self.ended = 0  # answers that ended their connection
        self.body = build_body([Series((("__name__", "up"), ("job", "balance")), [(1000, 1)])])

    def turn(self) -> None:
        """One write request on each connection."""
        for connection in self.connections:
            connection.request("POST", "/api/v1/write", body=self.body, headers=HEADERS)
            response = connection.getresponse()
            response.read()
            assert response.status == 204
            self.ended += response.will_close

    def close(self) -> None:
        for connection in self.connections:
            connection.close()


def balanced_round(router: RouterProcess) -> dict[str, float]:
    """New connections of a :class:`Sender`: once each worker holds 2 of them (polled, each poll
    one more turn), the 204 answers per worker over :data:`MEASURED` more turns."""
    two_each = dict.fromkeys(WORKERS, 2.0)
    sender = Sender(router)
    try:

        def balanced() -> bool:
            sender.turn()
            return per_worker(router, "rwrouter_write_connections") == two_each

        poll(balanced, timeout=10, what="2 write connections per worker")
        before = per_worker(router, "rwrouter_received_requests_total", code="204")
        for _ in range(MEASURED):
            sender.turn()
        after = per_worker(router, "rwrouter_received_requests_total", code="204")
        assert per_worker(router, "rwrouter_write_connections") == two_each
        return {w: after.get(w, 0) - before.get(w, 0) for w in WORKERS}
    finally:
        sender.close()


def test_keep_alive_connections_are_balanced_over_workers(router: RouterProcess) -> None:
    """Whatever the kernel's first placement of 4 connections, the workers end connections
    until each holds 2, then the requests split evenly."""
    for _ in range(ROUNDS):
        split = balanced_round(router)
        assert sum(split.values()) == MEASURED * KEEP_ALIVE
        assert min(split.values()) >= 0.35 * MEASURED * KEEP_ALIVE, split


@pytest.mark.parametrize("how", ["sighup", "http"])
def test_reload_reaches_every_worker(router: RouterProcess, how: str) -> None:
    name = "rwrouter_config_last_reload_success_timestamp_seconds"
    before = per_worker(router, name)
    time.sleep(0.01)  # the timestamp has sub-second resolution: make "later" observable
    if how == "sighup":
        router.process.send_signal(signal.SIGHUP)
    else:
        request = urllib.request.Request(f"{router.url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.read().decode().startswith("configuration reloaded")

    def reloaded() -> bool:
        after = per_worker(router, name)
        return all(after.get(w, 0) > before[w] for w in WORKERS)

    poll(reloaded, what="every worker reloaded")
    assert per_worker(router, "rwrouter_config_last_reload_successful") == dict.fromkeys(
        WORKERS, 1.0
    )


def spec_of(worker: int) -> WorkerSpec:
    """What the supervisor told process ``worker`` (its ``--worker`` argument)."""
    args = Path(f"/proc/{worker}/cmdline").read_bytes().decode().split("\0")
    return WorkerSpec.from_arg(args[args.index("--worker") + 1])


def test_a_killed_worker_is_restarted(router: RouterProcess) -> None:
    workers = children(router.process.pid)
    assert len(workers) == 2
    spec = spec_of(workers[1])
    board, slot = board_path(spec.runtime_dir), spec.index * 8
    with board.open("r+b") as file:  # as if that worker held 7 write connections
        file.seek(slot)
        file.write((7).to_bytes(8, "little"))
    os.kill(workers[1], signal.SIGKILL)
    poll(lambda: workers[1] not in children(router.process.pid), what="worker reaped")
    # The supervisor zeroes its slot (its connections are gone), before the restart (1 s later).
    poll(lambda: board.read_bytes()[slot : slot + 8] == bytes(8), timeout=1, what="slot zeroed")
    poll(lambda: len(children(router.process.pid)) == 2 and all_up(router), what="restarted")
    assert router.process.poll() is None
    assert "worker exited: restarting" in router.log_path.read_text()


def test_sigterm_stops_every_process(tmp_path: Path, capture: CaptureServer) -> None:
    router = start(tmp_path, capture, "/sigterm")
    workers = children(router.process.pid)
    assert len(workers) == 2
    router.process.send_signal(signal.SIGTERM)
    assert router.process.wait(15) == 0
    poll(lambda: not any(alive(pid) for pid in workers), timeout=5, what="workers gone")
    log = router.log_path.read_text()
    assert log.count("stopping: draining queues") == 2, log


def test_workers_stop_when_the_supervisor_is_killed(tmp_path: Path, capture: CaptureServer) -> None:
    router = start(tmp_path, capture, "/orphans")
    workers = children(router.process.pid)
    runtime_dir = Path(spec_of(workers[0]).runtime_dir)
    assert runtime_dir.is_dir()
    router.kill()
    poll(lambda: not any(alive(pid) for pid in workers), timeout=10, what="workers gone")
    assert router.log_path.read_text().count("the supervisor is gone: stopping") == 2
    # The supervisor removes its runtime directory; killed, it cannot: its workers do.
    assert not runtime_dir.exists()
