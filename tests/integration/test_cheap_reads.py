"""Cheap reads (issue 14): ``GET /-/audit`` and ``GET /-/status`` are built off the event loop,
capped, kept for their refresh period and shared by concurrent readers (in-process router on
127.0.0.1, its series sent through the real write path).

The regression test of the audit amplification: with 200,000 metric names, 8 concurrent
``GET /-/audit?top=0`` took RSS from 614 MB to 1.36 GB and froze ``/-/healthy`` for 9.8 s."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from typing import Any

import aiohttp
import pytest

from rwrouter.server.app import AUDIT_ANSWERS
from rwrouter.server.reads import MAX_AUDIT_TOP
from tests.integration.conftest import StartRouter, post_write
from tests.support.series import Series, build_body

NAMES = 200_000
PER_REQUEST = 20_000  # series (each of its own name) per write request
READERS = 8
RSS_GROWTH_BOUND = 200 * 2**20  # bytes (was ~750 MB)
HEALTHY_P99_BOUND = 0.5  # seconds (was 9.8 s)

ROUTER = """
audit: {{refresh: {refresh}}}
remote_write:
  - name: everything
    shadow: true
"""


def rss() -> int:
    """This process's resident set size, bytes (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def bodies(names: int) -> list[bytes]:
    """Write requests of ``names`` series, each of its own metric name: name i has 1 + i % 3
    samples (so rankings by series and by samples differ)."""
    return [
        build_body(
            Series((("__name__", f"metric_{i:06d}"), ("job", "flood")), [(1000, 1.0)] * (1 + i % 3))
            for i in range(start, min(start + PER_REQUEST, names))
        )
        for start in range(0, names, PER_REQUEST)
    ]


async def healthy_latencies(url: str, done: asyncio.Event) -> list[float]:
    """Seconds each ``GET /-/healthy`` took, one every 10 ms until ``done``."""
    latencies = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        while not done.is_set():
            started = time.perf_counter()
            async with http.get(f"{url}/-/healthy") as resp:
                assert resp.status == 200
                await resp.read()
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.01)
    return latencies


async def peak_rss(done: asyncio.Event) -> int:
    """The largest RSS seen every 5 ms until ``done``, bytes."""
    peak = rss()
    while not done.is_set():
        peak = max(peak, rss())
        await asyncio.sleep(0.005)
    return max(peak, rss())


async def read_audit(http: aiohttp.ClientSession, url: str) -> tuple[bytes, dict[str, str]]:
    async with http.get(f"{url}/-/audit?top=0") as resp:
        assert resp.status == 200, await resp.text()
        return await resp.read(), dict(resp.headers)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def test_concurrent_audits_of_200k_names_are_built_once_and_the_loop_stays_free(
    start_router: StartRouter, http: aiohttp.ClientSession
) -> None:
    router = await start_router(ROUTER.format(refresh="10s"))
    for body in await asyncio.to_thread(bodies, NAMES):
        status, text, _ = await post_write(http, router, body)
        assert status == 204, text
    gc.collect()
    before = rss()
    done = asyncio.Event()
    async with asyncio.timeout(60):
        probes = asyncio.ensure_future(healthy_latencies(router.url, done))
        peak = asyncio.ensure_future(peak_rss(done))
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        answers = await asyncio.gather(*(read_audit(http, router.url) for _ in range(READERS)))
        took = time.perf_counter() - started
        await asyncio.sleep(0.05)
        done.set()
        latencies, highest = await probes, await peak
    growth = highest - before
    print(
        f"\n{READERS} concurrent GET /-/audit?top=0 of {NAMES:,} names: {took:.2f} s,"
        f" answer {len(answers[0][0]):,} bytes; RSS {before / 2**20:.0f} MiB ->"
        f" peak {highest / 2**20:.0f} MiB (+{growth / 2**20:.1f} MiB, bound"
        f" {RSS_GROWTH_BOUND / 2**20:.0f}); /-/healthy during it: {len(latencies)} probes,"
        f" p99 {p99(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms (bound"
        f" {HEALTHY_P99_BOUND * 1000:.0f} ms)"
    )
    assert len({body for body, _ in answers}) == 1  # one build served every reader
    assert router._app is not None
    assert router._app[AUDIT_ANSWERS].reports.builds == 1
    report = json.loads(answers[0][0])
    dest = report["destinations"][0]
    assert (report["top"], report["top_capped"]) == (MAX_AUDIT_TOP, True)
    assert (dest["metric_names"], len(dest["metrics"]), dest["active_series"]) == (
        NAMES,
        MAX_AUDIT_TOP,
        NAMES,
    )
    assert growth < RSS_GROWTH_BOUND
    assert p99(latencies) < HEALTHY_P99_BOUND


async def read(http: aiohttp.ClientSession, url: str) -> tuple[dict[str, Any], dict[str, str]]:
    async with http.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json(), dict(resp.headers)


async def test_answers_are_kept_for_the_refresh_period(
    start_router: StartRouter, http: aiohttp.ClientSession
) -> None:
    router = await start_router(ROUTER.format(refresh="1h"))
    assert (await post_write(http, router, bodies(30)[0]))[0] == 204
    first, headers = await read(http, f"{router.url}/-/audit?top=5")
    assert headers["Age"] == "0" and headers["Cache-Control"] == "no-store"
    assert (await post_write(http, router, bodies(40)[0]))[0] == 204
    again, _ = await read(http, f"{router.url}/-/audit?top=5")
    assert again == first  # kept: the 10 new names are not in it yet
    assert first["destinations"][0]["metric_names"] == 30
    wider, _ = await read(http, f"{router.url}/-/audit?top=50")  # cut from the same report
    assert (wider["destinations"][0]["metric_names"], wider["top_capped"]) == (30, False)
    by_samples, _ = await read(http, f"{router.url}/-/audit?top=3&sort=samples")
    listed = by_samples["destinations"][0]["metrics"]
    assert [m["name"] for m in listed] == ["metric_000002", "metric_000005", "metric_000008"]
    status, _ = await read(http, f"{router.url}/-/status")
    assert status["received_samples_total"] > 0 and abs(status["time"] - time.time()) < 60


@pytest.mark.parametrize(
    "query",
    ["sort=name", "sort=", "sort=" + "s" * 5000],
    ids=["unknown_sort", "empty_sort", "long_sort"],
)
async def test_a_bad_sort_is_a_400_with_one_line(
    start_router: StartRouter, http: aiohttp.ClientSession, query: str
) -> None:
    router = await start_router(ROUTER.format(refresh="10s"))
    async with http.get(f"{router.url}/-/audit?{query}") as resp:
        text = await resp.text()
    assert resp.status == 400
    assert text.startswith("sort must be series or samples") and text.count("\n") == 1
