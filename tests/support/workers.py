"""``rwrouter run --workers 2`` as a real process tree on 127.0.0.1, for the tests that run
one: started until every worker is up, its merged ``/metrics`` read per worker, requests sent
on new connections (the kernel picks the worker of each), its processes found in /proc."""

from __future__ import annotations

import contextlib
import http.client
import os
from collections.abc import Iterator
from pathlib import Path

from rwrouter.doubles.router import RouterProcess
from tests.support.polling import poll
from tests.support.router import Configure, running_router, start_router
from tests.support.series import HEADERS

WORKERS = ("0", "1")  # the ``worker`` label values of two workers
ARGS = ("--workers", "2")


def per_worker(router: RouterProcess, name: str, **labels: str) -> dict[str, float]:
    """``name`` (with ``labels``) summed per ``worker`` label, from the merged /metrics."""
    values: dict[str, float] = {}
    for sample in router.metrics():
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
            worker = sample.labels["worker"]
            values[worker] = values.get(worker, 0.0) + sample.value
    return values


def all_up(router: RouterProcess) -> bool:
    """Whether every worker reports ``rwrouter_worker_up`` 1 (False while none answers)."""
    try:
        return per_worker(router, "rwrouter_worker_up") == dict.fromkeys(WORKERS, 1.0)
    except OSError:
        return False


def workers_up(router: RouterProcess) -> None:
    """Wait until every worker is up (:func:`all_up`); fails with the log if the tree
    exits first."""
    poll(lambda: all_up(router) or router.process.poll() is not None, what="workers up")
    assert router.process.poll() is None, router.log_path.read_text()


def start_workers(
    workdir: Path, configure: Configure, *, args: tuple[str, ...] = ()
) -> RouterProcess:
    """:func:`~tests.support.router.start_router` with ``--workers 2`` (and ``args``),
    ready once every worker is up. The caller stops it."""
    return start_router(workdir, configure, args=(*ARGS, *args), wait=workers_up)


@contextlib.contextmanager
def running_workers(
    workdir: Path, configure: Configure, *, args: tuple[str, ...] = ()
) -> Iterator[RouterProcess]:
    """:func:`start_workers`, stopped on the way out (the supervisor waits for its workers'
    drains: up to 15 s)."""
    with running_router(
        workdir, configure, args=(*ARGS, *args), wait=workers_up, stop_timeout_s=15
    ) as router:
        yield router


def send(router: RouterProcess, body: bytes) -> int:
    """POST ``body`` (a remote write 1.0 request) on a new connection; returns the status."""
    host, port = router.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", "/api/v1/write", body=body, headers=HEADERS)
        return connection.getresponse().status
    finally:
        connection.close()


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False
