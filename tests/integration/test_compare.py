"""``rwrouter compare`` against two real Prometheus processes holding the same data: Debian's
2.42 as the self-hosted store, a Prometheus 3 behind a SigV4-verifying workspace front
(``/workspaces/<id>/api/v1/query_range`` verified with :mod:`rwrouter.doubles.sigv4_verify`,
then forwarded) — with a deliberately missing family, a value that differs, a front too slow
for ``--timeout`` and credentials it refuses. The command runs as a process, as an operator
runs it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from aiohttp import web

from rwrouter.doubles.sigv4_verify import Key, Rejection, verify
from rwrouter.wire import remote_pb2
from tests.support.peers import peer_binary
from tests.support.prometheus import PrometheusProcess

pytestmark = pytest.mark.timeout(90)

REGION = "us-east-1"
WORKSPACE = "ws-compare"
ACCESS_KEY, SECRET = "AKIDCOMPARE", "compare-secret"
STEP_MS = 15_000
PROM_CONFIG = "global: {scrape_interval: 1m}\n"
ROOT = Path(__file__).resolve().parents[2]

Labels = tuple[tuple[str, str], ...]


def series() -> list[Labels]:
    out: list[Labels] = []
    for family in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"):
        for host in ("n1", "n2"):
            for gpu in ("0", "1"):
                out.append((("__name__", family), ("Hostname", host), ("gpu", gpu)))
    return out


def write(prom: PrometheusProcess, samples: dict[Labels, list[tuple[int, float]]]) -> None:
    request = remote_pb2.WriteRequest()
    for labels, points in samples.items():
        ts = request.timeseries.add()
        for name, text in labels:
            ts.labels.add(name=name, value=text)
        for timestamp, value in points:
            ts.samples.add(timestamp=timestamp, value=value)
    status, body = prom.write(bytes(snappy.compress(request.SerializeToString())))
    assert status == 204, body


@dataclass
class WorkspaceFront:
    """A SigV4-verifying front of a real Prometheus, as the managed workspace's query API:
    ``GET /workspaces/<id>/api/v1/query_range`` verified (403 otherwise), then forwarded.
    ``delay``: seconds to wait before forwarding (a slow workspace)."""

    backend: str  # the Prometheus behind it
    self_hosted: str  # the other Prometheus (the self-hosted store), for the configuration
    end: float  # the data's last timestamp (unix seconds)
    delay: float = 0.0
    verified: int = 0
    rejected: list[str] = field(default_factory=list)
    url: str = ""  # where it listens

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw_path, _, raw_query = request.raw_path.partition("?")
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        verdict = verify(
            method=request.method,
            raw_path=raw_path,
            raw_query=raw_query,
            headers=headers,
            body=await request.read(),
            keys={ACCESS_KEY: Key(SECRET)},
            region=REGION,
            service="aps",
            now_s=time.time(),
        )
        if isinstance(verdict, Rejection):
            self.rejected.append(verdict.reason)
            return web.json_response({"message": verdict.message}, status=verdict.status)
        if request.match_info["ws"] != WORKSPACE:
            return web.json_response({"message": "workspace not found"}, status=404)
        self.verified += 1
        await asyncio.sleep(self.delay)
        async with aiohttp.ClientSession() as session:
            target = f"{self.backend}/api/v1/query_range?{raw_query}"
            async with session.get(target) as answer:
                return web.Response(
                    status=answer.status, body=await answer.read(), content_type="application/json"
                )


@pytest.fixture(scope="module")
def front() -> Iterator[WorkspaceFront]:
    """Two real Prometheus processes holding the same series, but the workspace's lacks the
    DCGM_FI_DEV_FB_USED family and has one GPU_UTIL value of n2/gpu 1 different (41 samples
    15 s apart, the last one a minute ago: ``front.end``)."""
    end_ms = (int(time.time() * 1000) // STEP_MS - 4) * STEP_MS
    points = [(end_ms - i * STEP_MS, float(i % 7) + 0.25) for i in range(40, -1, -1)]
    with (
        PrometheusProcess.start(PROM_CONFIG) as self_hosted,
        PrometheusProcess.start(PROM_CONFIG, binary=peer_binary("prometheus")) as workspace,
    ):
        all_series = {labels: points for labels in series()}
        write(self_hosted, all_series)
        changed = [(t, v + 1.0 if t == end_ms - 10 * STEP_MS else v) for t, v in points]
        write(
            workspace,
            {
                labels: changed if labels[1:] == (("Hostname", "n2"), ("gpu", "1")) else points
                for labels in series()
                if labels[0][1] == "DCGM_FI_DEV_GPU_UTIL"
            },
        )
        state = WorkspaceFront(
            backend=workspace.url, self_hosted=self_hosted.url, end=end_ms / 1000
        )
        with _serve(state) as port:
            state.url = f"http://127.0.0.1:{port}"
            yield state


class _serve:
    """Serve ``state`` on 127.0.0.1 from a thread with its own loop (the command under test
    runs as a process, the fixture is synchronous)."""

    def __init__(self, state: WorkspaceFront) -> None:
        self.state = state
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> int:
        self.thread.start()
        app = web.Application()
        app.router.add_get("/workspaces/{ws}/api/v1/query_range", self.state.handle)
        self.runner = web.AppRunner(app)
        asyncio.run_coroutine_threadsafe(self.runner.setup(), self.loop).result(10)
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self.loop).result(10)
        server = site._server
        assert server is not None
        return int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def config(tmp_path: Path, front: WorkspaceFront, *, keep: str, secret: str = SECRET) -> Path:
    path = tmp_path / "rwrouter.yaml"
    path.write_text(
        f"""
remote_write:
  - name: workspace
    url: {front.url}/workspaces/{WORKSPACE}/api/v1/remote_write
    sigv4: {{region: {REGION}, access_key: {ACCESS_KEY}, secret_key: {secret}}}
    write_relabel_configs:
      - {{source_labels: [__name__], regex: "{keep}", action: keep}}
  - name: self-hosted
    url: {front.self_hosted}/api/v1/write
"""
    )
    return path


def compare(front: WorkspaceFront, path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(name, None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rwrouter",
            "compare",
            "--config",
            str(path),
            "--range",
            "8m",
            "--step",
            "15s",
            "--end",
            f"{front.end:.3f}",
            "--repeat",
            "3",
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


BOTH = "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED"


@pytest.mark.parametrize(
    ("keep", "query", "code", "status", "parity"),
    [
        pytest.param(
            BOTH,
            'avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{Hostname="n1"})',
            0,
            "parity",
            {"series_compared": 1, "points_compared": 33, "differing_series": 0},
            id="aggregation_equal",
        ),
        pytest.param(
            BOTH,
            '{__name__=~"DCGM_FI_DEV_.*"}',
            1,
            "differences",
            {"series_compared": 4, "missing_in_workspace": 4, "differing_series": 1},
            id="missing_family_and_a_value",
        ),
        pytest.param(
            "DCGM_FI_DEV_GPU_UTIL",
            'DCGM_FI_DEV_FB_USED{Hostname="n1"}',
            0,
            "parity",
            {"series_compared": 0, "not_migrated": 2, "missing_in_workspace": 0},
            id="family_not_migrated",
        ),
    ],
)
def test_compare(
    tmp_path: Path,
    front: WorkspaceFront,
    keep: str,
    query: str,
    code: int,
    status: str,
    parity: dict[str, int],
) -> None:
    verified = front.verified
    exit_code, report = compare(front, config(tmp_path, front, keep=keep), "--query", query)
    (result,) = report["queries"]
    assert (exit_code, report["exit_code"], result["status"]) == (code, code, status), report
    assert {k: result["parity"][k] for k in parity} == parity
    for side in ("self_hosted", "workspace"):
        assert result[side]["answered"] == 3 and result[side]["p95_seconds"] > 0
    assert front.verified - verified == 3 and not front.rejected
    assert report["summary"].startswith("rwrouter compare ")


def test_compare_names_the_missing_family_and_the_value(
    tmp_path: Path, front: WorkspaceFront
) -> None:
    _, report = compare(
        front, config(tmp_path, front, keep=BOTH), "--query", '{__name__=~"DCGM_FI_DEV_.*"}'
    )
    parity = report["queries"][0]["parity"]
    assert parity["families"]["DCGM_FI_DEV_FB_USED"]["missing_in_workspace"] == 4
    assert parity["families"]["DCGM_FI_DEV_GPU_UTIL"] == {
        "in_both": 4,
        "missing_in_workspace": 0,
        "missing_in_self_hosted": 0,
        "differing": 1,
        "not_migrated": 0,
    }
    (difference,) = parity["examples"]["differences"]
    assert difference["series"] == 'DCGM_FI_DEV_GPU_UTIL{Hostname="n2", gpu="1"}'
    assert float(difference["workspace"]) == float(difference["self_hosted"]) + 1


@pytest.mark.parametrize(
    ("delay", "secret", "args", "error", "summary"),
    [
        pytest.param(
            3.0,
            SECRET,
            ("--timeout", "1s"),
            "timed out after 1s",
            "workspace timed out on 1 query",
            id="timeout",
        ),
        pytest.param(
            0.0,
            "wrong",
            (),
            "HTTP 403: error: The request signature",
            "workspace failed on 1 query",
            id="refused",
        ),
    ],
)
def test_a_store_that_does_not_answer_is_reported(
    tmp_path: Path,
    front: WorkspaceFront,
    delay: float,
    secret: str,
    args: Sequence[str],
    error: str,
    summary: str,
) -> None:
    front.delay = delay
    try:
        code, report = compare(
            front,
            config(tmp_path, front, keep=BOTH, secret=secret),
            "--query",
            "count(DCGM_FI_DEV_GPU_UTIL)",
            "--repeat",
            "1",
            *args,
        )
    finally:
        front.delay = 0.0
        front.rejected.clear()
    (result,) = report["queries"]
    assert (code, result["status"], result["parity"]) == (3, "not compared", None)
    assert result["self_hosted"]["answered"] == 1
    assert result["workspace"]["answered"] == 0 and result["workspace"]["error"].startswith(error)
    assert report["summary"].endswith(summary)
