"""The status page at ``/``, in a real headless Chromium (Debian's ``chromium``, driven by
Playwright): it loads without console errors, refreshes itself, and shows the numbers
``/metrics`` shows, and in its Audit section those of ``GET /-/audit`` (or a hint when no
destination is audited, a note when the audit cannot be fetched). A screenshot is saved
(``status-<requests>.png`` in the test's temporary directory, or in ``RWROUTER_TEST_ARTIFACTS``
when set).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from rwrouter.metrics.expositions import KEPT_OUT_REASONS
from rwrouter.server.runner import RouterServer
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.browser import chromium, page_shows
from tests.support.capture import CaptureServer
from tests.support.series import Series, build_body

if TYPE_CHECKING:
    from playwright.sync_api import Route


ROUTER = """
remote_write:
  - name: workspace
    url: {url}/workspace
    audit: true
    queue_config: {{batch_send_deadline: 20ms}}
    write_relabel_configs:
      - {{source_labels: [__name__], regex: "DCGM_.*", action: keep}}
  - name: selfhosted
    url: {url}/selfhosted
    fallback: true
    queue_config: {{batch_send_deadline: 20ms}}
  - {{name: workspace-audit, shadow: true,
     write_relabel_configs: [{{source_labels: [__name__], regex: ".*", action: keep}}]}}
"""

NOT_AUDITED = """
remote_write:
  - name: selfhosted
    url: {url}/selfhosted
    queue_config: {{batch_send_deadline: 20ms}}
"""


Cells = dict[str, dict[str, str]]
Names = dict[str, list[list[str]]]
Report = dict[str, Any]  # GET /-/audit (rwrouter.audit.build_report)
Audit = dict[str, dict[str, Any]]  # audited destination -> what its block shows (AUDIT_JS)

# Per audited destination: its shadow badge, "observed" line, summary cells and top names' cells.
AUDIT_JS = """() => Object.fromEntries([...document.querySelectorAll("[data-audit-destination]")]
  .map(d => {
    const fields = el => Object.fromEntries([...el.querySelectorAll("td[data-field]")]
      .map(td => [td.dataset.field, td.textContent]));
    return [d.dataset.auditDestination, {
      shadow: d.querySelector('[data-field="shadow"]') !== null,
      observed: d.querySelector('[data-field="observed"]').textContent,
      summary: fields(d.querySelector('table[data-field="summary"]')),
      metrics: [...d.querySelectorAll("tr[data-audit-metric]")].map(fields)}]; }))"""


@dataclass(frozen=True, kw_only=True)
class Seen:
    """What the page showed: ``cells`` (per destination, field -> text), ``names`` (their top
    metric names, [name, share text]), ``audit`` (:data:`AUDIT_JS`) and ``report``, the last
    ``GET /-/audit`` answer the page received when ``audit`` was read; ``audit_urls`` (the
    page's /-/audit requests) in ``seconds`` open; ``audit_bottom``: the lowest pixel of the
    Audit section; ``errors``: console errors and page errors."""

    cells: Cells
    names: Names
    audit: Audit
    report: Report
    audit_urls: list[str]
    seconds: float
    audit_bottom: float
    errors: list[str]


def _browse(url: str, shot: Path, expected: dict[str, str]) -> Seen:
    """Open ``url`` in headless Chromium; wait until the page shows ``expected`` (destination
    -> samples sent, as text) and its Audit section the last /-/audit answer it received; say
    what it showed. Saves a screenshot to ``shot``."""
    from playwright.sync_api import Response, sync_playwright

    errors: list[str] = []
    audits: list[Response] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 600})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("response", lambda r: audits.append(r) if "/-/audit" in r.url else None)
            opened = time.monotonic()
            page.goto(url, wait_until="load", timeout=15_000)
            page.wait_for_function(
                """expected => Object.entries(expected).every(([name, sent]) => {
                     const c = document.querySelector(
                       `tr[data-destination="${name}"] td[data-field="sent_samples_total"]`);
                     return c && c.textContent === sent; })""",
                arg=expected,
                timeout=15_000,
            )
            page.wait_for_timeout(2_500)  # one more refresh: rates computed, still no error
            names = page.evaluate(
                """() => Object.fromEntries([...document.querySelectorAll(
                     "#top-names table[data-destination]")].map(t => [t.dataset.destination,
                     [...t.querySelectorAll("tr[data-metric]")].map(r => [r.dataset.metric,
                       r.querySelector('td[data-field="share"]').textContent])]))"""
            )
            cells = page.evaluate(
                """() => Object.fromEntries([...document.querySelectorAll("tr[data-destination]")]
                     .map(r => [r.dataset.destination, Object.fromEntries(
                       [...r.querySelectorAll("td[data-field]")]
                       .map(td => [td.dataset.field, td.textContent]))]))"""
            )
            deadline = time.monotonic() + 5  # the page renders an answer as soon as it has it
            while True:
                report: Report = audits[-1].json() if audits else {}
                audit = page.evaluate(AUDIT_JS)
                if (report and audit == _audit_shown(report)) or time.monotonic() > deadline:
                    break
                page.wait_for_timeout(100)
            box = page.locator("#audit-footer").bounding_box()
            page.screenshot(path=str(shot), full_page=True)
            seconds = time.monotonic() - opened
        finally:
            browser.close()
    return Seen(
        cells=cells,
        names=names,
        audit=audit,
        report=report,
        audit_urls=[r.url for r in audits],
        seconds=seconds,
        audit_bottom=box["y"] + box["height"] if box else 0.0,
        errors=errors,
    )


def _fmt(value: float, digits: int = 0, *, fixed: bool = False) -> str:
    """The page's ``fmt``: ``toLocaleString("en-US", {maximumFractionDigits: digits})`` (and
    ``minimumFractionDigits`` when ``fixed``): ICU rounds the shortest decimal form of the
    double (Python's repr) half away from zero."""
    exact = Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP)
    text = f"{exact:,.{digits}f}"
    return text if fixed or "." not in text else text.rstrip("0").rstrip(".")


def _seconds(value: float) -> str:
    """The page's ``seconds``."""
    if abs(value) < 120:
        return _fmt(value, 1) + " s"
    return _fmt(value / 60, 1) + " min" if abs(value) < 7200 else _fmt(value / 3600, 1) + " h"


def _significant(value: float) -> str:
    """``toLocaleString("en-US", {maximumSignificantDigits: 3})`` (rounded as :func:`_fmt`)."""
    exact = Decimal(repr(float(value)))
    if exact:
        exact = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 2), ROUND_HALF_UP)
    return f"{exact.normalize():,f}"


def _count(value: float) -> str:
    """The page's ``count``: 3 significant digits and k, M, B, T."""
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{_significant(value / size)} {unit}"
    return _fmt(value)


def _percent(ratio: float) -> str:
    """The page's ``percent``: 3 significant digits."""
    return _significant(ratio * 100) + " %"


def _audit_shown(report: Report) -> Audit:
    """What the Audit section shows for ``report`` (a GET /-/audit answer), as AUDIT_JS reads
    it, formatted as the page formats."""
    window = _seconds(report["window_seconds"])
    shown: Audit = {}
    for d in report["destinations"]:
        shown[d["name"]] = {
            "shadow": d["shadow"],
            "observed": f"observed for a whole {window} window"
            if d["complete"]
            else f"observed {_seconds(d['observed_seconds'])} of the {window}"
            " window: series that come less often may be missing",
            "summary": {
                "active_series": ("at least " if d["capped"] else "") + _fmt(d["active_series"]),
                "series_limit_ratio": _percent(d["series_limit_ratio"]),
                "samples_per_second": _fmt(d["samples_per_second"], 1),
                "monthly_samples": _count(d["monthly_samples"]),
                "monthly_cost": f"{report['currency']} {_fmt(d['monthly_cost'], 2, fixed=True)}",
            },
            "metrics": [
                {
                    "metric": m["name"] or "(no name)",
                    "active_series": _fmt(m["active_series"]),
                    "samples_per_second": _fmt(m["samples_per_second"], 1),
                    "monthly_cost": _fmt(m["monthly_cost"], 2, fixed=True),
                }
                for m in d["metrics"]
            ],
        }
    return shown


def _png_height(shot: Path) -> int:
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[20:24], "big")


def _counts(router: RouterServer, sample: str, destination: str) -> dict[str, float]:
    return {
        s.labels["reason"]: s.value
        for family in router.metrics.registry.collect()
        for s in family.samples
        if s.name == sample and s.labels.get("destination") == destination
    }


def _by_reason(router: RouterServer, sample: str, destination: str) -> str:
    """What the page shows for a counter by reason: "reason: n, ..." sorted, or "0"; for
    drops, only the losses (the reasons the rules decide are shown as kept out)."""
    found = _counts(router, sample, destination)
    if sample == "rwrouter_samples_dropped_total":
        found = {r: n for r, n in found.items() if r not in KEPT_OUT_REASONS}
    return ", ".join(f"{r}: {v:,.0f}" for r, v in sorted(found.items())) or "0"


def _kept_out(router: RouterServer, destination: str) -> str:
    """What the page shows as kept out by rules: "N samples by its rules", or "0"."""
    kept = _counts(router, "rwrouter_samples_dropped_total", destination).get("relabel", 0.0)
    return f"{kept:,.0f} samples by its rules" if kept else "0"


Audited = dict[str, tuple[bool, int, list[tuple[str, int]]]]  # see AUDITED
AUDITED: Audited = {  # destination -> shadow, active series, top names with their active series
    "workspace": (False, 8, [("DCGM_FI_DEV_GPU_UTIL", 8)]),
    "workspace-audit": (True, 13, [("DCGM_FI_DEV_GPU_UTIL", 8), ("node_load1", 5)]),
}
NOT_YET: Audited = {"workspace": (False, 0, []), "workspace-audit": (True, 0, [])}

PAGE_CASES = [
    # id, requests sent before the page opens, samples expected sent per destination, top names,
    # the audit
    (
        "after_traffic",
        1,
        {"workspace": "8", "selfhosted": "5"},
        {"workspace": [["DCGM_FI_DEV_GPU_UTIL", "100 %"]], "selfhosted": [["node_load1", "100 %"]]},
        AUDITED,
    ),
    (
        "idle_router",
        0,
        {"workspace": "0", "selfhosted": "0"},  # hit ratio NaN in /metrics
        {"workspace": [], "selfhosted": []},
        NOT_YET,
    ),
]


def _audited(report: Report) -> Audited:
    return {
        d["name"]: (
            d["shadow"],
            d["active_series"],
            [(m["name"], m["active_series"]) for m in d["metrics"]],
        )
        for d in report["destinations"]
    }


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("requests", "expected", "top_names", "audited"),
    [c[1:] for c in PAGE_CASES],
    ids=[c[0] for c in PAGE_CASES],
)
async def test_status_page_in_chromium_shows_what_metrics_shows(
    start_router: StartRouter,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    requests: int,
    expected: dict[str, str],
    top_names: Names,
    audited: Audited,
) -> None:
    chromium()
    router: RouterServer = await start_router(ROUTER.format(url=fresh_capture.url("").rstrip("/")))
    series = [
        Series((("__name__", "DCGM_FI_DEV_GPU_UTIL"), ("gpu", str(g))), ((1_000, 50.0),))
        for g in range(8)
    ]
    series += [
        Series((("__name__", "node_load1"), ("i", str(i))), ((1_000, 1.0),)) for i in range(5)
    ]
    for _ in range(requests):
        assert (await post_write(http, router, build_body(series)))[0] == 204

    def sent(name: str) -> float:
        return metric_value(router, "rwrouter_sent_samples_total", destination=name)

    await eventually(lambda: all(f"{sent(n):,.0f}" == v for n, v in expected.items()), timeout=15)
    shot = Path(os.environ.get("RWROUTER_TEST_ARTIFACTS") or tmp_path) / f"status-{requests}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    seen = await asyncio.to_thread(_browse, router.url + "/", shot, expected)
    async with http.get(router.url + "/-/audit?top=10") as resp:
        assert resp.status == 200
        report_now = await resp.json()

    assert seen.errors == []
    assert set(seen.cells) == {"workspace", "selfhosted"}  # a shadow destination sends nothing
    assert seen.names == top_names  # the first request is always looked at (one a second)
    for name, row in seen.cells.items():
        assert row["sent_samples_total"] == f"{sent(name):,.0f}"
        assert row["shards"] == f"{metric_value(router, 'rwrouter_shards', destination=name):,.0f}"
        assert row["dropped"] == _by_reason(router, "rwrouter_samples_dropped_total", name)
        assert row["kept_out"] == _kept_out(router, name)
        assert row["unsent"] == "nothing: all sent"  # whatever the disk's segment files hold
        assert row["retries"] == _by_reason(router, "rwrouter_retries_total", name)
        assert row["sent_rate"] == "0"  # nothing more was sent between the last two refreshes
    if requests:  # the workspace's keep rule routes node_* away: shown, not as a loss
        assert seen.cells["workspace"]["kept_out"] != "0"
    # The Audit section: the answer the page received, every figure formatted as the page does
    # (rates and costs change with time: the same answer); the counts also as /-/audit says now.
    assert seen.audit == _audit_shown(seen.report)
    assert _audited(seen.report) == _audited(report_now) == audited
    assert {
        name: (
            a["shadow"],
            a["summary"]["active_series"],
            [(m["metric"], m["active_series"]) for m in a["metrics"]],
        )
        for name, a in seen.audit.items()
    } == {
        name: (shadow, f"{n:,}", [(metric, f"{m:,}") for metric, m in top])
        for name, (shadow, n, top) in audited.items()
    }
    assert all(a["summary"]["monthly_cost"].startswith("USD ") for a in seen.audit.values())
    # At load, then every 15 s (not with every 2 s refresh); 10 names a destination.
    assert 1 <= len(seen.audit_urls) <= 1 + seen.seconds // 15
    assert all(u == router.url + "/-/audit?top=10" for u in seen.audit_urls)
    assert 0 < seen.audit_bottom <= _png_height(shot)  # the screenshot shows the Audit section


AUDIT_STATES = [
    # id, how /-/audit answers the page (None: the router answers), what the section shows
    (
        "no_audited_destination",
        None,
        "No audited destination: set shadow: true (counted, never sent) or audit: true (sent and "
        "counted) on a remote_write entry; see docs/configuration.md.",
    ),
    ("http_error", {"status": 503, "body": "down"}, "(audit unavailable: HTTP 503)"),
    ("unreachable", "connectionrefused", "(audit unavailable: Failed to fetch)"),
]


def _answer(answer: dict[str, Any] | str) -> Callable[[Route], None]:
    """A Playwright route handler: fulfil with ``answer`` (a dict), or fail with that error."""

    def handle(route: Route) -> None:
        if isinstance(answer, dict):
            route.fulfill(**answer)
        else:
            route.abort(answer)

    return handle


START_MS = 1_700_000_000_000  # the page's clock (fake: timers fire only as the test says)


@dataclass(frozen=True, kw_only=True)
class States:
    """``shown``: per :data:`AUDIT_STATES` case the Audit section's hint or note, then
    ``recovered``; ``requests``: the page's requests (path -> count) in the 14 s after the last
    case loaded (``at_14s``) and up to 15 s (``at_15s``); ``console``: console errors;
    ``thrown``: page errors."""

    shown: dict[str, str]
    at_14s: dict[str, int]
    at_15s: dict[str, int]
    console: list[str]
    thrown: list[str]


SHOWS_NOW = """() => document.getElementById("updated").textContent
                   === new Date().toLocaleTimeString()"""
SHOWS_AUDIT = """() => document.getElementById("audit-hint")
                     || document.getElementById("audit-error").textContent"""
RECOVERED = """() => document.getElementById("audit-hint")
                   && !document.getElementById("audit-error").textContent"""


def _browse_audit_states(url: str) -> States:
    """Open ``url`` in headless Chromium once per :data:`AUDIT_STATES` case (/-/audit answered
    as it says), then let the last one's clock run 15 s with /-/audit answered again."""
    from playwright.sync_api import sync_playwright

    shown: dict[str, str] = {}
    console: list[str] = []
    thrown: list[str] = []
    paths: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: thrown.append(str(e)))
            page.on("request", lambda r: paths.append(urlsplit(r.url).path))
            page.clock.install(time=START_MS)
            page.clock.pause_at(START_MS + 1_000)
            for case, answer, _ in AUDIT_STATES:
                page.unroute("**/-/audit*")
                if answer is not None:
                    page.route("**/-/audit*", _answer(answer))
                page.goto(url, wait_until="load", timeout=15_000)
                page.wait_for_function(SHOWS_AUDIT, timeout=15_000)
                hint = page.locator("#audit-hint")
                text = hint.text_content() if hint.count() else page.text_content("#audit-error")
                shown[case] = (text or "").strip()
            page.unroute("**/-/audit*")
            paths.clear()
            page.clock.run_for(14_000)  # the status refreshes every 2 s, the audit not yet
            page.wait_for_function(SHOWS_NOW, timeout=15_000)
            at_14s = Counter(paths)
            page.clock.run_for(1_000)
            page.wait_for_function(RECOVERED, timeout=15_000)
            at_15s = Counter(paths)
            shown["recovered"] = (page.text_content("#audit-hint") or "").strip()
        finally:
            browser.close()
    return States(
        shown=shown, at_14s=dict(at_14s), at_15s=dict(at_15s), console=console, thrown=thrown
    )


@pytest.mark.timeout(60)
async def test_audit_section_without_audited_destination_or_audit(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    chromium()
    router = await start_router(NOT_AUDITED.format(url=fresh_capture.url("").rstrip("/")))
    async with http.get(router.url + "/-/audit") as resp:
        assert (await resp.json())["destinations"] == []
    seen = await asyncio.to_thread(_browse_audit_states, router.url + "/")
    assert seen.shown == {case: text for case, _, text in AUDIT_STATES} | {
        "recovered": AUDIT_STATES[0][2]
    }
    assert seen.thrown == []  # the page's script never fails; Chromium logs failed loads itself
    assert all(m.startswith("Failed to load resource") for m in seen.console), seen.console
    assert len(seen.console) == len(AUDIT_STATES) - 1
    assert seen.at_14s.get("/-/status", 0) >= 6 and "/-/audit" not in seen.at_14s
    assert seen.at_15s["/-/audit"] == 1


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


# -- HA pairs (ha_dedup) ---------------------------------------------------------------------
HA_ROUTER = """
remote_write:
  - name: workspace
    url: {url}/workspace
    queue_config: {{batch_send_deadline: 20ms}}
    ha_dedup: {{cluster_label: "k8s cluster", failover_timeout: 500ms}}
  - name: selfhosted
    url: {url}/selfhosted
    queue_config: {{batch_send_deadline: 20ms}}
"""
HA_FAILOVER = 0.5  # seconds, as above

# The status page's HA block of the workspace, once it lists both clusters.
HA_JS = """() => {
  const b = document.querySelector('[data-ha="workspace"]');
  if (!b || b.querySelectorAll("tr[data-cluster]").length < 2) return null;
  return {line: b.querySelector("p").textContent,
          others: document.querySelectorAll("[data-ha]").length,
          rows: Object.fromEntries([...b.querySelectorAll("tr[data-cluster]")].map(r => [
            r.dataset.cluster, Object.fromEntries([...r.querySelectorAll("td")].map(
              td => [td.dataset.field, td.textContent]))]))};
}"""


def _ha_body(cluster: str, replica: str, ms: int) -> bytes:
    labels = (("__name__", "up"), ("__replica__", replica), ("k8s cluster", cluster))
    return build_body([Series(labels, ((ms, 1.0),))])


async def test_status_page_shows_ha_dedup_elected_replicas_and_elections(
    start_router: StartRouter, fresh_capture: CaptureServer, http: aiohttp.ClientSession
) -> None:
    chromium()
    router = await start_router(HA_ROUTER.format(url=fresh_capture.url("").rstrip("/")))
    ms = int(time.time() * 1000)
    for cluster, replica in (("c1", "prom-a"), ("c1", "prom-b"), ("c2", "prom-x")):
        assert (await post_write(http, router, _ha_body(cluster, replica, ms)))[0] == 204

    async def status() -> dict[str, Any]:
        async with http.get(router.url + "/-/status") as resp:
            figures: dict[str, Any] = (await resp.json())["destinations"]
            return figures

    first = (await status())["workspace"]["ha_dedup"]
    assert [(c["cluster"], c["replica"], c["elections_total"]) for c in first["clusters"]] == [
        ("c1", "prom-a", 1.0),  # prom-b was dropped
        ("c2", "prom-x", 1.0),
    ]
    # prom-a silent for longer than failover_timeout: prom-b's next request elects it.
    started = time.monotonic()
    await eventually(lambda: time.monotonic() - started > HA_FAILOVER, timeout=5)
    assert (await post_write(http, router, _ha_body("c1", "prom-b", ms + 1000)))[0] == 204
    labels = {"destination": "workspace", "cluster": "c1"}
    assert metric_value(router, "rwrouter_ha_leader_changes_total", **labels) == 2
    deadline = time.monotonic() + 5  # the server keeps a /-/status answer for 1 s
    while (figures := await status())["workspace"]["ha_dedup"]["clusters"][0]["replica"] != (
        "prom-b"
    ):
        assert time.monotonic() < deadline, figures
        await asyncio.sleep(0.05)
    assert figures["selfhosted"]["ha_dedup"] is None
    ha = figures["workspace"]["ha_dedup"]
    assert {k: ha[k] for k in ("cluster_label", "replica_label", "failover_timeout")} == {
        "cluster_label": "k8s cluster",  # a UTF-8 name (Prometheus 3): quoted on the page
        "replica_label": "__replica__",
        "failover_timeout": HA_FAILOVER,
    }
    c1, c2 = ha["clusters"]
    assert (c1["cluster"], c1["replica"], c1["elections_total"]) == ("c1", "prom-b", 2.0)
    assert (c2["cluster"], c2["replica"], c2["elections_total"]) == ("c2", "prom-x", 1.0)
    assert c1["last_seen"] - c2["last_seen"] > HA_FAILOVER  # prom-b sent after the silence
    assert 0 <= time.time() - c1["last_seen"] < 5
    assert metric_value(
        router, "rwrouter_ha_elected_replica_timestamp_seconds", replica="prom-b", **labels
    ) == pytest.approx(c1["last_seen"], abs=0.01)

    shown, errors = await asyncio.to_thread(page_shows, router.url + "/", HA_JS)
    assert errors == []
    assert shown["others"] == 1  # selfhosted has no ha_dedup: no block
    assert shown["line"] == (
        'workspace: cluster_label "k8s cluster", replica_label __replica__, '
        "failover_timeout 0.5 s; "
        "2 clusters"
    )
    rows = shown["rows"]
    assert {c: (r["replica"], r["elections"]) for c, r in rows.items()} == {
        "c1": ("prom-b", "2"),
        "c2": ("prom-x", "1"),
    }
    for row in rows.values():
        assert re.fullmatch(r"\d+(\.\d)? s ago", row["last_seen"]), row
    # dropped: prom-b's first request at the workspace only; the rest sent
    assert (
        metric_value(
            router, "rwrouter_samples_dropped_total", destination="workspace", reason="ha_replica"
        )
        == 1
    )
