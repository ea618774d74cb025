"""A series budget with a real Prometheus sending (issue 16, items 1 and 6): 1,500 series for
the workspace double, which refuses a new series past 1,000 active ones (400 "per-user
series limit"), and ``series_limit: 1000`` on it with a self-hosted Prometheus as the
fallback: 1,000 series in the double, the other 500 in the store, no refusal, and the 500
listed by metric name (the metrics, ``GET /-/status``, the status page in headless Chromium,
``rwrouter audit``).

    push 1,500 series x 2 rounds --> sender Prometheus (Debian's; its remote-write receiver;
    it forwards its WAL) --> rwrouter (in process) --SigV4--> workspace double (1,000 max)
                                                --fallback--> store Prometheus

Prometheus shards its sending, so which 500 are diverted depends on arrival: the test checks
that the two sets are disjoint and cover the 1,500, and that the names listed are the store's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator

import aiohttp
import pytest

from rwrouter.doubles.prometheus import PrometheusProcess
from rwrouter.doubles.workspace import Key, WorkspaceDouble
from rwrouter.doubles.workspace_store import Limits
from rwrouter.routing import budget_states
from tests.integration.conftest import StartRouter, eventually, metric_value
from tests.integration.test_audit import run_cli
from tests.support.browser import page_shows
from tests.support.prometheus import prometheus_binary
from tests.support.series import Series, build_body

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(60)]

ACCESS_KEY, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
LIMIT, SENT = 1_000, 1_500
NAMES = ("budget_gpu_util", "budget_gpu_temp", "budget_gpu_power")  # 500 series each


@pytest.fixture
async def double() -> AsyncIterator[WorkspaceDouble]:
    ws = WorkspaceDouble(
        credentials={ACCESS_KEY: Key(SECRET)}, limits=Limits(max_active_series=LIMIT)
    )
    await ws.start()
    yield ws
    await ws.stop()


@pytest.fixture
async def store() -> AsyncIterator[PrometheusProcess]:
    prometheus_binary()  # skip locally / fail on CI when missing
    prom = await asyncio.to_thread(PrometheusProcess.start, "global: {scrape_interval: 1h}\n")
    yield prom
    await asyncio.to_thread(prom.stop)


def router_yaml(double: WorkspaceDouble, store: PrometheusProcess) -> str:
    return f"""
remote_write:
  - name: workspace
    url: {double.url("ws-1")}
    sigv4: {{region: us-east-1, access_key: {ACCESS_KEY}, secret_key: '{SECRET}'}}
    series_limit: {LIMIT}
    on_series_limit: fallback
    write_relabel_configs:
      - {{source_labels: [__name__], regex: 'budget_.*', action: keep}}
    queue_config: {{batch_send_deadline: 50ms, max_shards: 2}}
  - name: store
    url: {store.url}/api/v1/write
    fallback: true
    queue_config: {{batch_send_deadline: 50ms}}
"""


def pushed(round_ms: int) -> bytes:
    series = [
        Series((("__name__", NAMES[i % 3]), ("gpu", str(i))), [(round_ms, float(i))])
        for i in range(SENT)
    ]
    return build_body(series)


# The status page's series budget block of the workspace, once it lists series over it.
BUDGET_JS = """() => {
  const b = document.querySelector('[data-budget="workspace"]');
  if (!b || !b.querySelector("tr[data-metric]")) return null;
  return {line: b.querySelector("p").textContent,
          over: Object.fromEntries([...b.querySelectorAll("tr[data-metric]")].map(
            r => [r.dataset.metric, r.querySelector('[data-field="series_over"]').textContent]))};
}"""


def in_store(store: PrometheusProcess) -> set[tuple[str, str]]:
    rows = store.query('last_over_time({__name__=~"budget_.*"}[10m])')
    return {(r["metric"]["__name__"], r["metric"]["gpu"]) for r in rows}


async def test_a_budget_of_1000_sends_500_of_1500_series_to_the_fallback(
    start_router: StartRouter,
    double: WorkspaceDouble,
    store: PrometheusProcess,
    http: aiohttp.ClientSession,
) -> None:
    router = await start_router(router_yaml(double, store))
    sender_yaml = (
        "global: {scrape_interval: 1h}\n"
        "remote_write:\n"
        f"  - url: {router.url}/api/v1/write\n"
        "    queue_config: {batch_send_deadline: 100ms, max_samples_per_send: 500}\n"
    )
    sender = await asyncio.to_thread(PrometheusProcess.start, sender_yaml)
    try:
        now_ms = int(time.time() * 1000)
        for step in (0, 1):  # the second round: the same series keep their destination
            status, _ = await asyncio.to_thread(sender.write, pushed(now_ms + step * 1000))
            assert status == 204

        def delivered() -> bool:
            samples = sum(len(s.samples) for s in double.series().values())
            return samples == 2 * LIMIT and metric_value(
                router, "rwrouter_sent_samples_total", destination="store"
            ) >= 2 * (SENT - LIMIT)

        await eventually(delivered, timeout=30)
    finally:
        await asyncio.to_thread(sender.stop)

    at_workspace = {(dict(k)["__name__"], dict(k)["gpu"]) for k in double.series()}
    stored = await asyncio.to_thread(in_store, store)
    assert len(at_workspace) == LIMIT and len(stored) == SENT - LIMIT
    assert at_workspace.isdisjoint(stored)
    assert at_workspace | stored == {(NAMES[i % 3], str(i)) for i in range(SENT)}
    assert double.rejections == Counter()  # no 400 "per-user series limit", nothing refused
    assert router.fanout is not None
    state = budget_states(router.fanout.router, time.monotonic())["workspace"]
    assert (state.limit, state.active, state.limited) == (LIMIT, LIMIT, SENT - LIMIT)
    assert state.over == dict(Counter(name for name, _ in stored))  # diverted, by name
    labels = {"destination": "workspace", "action": "fallback"}
    assert metric_value(router, "rwrouter_series_limited_total", **labels) == SENT - LIMIT
    over = {
        name: metric_value(
            router, "rwrouter_series_limit_over_series", destination="workspace", metric=name
        )
        for name in NAMES
    }
    assert over == {name: float(state.over.get(name, 0)) for name in NAMES}
    async with http.get(f"{router.url}/-/status") as response:  # the status page's figures
        figures = (await response.json())["destinations"]["workspace"]
    assert figures["series_limit"] == LIMIT
    assert figures["series_limit_active_series"] == LIMIT
    assert dict(figures["series_over"]) == state.over
    shown, errors = await asyncio.to_thread(page_shows, f"{router.url}/", BUDGET_JS)
    assert shown["line"] == (
        "workspace: 1,000 of 1,000 active series (100 %); 500 new series over the budget "
        "since start"
    )
    assert shown["over"] == {name: f"{n:,}" for name, n in state.over.items()}
    assert errors == []
    text = await asyncio.to_thread(run_cli, "--url", router.url)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    start = lines.index(
        "series budget workspace: 1,000 of 1,000 active series; over it (fallback or "
        "dropped), by metric name:"
    )
    listed = dict(line.split() for line in lines[start + 1 :])
    assert listed == {name: f"{n:,}" for name, n in state.over.items()}
    as_json = await asyncio.to_thread(run_cli, "--url", router.url, "--json")
    budget = json.loads(as_json.stdout)["series_budgets"]["workspace"]
    assert dict(budget["series_over"]) == state.over
