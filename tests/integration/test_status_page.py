"""The status page at ``/``, in a real headless Chromium (Debian's ``chromium``, driven by
Playwright): it loads without console errors, refreshes itself, and shows the numbers
``/metrics`` shows. A screenshot is saved (``status-page.png`` in the test's temporary
directory, or in ``RWROUTER_TEST_ARTIFACTS`` when set).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiohttp
import pytest

from rwrouter.server.runner import RouterServer
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.series import Series, build_body

CHROMIUM = "/usr/bin/chromium"

ROUTER = """
remote_write:
  - name: workspace
    url: {url}/workspace
    queue_config: {{batch_send_deadline: 20ms}}
    write_relabel_configs:
      - {{source_labels: [__name__], regex: "DCGM_.*", action: keep}}
  - name: selfhosted
    url: {url}/selfhosted
    fallback: true
    queue_config: {{batch_send_deadline: 20ms}}
"""


def _chromium() -> str:
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail("Debian's chromium is missing: .ci/run installs it")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)")


Cells = dict[str, dict[str, str]]
Names = dict[str, list[list[str]]]


def _browse(url: str, shot: Path, expected: dict[str, str]) -> tuple[Cells, Names, list[str]]:
    """Open ``url`` in headless Chromium; wait until the page shows ``expected`` (destination
    -> samples sent, as text); return the destinations' cells (field -> text), their top
    metric names ([name, share text]), and the console errors and page errors seen. Saves a
    screenshot to ``shot``."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 600})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, wait_until="load", timeout=15_000)
            page.wait_for_function(
                """expected => Object.entries(expected).every(([name, sent]) => {
                     const c = document.querySelector(
                       `tr[data-destination="${name}"] td[data-field="sent_samples_total"]`);
                     return c && c.textContent === sent; })""",
                arg=expected, timeout=15_000,
            )  # fmt: skip
            page.wait_for_timeout(2_500)  # one more refresh: rates computed, still no error
            names = page.evaluate(
                """() => Object.fromEntries([...document.querySelectorAll(
                     "#top-names table[data-destination]")].map(t => [t.dataset.destination,
                     [...t.querySelectorAll("tr[data-metric]")].map(r => [r.dataset.metric,
                       r.querySelector('td[data-field="share"]').textContent])]))"""
            )  # fmt: skip
            cells = page.evaluate(
                """() => Object.fromEntries([...document.querySelectorAll("tr[data-destination]")]
                     .map(r => [r.dataset.destination, Object.fromEntries(
                       [...r.querySelectorAll("td[data-field]")]
                       .map(td => [td.dataset.field, td.textContent]))]))"""
            )  # fmt: skip
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    return cells, names, errors


def _by_reason(router: RouterServer, sample: str, destination: str) -> str:
    """What the page shows for a counter by reason: "reason: n, ..." sorted, or "0"."""
    found = {s.labels["reason"]: s.value for family in router.metrics.registry.collect()
             for s in family.samples
             if s.name == sample and s.labels.get("destination") == destination}  # fmt: skip
    return ", ".join(f"{r}: {v:,.0f}" for r, v in sorted(found.items())) or "0"


PAGE_CASES = [
    # id, requests sent before the page opens, samples expected sent per destination, top names
    ("after_traffic", 1, {"workspace": "8", "selfhosted": "5"},
     {"workspace": [["DCGM_FI_DEV_GPU_UTIL", "100 %"]], "selfhosted": [["node_load1", "100 %"]]}),
    ("idle_router", 0, {"workspace": "0", "selfhosted": "0"},  # hit ratio NaN in /metrics
     {"workspace": [], "selfhosted": []}),
]  # fmt: skip


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("requests", "expected", "top_names"), [c[1:] for c in PAGE_CASES],
                         ids=[c[0] for c in PAGE_CASES])  # fmt: skip
async def test_status_page_in_chromium_shows_what_metrics_shows(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession,
    tmp_path: Path, requests: int, expected: dict[str, str], top_names: Names,
) -> None:  # fmt: skip
    _chromium()
    router: RouterServer = await start_router(ROUTER.format(url=fresh_capture.url("").rstrip("/")))
    series = [Series((("__name__", "DCGM_FI_DEV_GPU_UTIL"), ("gpu", str(g))), ((1_000, 50.0),))
              for g in range(8)]  # fmt: skip
    series += [Series((("__name__", "node_load1"), ("i", str(i))), ((1_000, 1.0),))
               for i in range(5)]  # fmt: skip
    for _ in range(requests):
        assert (await post_write(http, router, build_body(series)))[0] == 204

    def sent(name: str) -> float:
        return metric_value(router, "rwrouter_sent_samples_total", destination=name)

    await eventually(lambda: all(f"{sent(n):,.0f}" == v for n, v in expected.items()),
                     timeout=15)  # fmt: skip
    shot = Path(os.environ.get("RWROUTER_TEST_ARTIFACTS") or tmp_path) / f"status-{requests}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    cells, names, errors = await asyncio.to_thread(_browse, router.url + "/", shot, expected)

    assert errors == []
    assert set(cells) == {"workspace", "selfhosted"}
    assert names == top_names  # the first request is always looked at (one a second)
    for name, row in cells.items():
        assert row["sent_samples_total"] == f"{sent(name):,.0f}"
        assert row["shards"] == f"{metric_value(router, 'rwrouter_shards', destination=name):,.0f}"
        assert row["dropped"] == _by_reason(router, "rwrouter_samples_dropped_total", name)
        assert row["retries"] == _by_reason(router, "rwrouter_retries_total", name)
        assert row["sent_rate"] == "0"  # nothing more was sent between the last two refreshes
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_index_is_plain_text_without_a_browser(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    router = await start_router(ROUTER.format(url=fresh_capture.url("").rstrip("/")))
    async with http.get(router.url + "/", headers={"Accept": "*/*"}) as resp:
        assert resp.status == 200 and resp.content_type == "text/plain"
        assert "GET /-/status" in await resp.text()
    async with http.get(router.url + "/", headers={"Accept": "text/html"}) as resp:
        assert resp.content_type == "text/html" and "<script>" in await resp.text()
    async with http.get(router.url + "/-/status") as resp:
        status = await resp.json()
    assert set(status["destinations"]) == {"workspace", "selfhosted"}
    assert status["destinations"]["workspace"]["sent_samples_total"] == 0.0
