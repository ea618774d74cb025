"""``ha_dedup`` with ``rwrouter run --workers 2`` (a real process tree on 127.0.0.1): two
senders post remote write requests as replicas ``a`` and ``b`` of one cluster, every request
on a new connection (the kernel hashes each to either worker), and a capture server is the
destination. The election is shared by the workers: only ``a``'s samples arrive while it sends,
though each worker gets requests of both (``b``'s are dropped on both); once ``a`` has been
silent for longer than ``failover_timeout``, ``b``'s next request elects it and its samples
flow, whichever worker takes them. ``GET /-/status`` (every worker's figures) shows it.

    sender a ---\\                 /-- worker 0 --\\
                 >-- 127.0.0.1 --<                >-- the shared election --> capture /ha
    sender b ---/  (a connection   \\-- worker 1 --/    (<runtime_dir>/ha)
                    per request)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import aiohttp
import pytest

from rwrouter.doubles.router import RouterProcess
from tests.support.capture import CaptureServer
from tests.support.polling import poll
from tests.support.series import HEADERS, Series, build_body
from tests.support.workers import WORKERS, per_worker, running_workers

FAILOVER = 1.0  # seconds: failover_timeout below
CONFIG = """
server: {{listen_address: "127.0.0.1:{port}", shutdown_timeout: 2s}}
storage: {{path: data}}
remote_write:
  - name: sink
    url: {url}
    queue_config: {{batch_send_deadline: 50ms, min_backoff: 50ms, max_backoff: 200ms}}
    ha_dedup: {{failover_timeout: 1s}}
"""
PATH = "/ha"
B_VALUES = 1_000_000.0  # b's sample values start here (a's below): the sink tells them apart
PERIOD = 0.02  # seconds between two requests of one sender


@pytest.fixture(scope="module")
def router(
    tmp_path_factory: pytest.TempPathFactory, capture: CaptureServer
) -> Iterator[RouterProcess]:
    configure = lambda port: CONFIG.format(port=port, url=capture.url(PATH))  # noqa: E731
    with running_workers(tmp_path_factory.mktemp("ha-workers"), configure) as router:
        yield router


@dataclass
class Sender:
    """One replica of the pair: posts a sample per request (value ``base + i``), each request
    on a new connection, and remembers when each was posted and answered (monotonic s)."""

    replica: str
    base: float
    posted: list[tuple[float, float]] = field(default_factory=list)  # (start, end) by i

    async def post(self, session: aiohttp.ClientSession, url: str) -> None:
        i = len(self.posted)
        labels = (("__name__", "ha_up"), ("cluster", "c1"), ("__replica__", self.replica))
        body = build_body([Series(labels, ((int(time.time() * 1000), self.base + i),))])
        start = time.monotonic()
        async with session.post(f"{url}/api/v1/write", data=body, headers=HEADERS) as answer:
            assert answer.status == 204, await answer.text()
        self.posted.append((start, time.monotonic()))


def arrived(capture: CaptureServer) -> list[float]:
    """The sample values the sink accepted, in order; the replica label never arrives."""
    values: list[float] = []
    for received in capture.requests(PATH):
        assert received.request is not None
        for series in received.request.timeseries:
            assert [label.name for label in series.labels] == ["__name__", "cluster"]
            values += [sample.value for sample in series.samples]
    return values


async def run_until(
    senders: list[Sender],
    url: str,
    done: Callable[[], bool],
    *,
    timeout: float,
) -> None:
    """Every sender posts (concurrently, a new connection per request) each PERIOD until
    ``done()`` (checked off the loop); fails after ``timeout`` seconds."""
    connector = [aiohttp.TCPConnector(force_close=True) for _ in senders]
    sessions = [aiohttp.ClientSession(connector=c) for c in connector]
    deadline = time.monotonic() + timeout
    try:
        while not await asyncio.to_thread(done):
            assert time.monotonic() < deadline, "not done in time"
            await asyncio.gather(
                *(s.post(sess, url) for s, sess in zip(senders, sessions, strict=True))
            )
            await asyncio.sleep(PERIOD)
    finally:
        for session in sessions:
            await session.close()


def dropped_per_worker(router: RouterProcess) -> dict[str, float]:
    return per_worker(
        router, "rwrouter_samples_dropped_total", destination="sink", reason="ha_replica"
    )


async def test_workers_share_one_election_and_fail_over(
    router: RouterProcess, fresh_capture: CaptureServer
) -> None:
    a, b = Sender("a", 0.0), Sender("b", B_VALUES)
    # 1. a sends first (the first replica to send is elected), then both send until b's
    # requests were dropped by each worker: each judged b against the election in the shared
    # table, whichever worker took a's first request.
    await run_until([a], router.url, lambda: len(a.posted) > 0, timeout=5)
    both = lambda: set(w for w, n in dropped_per_worker(router).items() if n) == set(WORKERS)  # noqa: E731
    await run_until([a, b], router.url, both, timeout=10)
    elections = per_worker(router, "rwrouter_ha_leader_changes_total", destination="sink")
    assert sum(elections.values()) == 1  # one election for the two workers
    received = per_worker(router, "rwrouter_received_samples_total")
    assert set(w for w, n in received.items() if n) == set(WORKERS)
    poll(lambda: len(arrived(fresh_capture)) == len(a.posted), what="a's samples")
    assert sorted(arrived(fresh_capture)) == [float(i) for i in range(len(a.posted))]
    assert sum(dropped_per_worker(router).values()) == len(b.posted)

    # 2. a stops; b goes on: it is elected once a was silent for longer than failover_timeout.
    a_last = a.posted[-1][0]
    elected = lambda: max(arrived(fresh_capture)) >= B_VALUES  # noqa: E731
    await run_until([b], router.url, elected, timeout=FAILOVER + 8)
    first = int(min(v for v in arrived(fresh_capture) if v >= B_VALUES) - B_VALUES)
    assert b.posted[first][1] - a_last > FAILOVER  # not before a's silence
    assert b.posted[first - 1][0] - a.posted[-1][1] <= FAILOVER  # the previous: dropped, not late
    extra = len(b.posted) + 10  # b's later requests flow, whichever worker takes them
    await run_until([b], router.url, lambda: len(b.posted) >= extra, timeout=5)
    want = [float(i) for i in range(len(a.posted))]
    want += [B_VALUES + i for i in range(first, len(b.posted))]
    poll(lambda: len(arrived(fresh_capture)) == len(want), what="b's samples")
    assert sorted(arrived(fresh_capture)) == want
    elections = per_worker(router, "rwrouter_ha_leader_changes_total", destination="sink")
    assert sum(elections.values()) == 2

    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + 5
        while True:  # any worker answers with every worker's figures (kept for 1 s)
            async with session.get(f"{router.url}/-/status") as answer:
                ha = (await answer.json())["destinations"]["sink"]["ha_dedup"]
            if ha["clusters"] and ha["clusters"][0]["elections_total"] == 2:
                break
            assert time.monotonic() < deadline, ha
            await asyncio.sleep(0.05)
    assert ha["failover_timeout"] == FAILOVER
    [cluster] = ha["clusters"]
    assert (cluster["cluster"], cluster["replica"]) == ("c1", "b")
