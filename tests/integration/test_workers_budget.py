"""One series budget across the workers of ``rwrouter run --workers 2`` (a real process tree
on 127.0.0.1): series arriving on many connections, spread over both workers by the kernel,
are admitted against one ``series_limit``; the rest go to the fallback destination."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rwrouter.doubles.router import RouterProcess
from tests.support.capture import CaptureServer
from tests.support.polling import poll
from tests.support.series import Series, build_body
from tests.support.workers import WORKERS, per_worker, running_workers, send

LIMIT = 11  # odd: two halves of it (the old split per worker) would hold 10
CONNECTIONS = 32  # one new series each (binomial(32, 1/2): a worker gets < 4 about 1e-6)

CONFIG = """
server: {{listen_address: "127.0.0.1:{port}", shutdown_timeout: 2s}}
storage: {{path: data}}
remote_write:
  - name: workspace
    url: {workspace}
    series_limit: {limit}
    on_series_limit: fallback
    queue_config: {{batch_send_deadline: 50ms, min_backoff: 50ms, max_backoff: 200ms}}
  - name: self-hosted
    url: {fallback}
    fallback: true
    queue_config: {{batch_send_deadline: 50ms, min_backoff: 50ms, max_backoff: 200ms}}
"""


@pytest.fixture
def router(tmp_path: Path, capture: CaptureServer) -> Iterator[RouterProcess]:
    def configure(port: int) -> str:
        return CONFIG.format(
            port=port,
            workspace=capture.url("/budget-workspace"),
            fallback=capture.url("/budget-fallback"),
            limit=LIMIT,
        )

    with running_workers(tmp_path, configure) as router:
        yield router


def names(capture: CaptureServer, path: str) -> set[str]:
    return {dict(labels)["conn"] for labels in capture.label_sets(path)}


def test_the_workers_admit_series_against_one_budget(
    router: RouterProcess, capture: CaptureServer
) -> None:
    bodies = [
        build_body([Series((("__name__", "gpu_util"), ("conn", str(i))), [(1000, i)])])
        for i in range(CONNECTIONS)
    ]
    assert [send(router, body) for body in bodies] == [204] * CONNECTIONS
    spread = per_worker(router, "rwrouter_received_requests_total", code="204")
    assert set(spread) == set(WORKERS) and min(spread.values()) >= 4, spread

    def delivered() -> bool:
        got = len(names(capture, "/budget-workspace")) + len(names(capture, "/budget-fallback"))
        return got >= CONNECTIONS

    poll(delivered, what="every series delivered")
    admitted, diverted = names(capture, "/budget-workspace"), names(capture, "/budget-fallback")
    assert len(admitted) == LIMIT and len(diverted) == CONNECTIONS - LIMIT
    assert admitted | diverted == {str(i) for i in range(CONNECTIONS)}

    # Again, on new connections (each series likely on the other worker now): the series the
    # workspace has keep going there, the others to the fallback: none counts twice.
    capture.clear()
    assert [send(router, body) for body in bodies] == [204] * CONNECTIONS
    poll(delivered, what="every series delivered again")
    assert names(capture, "/budget-workspace") == admitted
    assert names(capture, "/budget-fallback") == diverted
