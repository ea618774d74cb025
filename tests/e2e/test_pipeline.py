"""End to end: the demo pipeline with real Prometheus processes and rwrouter as a subprocess.

    exporter nodes -> sender Prometheus -> rwrouter -> workspace double (allowlisted DCGM, SigV4)
                                                    -> self-hosted Prometheus (everything else)

One module-scoped :class:`DemoPipeline` (2 nodes, 1 s scrape interval). Every wait is a bounded
poll. Staleness: Prometheus marks a vanished target's series with the NaN whose bits are
``0x7ff0000000000002``; the double must store exactly those bits, and the self-hosted TSDB only
recognises exactly those bits as stale. The CLI smoke test runs first, before the pipeline.
"""

from __future__ import annotations

import json
import os
import shlex
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import re2  # type: ignore[import-untyped]

from rwrouter.audit import SECONDS_PER_MONTH, monthly_cost
from rwrouter.config.model import AMP_PRICE_TIERS
from rwrouter.demo.configs import ALLOWLIST, SHADOW_DESTINATION
from rwrouter.demo.fleet import DCGM_FIELDS, GPUS_PER_NODE
from rwrouter.demo.pipeline import DemoPipeline, LabelSet
from rwrouter.demo.summary import names_of
from rwrouter.wire import compress, remote_pb2, splice_compressed
from tests.support.polling import wait_for
from tests.support.prometheus import prometheus_binary

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(90)]

STALE_BITS = 0x7FF0000000000002
NODES = 2
SERIES_PER_NODE = 730
#: up, scrape_duration_seconds, scrape_samples_scraped, scrape_samples_post_metric_relabeling,
#: scrape_series_added
SYNTHETIC_PER_TARGET = 5
ALLOWED = re2.compile(ALLOWLIST)
ALLOWED_NAMES = {name for name, _, _ in DCGM_FIELDS if ALLOWED.fullmatch(name)}
ALLOWED_PER_NODE = len(ALLOWED_NAMES) * GPUS_PER_NODE


def name_of(key: tuple[tuple[str, str], ...]) -> str:
    return dict(key)["__name__"]


def _demo_processes(marker: str) -> list[str]:
    """Command lines of live processes mentioning ``marker`` (a unique work dir path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and str(os.getpid()) != entry.name:
            found.append(cmdline)
    return found


# -- (e) the CLI, first: it runs alone before the module's pipeline starts ---------------------
def test_cli_demo_runs_prints_summary_and_leaves_no_process(tmp_path: Path) -> None:
    prometheus_binary()
    workdir = tmp_path / "cli-demo"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rwrouter",
            "demo",
            "--duration",
            "12",
            "--nodes",
            "1",
            "--workdir",
            str(workdir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    expected = (
        "workspace double:",
        "self-hosted Prometheus:",
        "rwrouter: received",
        "self-hosted Prometheus UI: http://127.0.0.1:",
        "rwrouter demo: stopped",
    )
    for text in expected:
        assert text in out, out[-3000:]
    assert "rejected: none" in out, out[-3000:]
    # Where to look, once (not after every summary): each store's query URL, a compare command.
    once = (
        "  workspace query (SigV4, service aps): http://127.0.0.1:",
        "  self-hosted query: http://127.0.0.1:",
        # started as `python -m rwrouter`: the printed command calls it so (it runs if pasted)
        "  compare the workspace with the sender's own copy (after a minute: its --end is 30 s "
        f"ago by default): {shlex.quote(sys.executable)} -m "
        f"rwrouter compare --config {workdir / 'rwrouter.yaml'} --self-hosted http://127.0.0.1:",
        "  rwrouter status page: http://127.0.0.1:",
    )
    assert [out.count(text) for text in once] == [1] * len(once), out[-3000:]
    # One periodic summary (t=10 s), then drain, the final figures, and the stopped line last.
    assert out.count("── rwrouter demo, t=") == 2, out[-3000:]
    drained = out.index("rwrouter demo: drained; final figures:")
    assert out.rindex("── rwrouter demo, t=") > drained
    assert out.rstrip().splitlines()[-1] == "rwrouter demo: stopped"
    final = out[drained:]
    assert "not delivered: none" in final and "rejected: none" in final, final
    assert (workdir / "rwrouter.yaml").is_file()


# -- the pipeline ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoPipeline]:
    prometheus_binary()  # skip locally / fail on CI when missing
    demo = DemoPipeline(
        workdir=tmp_path_factory.mktemp("pipeline"), nodes=NODES, scrape_interval_s=1.0
    )
    demo.start()
    try:
        yield demo
    finally:
        demo.stop()
    assert _demo_processes(str(demo.workdir)) == []


def self_hosted_by_name(pipeline: DemoPipeline) -> dict[str, int]:
    assert pipeline.self_hosted is not None
    result = pipeline.self_hosted.query('count by (__name__) ({__name__=~".+"})')
    return {row["metric"]["__name__"]: int(row["value"][1]) for row in result}


def test_only_allowlisted_dcgm_series_reach_the_workspace_all_signed(
    pipeline: DemoPipeline,
) -> None:
    expected = NODES * ALLOWED_PER_NODE

    def stored() -> dict[LabelSet, dict[int, int]] | None:
        # The double stores a request's series before it records the request: wait for both.
        s = pipeline.workspace_series()
        return s if len(s) >= expected and pipeline.double.request_count > 0 else None

    series = wait_for(stored, timeout=20, what=f"{expected} series at the workspace double")
    names = {name_of(key) for key in series}
    assert names == ALLOWED_NAMES
    assert len(series) == expected
    double = pipeline.double
    assert dict(double.rejections) == {}
    assert double.request_count > 0
    assert double.verified_signatures == double.request_count
    assert all(r.status == 200 and r.check is None for r in list(double.requests))


def test_every_other_series_is_in_the_self_hosted_prometheus(pipeline: DemoPipeline) -> None:
    exporter_names = {
        name for name, _, _, _ in pipeline.fleet.nodes[0].model.families(0.0)
    } - ALLOWED_NAMES
    expected = NODES * (SERIES_PER_NODE - ALLOWED_PER_NODE + SYNTHETIC_PER_TARGET)

    def stored() -> dict[str, int] | None:
        c = self_hosted_by_name(pipeline)
        return c if sum(c.values()) >= expected else None

    counts = wait_for(stored, timeout=20, what=f"{expected} series in the self-hosted Prometheus")
    assert sum(counts.values()) == expected
    assert exporter_names <= set(counts)
    assert not set(counts) & ALLOWED_NAMES
    assert pipeline.self_hosted is not None
    assert pipeline.self_hosted.query(f'count({{__name__=~"{ALLOWLIST}"}})') == []


def test_scraped_series_equal_workspace_plus_self_hosted(pipeline: DemoPipeline) -> None:
    assert pipeline.sender is not None
    sender = pipeline.sender

    def totals() -> tuple[int, int, int] | None:
        scraped = sender.query('count({__name__=~".+"})')
        total = int(scraped[0]["value"][1]) if scraped else 0
        stored = (len(pipeline.workspace_series()), sum(self_hosted_by_name(pipeline).values()))
        return (total, *stored) if total and total == sum(stored) else None

    scraped, workspace, self_hosted = wait_for(totals, timeout=20, what="equal totals")
    assert scraped == workspace + self_hosted == NODES * (SERIES_PER_NODE + SYNTHETIC_PER_TARGET)


def _audit(pipeline: DemoPipeline) -> dict[str, Any]:
    assert pipeline.router is not None
    with urllib.request.urlopen(f"{pipeline.router.url}/-/audit?top=0", timeout=5) as response:
        report: dict[str, Any] = json.load(response)
    return report


def test_audit_counts_the_series_the_stores_hold(pipeline: DemoPipeline) -> None:
    """The audit's active series per metric name equal what the real stores hold: the
    workspace's (``audit: true``) = the series the double stored; the shadow destination's
    (every DCGM family, never sent) = the DCGM series of the double and the self-hosted
    Prometheus together. Samples/s and the cost follow from the report's own figures."""
    dcgm = {name for name, _, _ in DCGM_FIELDS}

    def stored() -> tuple[dict[str, int], dict[str, int]] | None:
        workspace = names_of(pipeline.workspace_series())
        every_dcgm = {
            **{n: c for n, c in self_hosted_by_name(pipeline).items() if n in dcgm},
            **workspace,
        }
        if sum(workspace.values()) < NODES * ALLOWED_PER_NODE or set(every_dcgm) != dcgm:
            return None
        return workspace, every_dcgm

    def audited() -> tuple[dict[str, Any], dict[str, int], dict[str, int]] | None:
        report = _audit(pipeline)
        by_dest = {
            d["name"]: {m["name"]: m["active_series"] for m in d["metrics"]}
            for d in report["destinations"]
        }
        rate = report["destinations"][-1]["samples_per_second"]
        series = report["destinations"][-1]["active_series"]
        # 1 s scrapes: each DCGM series carries about one sample a second, once the first
        # requests (and any backlog Prometheus sent first) are a small part of the average.
        if not 0.8 * series < rate < 1.2 * series:
            return None
        return (
            (report, by_dest["workspace"], by_dest[SHADOW_DESTINATION])
            if (
                (expected := stored())
                and (by_dest["workspace"], by_dest[SHADOW_DESTINATION]) == expected
            )
            else None
        )

    report, workspace, every_dcgm = wait_for(audited, timeout=30, what="audit = stores")
    assert set(workspace) == ALLOWED_NAMES and set(every_dcgm) == dcgm
    dests = {d["name"]: d for d in report["destinations"]}
    assert [d["name"] for d in report["destinations"]] == ["workspace", SHADOW_DESTINATION]
    assert (dests["workspace"]["shadow"], dests[SHADOW_DESTINATION]["shadow"]) == (False, True)
    shadow = dests[SHADOW_DESTINATION]
    assert shadow["active_series"] == sum(every_dcgm.values())
    assert shadow["series_limit_ratio"] == shadow["active_series"] / 50_000_000
    assert shadow["monthly_cost"] == pytest.approx(
        monthly_cost(shadow["samples_per_second"] * SECONDS_PER_MONTH, AMP_PRICE_TIERS)
    )
    assert dests["workspace"]["monthly_cost"] < shadow["monthly_cost"]
    # Nothing was ever sent for the shadow destination.
    assert SHADOW_DESTINATION not in pipeline.summary().router.sent


def test_stopped_node_staleness_markers_are_bit_exact_and_stale(pipeline: DemoPipeline) -> None:
    node = pipeline.fleet.nodes[1]
    hostname, target = node.model.hostname, node.target
    assert pipeline.self_hosted is not None
    self_hosted = pipeline.self_hosted
    exporter_series = f'count({{instance="{target}", __name__!~"up|scrape_.*"}})'
    before_s = time.time()
    node.stop()

    def node_series() -> dict[tuple[tuple[str, str], ...], dict[int, int]]:
        return {
            k: v
            for k, v in pipeline.workspace_series().items()
            if dict(k).get("Hostname") == hostname
        }

    def all_marked() -> list[int] | None:
        series = node_series()
        last = [max(samples.items()) for samples in series.values()]
        if len(last) == ALLOWED_PER_NODE and all(bits == STALE_BITS for _, bits in last):
            return [ts for ts, _ in last]
        return None

    marker_ts = wait_for(all_marked, timeout=20, what="staleness markers at the double")
    for samples in node_series().values():  # real values came before the marker
        values = [bits for ts, bits in sorted(samples.items()) if ts < min(marker_ts)]
        assert values and all(bits != STALE_BITS for bits in values)
        assert struct.unpack("<d", struct.pack("<Q", values[-1]))[0] >= 0
    after_s = max(marker_ts) / 1000 + 0.5
    wait_for(lambda: time.time() > after_s + 0.1 or None, timeout=5, what="marker time")
    wait_for(
        lambda: self_hosted.query(exporter_series, time_s=after_s) == [] or None,
        timeout=20,
        what="stale series in the self-hosted Prometheus",
    )
    before = self_hosted.query(exporter_series, time_s=before_s)
    assert int(before[0]["value"][1]) == SERIES_PER_NODE - ALLOWED_PER_NODE
    other = pipeline.fleet.nodes[0].target
    still = self_hosted.query(
        f'count({{instance="{other}", __name__!~"up|scrape_.*"}})', time_s=after_s
    )
    assert int(still[0]["value"][1]) == SERIES_PER_NODE - ALLOWED_PER_NODE


def test_a_spliced_body_is_one_write_request_for_prometheus(pipeline: DemoPipeline) -> None:
    """rwrouter sends several stored records as one request by splicing their snappy blocks
    (:func:`rwrouter.wire.splice_compressed`); Prometheus' own decoder (Go snappy, Go
    protobuf) takes it as one write request carrying every part's series. Runs last: it adds
    series to the self-hosted Prometheus."""
    store = pipeline.self_hosted
    assert store is not None
    now_ms = int(time.time() * 1000)
    blocks = []
    for part in range(3):
        request = remote_pb2.WriteRequest()
        series = request.timeseries.add()
        series.labels.add(name="__name__", value="rwrouter_splice_check")
        series.labels.add(name="part", value=str(part))
        series.samples.add(value=float(part), timestamp=now_ms)
        blocks.append(compress(request.SerializeToString() * (part + 1)))  # repeats: copies
    status, answer = store.write(splice_compressed(blocks))
    assert status == 204, answer
    found = wait_for(
        lambda: store.query("rwrouter_splice_check"), timeout=10, what="the spliced series"
    )
    assert {row["metric"]["part"]: float(row["value"][1]) for row in found} == {
        "0": 0.0,
        "1": 1.0,
        "2": 2.0,
    }
