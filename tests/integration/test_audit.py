"""The audit in a running router (in-process, aiohttp on 127.0.0.1, a capture server as the
destinations): shadow destinations are counted and never sent, ``GET /-/audit``, the
``rwrouter_audit_*`` metrics, reloads, and ``rwrouter audit`` against the live router."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rwrouter.audit import SECONDS_PER_MONTH, monthly_cost
from rwrouter.config import PriceTier
from rwrouter.server.runner import RouterServer
from tests.integration.conftest import Start, StartRouter, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.prometheus import free_port
from tests.support.series import Series, build_body

ROUTER = """
audit: {{series_limit: 1000, price_tiers: [{{up_to_samples: 1000000, per_million: 2}},
                                           {{per_million: 1}}]}}
remote_write:
  - name: workspace
    url: {url}/workspace
    audit: true
    queue_config: {{batch_send_deadline: 20ms}}
    write_relabel_configs:
      - {{source_labels: [__name__], regex: "DCGM_FI_DEV_GPU_UTIL", action: keep}}
  - name: every-gpu-family
    shadow: true
    write_relabel_configs:
      - {{source_labels: [__name__], regex: "DCGM_.*", action: keep}}
  - name: selfhosted
    url: {url}/selfhosted
    fallback: true
    queue_config: {{batch_send_deadline: 20ms}}
"""
TIERS = (PriceTier(per_million=2.0, up_to_samples=1_000_000), PriceTier(per_million=1.0))
FAMILIES = {
    "DCGM_FI_DEV_GPU_UTIL": 8,
    "DCGM_FI_DEV_FB_USED": 8,
    "DCGM_FI_PROF_PIPE": 4,
    "node_cpu_seconds_total": 3,
}


def base(capture: CaptureServer) -> str:
    return capture.url("").rstrip("/")


def fleet(scrape: int) -> bytes:
    """One scrape of every family: FAMILIES[name] series (one per gpu), 2 samples each."""
    samples = ((scrape * 1000, 1.0), (scrape * 1000 + 1, 2.0))
    return build_body(
        [
            Series((("__name__", name), ("gpu", str(g))), samples)
            for name, count in FAMILIES.items()
            for g in range(count)
        ]
    )


async def audit(http: aiohttp.ClientSession, router: RouterServer, query: str = "") -> Any:
    async with http.get(f"{router.url}/-/audit{query}") as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


def by_name(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {
        d["name"]: {m["name"]: m["active_series"] for m in d["metrics"]}
        for d in report["destinations"]
    }


async def test_shadow_destination_is_counted_never_sent_and_the_fallback_is_unchanged(
    start_router: StartRouter, http: aiohttp.ClientSession, fresh_capture: CaptureServer
) -> None:
    router = await start_router(ROUTER.format(url=base(fresh_capture)))
    for scrape in range(3):  # the same series every scrape count once
        status, text, _ = await post_write(http, router, fleet(scrape))
        assert status == 204, text
    report = await audit(http, router)
    assert by_name(report) == {
        "workspace": {"DCGM_FI_DEV_GPU_UTIL": 8},
        "every-gpu-family": {
            "DCGM_FI_DEV_GPU_UTIL": 8,
            "DCGM_FI_DEV_FB_USED": 8,
            "DCGM_FI_PROF_PIPE": 4,
        },
    }
    shadow = report["destinations"][1]
    assert (shadow["shadow"], shadow["active_series"], shadow["series_limit_ratio"]) == (
        True,
        20,
        0.02,
    )
    assert [m["name"] for m in shadow["metrics"]][-1] == "DCGM_FI_PROF_PIPE"  # fewest series
    assert shadow["monthly_cost"] == pytest.approx(
        monthly_cost(shadow["samples_per_second"] * SECONDS_PER_MONTH, TIERS)
    )
    # The fallback still gets every series the workspace did not keep (the shadow's too).
    await eventually(lambda: fresh_capture.sample_count("/selfhosted") == 3 * 2 * 15)
    names = {dict(labels)["__name__"] for labels in fresh_capture.label_sets("/selfhosted")}
    assert names == {"DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_PIPE", "node_cpu_seconds_total"}
    await eventually(lambda: fresh_capture.sample_count("/workspace") == 3 * 2 * 8)
    assert set(fresh_capture.paths()) == {"/workspace", "/selfhosted"}
    # No queue, no sender, no drop counted for the shadow destination.
    assert not (Path(router.config.storage.path) / "queue" / "every-gpu-family").exists()
    assert router.fanout is not None
    assert [d.name for d in router.fanout.destinations] == ["workspace", "selfhosted"]
    assert (
        metric_value(
            router,
            "rwrouter_samples_dropped_total",
            destination="every-gpu-family",
            reason="relabel",
        )
        == 0
    )
    # The metrics of the audit.
    active = metric_value(router, "rwrouter_audit_active_series", destination="every-gpu-family")
    assert active == 20
    assert metric_value(router, "rwrouter_audit_samples_total", destination="workspace") == 48
    assert metric_value(router, "rwrouter_audit_series_limit") == 1000


TOP_CASES = [
    ("default_lists_every_name_up_to_100", "", 3),
    ("top_1", "?top=1", 1),
    ("top_0_is_all", "?top=0", 3),
]


@pytest.mark.parametrize(
    ("query", "listed"), [c[1:] for c in TOP_CASES], ids=[c[0] for c in TOP_CASES]
)
async def test_audit_top(
    start_router: StartRouter,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
    query: str,
    listed: int,
) -> None:
    router = await start_router(ROUTER.format(url=base(fresh_capture)))
    assert (await post_write(http, router, fleet(0)))[0] == 204
    shadow = (await audit(http, router, query))["destinations"][1]
    assert (len(shadow["metrics"]), shadow["metric_names"]) == (listed, 3)


@pytest.mark.parametrize(
    "top",
    ["-1", "x", "1.5", "", "²", "9" * 5000],
    ids=["negative", "word", "float", "empty", "unicode_digit", "too_many_digits"],
)
async def test_audit_bad_top_is_a_400_with_one_line(
    start_router: StartRouter, http: aiohttp.ClientSession, fresh_capture: CaptureServer, top: str
) -> None:
    router = await start_router(ROUTER.format(url=base(fresh_capture)))
    async with http.get(f"{router.url}/-/audit?top={top}") as resp:
        text = await resp.text()
    assert resp.status == 400
    assert text.startswith("top must be a whole number from 0") and text.count("\n") == 1


async def test_without_audited_destinations_the_report_is_empty(
    start_router: StartRouter, http: aiohttp.ClientSession, fresh_capture: CaptureServer
) -> None:
    router = await start_router(f"remote_write:\n  - url: {fresh_capture.url('/a')}\n")
    assert (await post_write(http, router, fleet(0)))[0] == 204
    report = await audit(http, router)
    assert report["destinations"] == [] and report["series_limit"] == 50_000_000
    assert metric_value(router, "rwrouter_audit_series_limit") == 0  # absent


async def test_reload_keeps_the_counts_of_a_destination_still_audited(
    start_from_file: Start,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
    tmp_path: Path,
) -> None:
    path = tmp_path / "rwrouter.yaml"
    # refresh 0s: every GET /-/audit reads the counts now (else one answer serves 10 s)
    text = ROUTER.format(url=base(fresh_capture)).replace("audit: {", "audit: {refresh: 0s, ")
    text += f"storage: {{path: {tmp_path / 'data'}}}\nserver: {{listen_address: '127.0.0.1:0'}}\n"
    path.write_text(text)
    router = await start_from_file(path)
    assert (await post_write(http, router, fleet(0)))[0] == 204
    # The shadow destination widens to everything; a new shadow destination appears.
    wider = text.replace('regex: "DCGM_.*", action: keep', 'regex: ".*", action: keep')
    later = "remote_write:\n  - {name: later, shadow: true}\n"
    path.write_text(wider.replace("remote_write:\n", later))
    async with http.post(router.url + "/-/reload") as resp:
        assert resp.status == 200, await resp.text()
    report = by_name(await audit(http, router))
    assert list(report) == ["later", "workspace", "every-gpu-family"]
    assert report["workspace"] == {"DCGM_FI_DEV_GPU_UTIL": 8}  # unchanged: kept its counts
    assert report["later"] == report["every-gpu-family"] == {}  # changed or new: afresh
    assert (await post_write(http, router, fleet(1)))[0] == 204
    report = by_name(await audit(http, router))
    assert sum(report["every-gpu-family"].values()) == sum(FAMILIES.values())
    assert report["later"] == report["every-gpu-family"]
    assert router.fanout is not None
    assert [d.name for d in router.fanout.destinations] == ["workspace", "selfhosted"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rwrouter", "audit", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


async def test_rwrouter_audit_reads_a_running_router(
    start_router: StartRouter, http: aiohttp.ClientSession, fresh_capture: CaptureServer
) -> None:
    router = await start_router(ROUTER.format(url=base(fresh_capture)))
    assert (await post_write(http, router, fleet(0)))[0] == 204
    table = await asyncio.to_thread(run_cli, "--url", router.url, "--top", "2")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("destination workspace: observed ")
    assert "  active series     8 (0.8% of the 1,000 limit)" in lines
    shadow = table.stdout.split("destination every-gpu-family (shadow: counted, not sent)")[1]
    rows = [line.split() for line in shadow.splitlines() if line.startswith("  DCGM_")]
    assert [(r[0], r[1]) for r in rows] == [
        ("DCGM_FI_DEV_FB_USED", "8"),
        ("DCGM_FI_DEV_GPU_UTIL", "8"),
    ]
    assert "  ... and 1 more metric names" in shadow
    assert lines[-1].startswith("price (USD, samples a month): 2 per million up to 1 M")
    as_json = await asyncio.to_thread(run_cli, "--url", router.url, "--json", "--top", "0")
    assert as_json.returncode == 0, as_json.stderr
    assert by_name(json.loads(as_json.stdout)) == by_name(await audit(http, router))


def test_rwrouter_audit_without_a_router_says_so_and_fails(tmp_path: Path) -> None:
    result = run_cli("--url", "http://127.0.0.1:1")
    assert result.returncode == 1
    assert result.stderr.startswith("rwrouter audit: cannot read http://127.0.0.1:1/-/audit")
    config = tmp_path / "bad.yaml"
    config.write_text("remote_write: []\n")
    bad = run_cli("--config", str(config))
    assert bad.returncode == 2 and "configuration error" in bad.stderr


async def test_a_router_of_shadow_destinations_only_counts_and_sends_nothing(
    start_router: StartRouter, http: aiohttp.ClientSession
) -> None:
    """Pure audit mode: rwrouter as an extra remote_write of Prometheus, sending nowhere."""
    router = await start_router("remote_write:\n  - {name: everything, shadow: true}\n")
    async with http.get(router.url + "/-/ready") as resp:
        assert resp.status == 200
    for scrape in range(2):
        assert (await post_write(http, router, fleet(scrape)))[0] == 204
    assert router.fanout is not None
    assert router.fanout.destinations == []
    report = await audit(http, router)
    assert sum(by_name(report)["everything"].values()) == sum(FAMILIES.values())
    assert metric_value(router, "rwrouter_received_samples_total") == 2 * 2 * 23


async def test_only_accepted_requests_are_counted(
    start_router: StartRouter, http: aiohttp.ClientSession
) -> None:
    """A destination that is down fills its small queue: the requests answered 503 (sent
    again by Prometheus later) are not counted by the audit; those answered 204 are."""
    dead = f"http://127.0.0.1:{free_port()}/write"
    router = await start_router(
        "remote_write:\n"
        f"  - {{name: down, url: '{dead}', queue_config: {{max_disk_bytes: 16KiB}}}}\n"
        "  - {name: everything, shadow: true}\n"
    )
    statuses = [(await post_write(http, router, fleet(i)))[0] for i in range(30)]
    assert 204 in statuses and 503 in statuses
    received = metric_value(router, "rwrouter_received_samples_total")
    assert received == statuses.count(204) * 2 * sum(FAMILIES.values())
    counted = metric_value(router, "rwrouter_audit_samples_total", destination="everything")
    assert counted == received
