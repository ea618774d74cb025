"""End to end with today's peers: Prometheus 3 (RW 2.0, UTF-8 names) and Debian's 2.42 (RW 1.0)
write to one rwrouter, which sends the critical series to the workspace double and the rest to a
Prometheus 3 store::

    node 0: DCGM + sidecar (UTF-8) --scrape--> p3 (3.16, RW 2.0, metadata-wal-records) --+
    node 1: DCGM + sidecar (legacy) --scrape--> p2 (2.42, RW 1.0, metadata every 1 s) ---+
        rwrouter --SigV4, RW 1.0, names escaped (underscores)--> workspace double (critical)
                 --RW 2.0, names intact, fallback--> Prometheus 3 store (type-and-unit-labels)

Each sender adds ``sender="p3"|"p2"`` (external labels), so no series comes from both. Native
histograms are pushed into each sender's remote-write receiver (Prometheus forwards what its
WAL holds, received series included): p3 forwards them as RW 2.0, p2 (with
``--enable-feature=native-histograms``) as RW 1.0.

Expected series are computed from the exporter model (:mod:`rwrouter.demo.fleet`,
:mod:`tests.support.sidecar`), the scrape's labels and Prometheus's report series. The store
turns the RW 2.0 metadata of each series into ``__type__``/``__unit__`` labels. rwrouter's
metadata book is per destination and family, whichever sender taught it, so p3 starts first:
once the store holds p3's series, the book knows every family p2 shares with p3 (DCGM, node,
kubelet, ``up``, ``scrape_*``), and p2's series carry type labels from their first sample
(started the other way round, p2's first samples may reach the store before any metadata of
their family, and its report series get none at all: Prometheus 2 sends no metadata for
them; the store then holds untyped twins of those series). Every wait is a bounded poll.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from rwrouter.demo.exporter import ExporterFleet
from rwrouter.doubles.router import RouterProcess
from rwrouter.doubles.workspace import Key, WorkspaceDouble
from rwrouter.doubles.workspace_runner import run_in_thread
from rwrouter.doubles.workspace_store import Series
from rwrouter.protocol import RW2_MESSAGE
from tests.support.peers import peer_binary
from tests.support.polling import wait_for
from tests.support.prometheus import PrometheusProcess, free_port, prometheus_binary
from tests.support.sidecar import SidecarCollector
from tests.support.two_senders import (
    ACCESS_KEY,
    JOB,
    REGION,
    REPORT,
    SECRET,
    SENDER_FLAGS,
    SENDERS,
    TYPE_CODES,
    UTF8,
    WORKSPACE,
    LabelSet,
    Pushed,
    bits,
    bits_to_float,
    escape,
    escape_metric,
    is_critical,
    key,
    name_of,
    push_body,
    pushed_series,
    router_config,
    scraped,
    sender_config,
    typed,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(180)]

STALE_BITS = 0x7FF0000000000002
WINDOW_MS = 5_000


# -- the processes ---------------------------------------------------------------------------------
@dataclass(repr=False)
class Rig:
    """The running processes; ``scraping_ms``: when each sender's first scrape was seen (unix
    ms); ``pushed``: what was pushed into each sender's receiver."""

    fleet: ExporterFleet
    double: WorkspaceDouble
    store: PrometheusProcess
    router: RouterProcess
    senders: dict[str, PrometheusProcess]
    scraping_ms: dict[str, int]
    pushed: dict[str, list[Pushed]]

    def __repr__(self) -> str:
        return f"Rig(router={self.router.url}, store={self.store.url})"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    binaries = {"p3": peer_binary("prometheus"), "p2": prometheus_binary()}  # fail on CI
    work = tmp_path_factory.mktemp("prometheus3")
    fleet = ExporterFleet(nodes=2, seed=3)
    for sender, node in zip(SENDERS, fleet.nodes, strict=True):
        node.registry.register(SidecarCollector(node.model, utf8=UTF8[sender], start_s=time.time()))
    double = WorkspaceDouble(
        region=REGION, workspaces=(WORKSPACE,), credentials={ACCESS_KEY: Key(SECRET)}
    )
    with ExitStack() as stack:  # stopped in reverse: senders, rwrouter (drains), stores
        fleet.start()
        stack.callback(fleet.stop)
        stack.callback(run_in_thread(double).stop)
        store = stack.enter_context(
            PrometheusProcess.start(
                "global: {scrape_interval: 1h}\n",
                binary=binaries["p3"],
                workdir=work / "store",
                extra_args=("--enable-feature=type-and-unit-labels",),
            )
        )
        port = free_port()
        config = work / "rwrouter.yaml"
        config.write_text(
            router_config(
                port=port,
                queues=work / "queues",
                workspace_url=double.url(WORKSPACE),
                store_url=store.url,
            )
        )
        router = RouterProcess(config_path=config, port=port, log_path=work / "rwrouter.log")
        stack.callback(router.stop)
        router.wait_ready(timeout_s=30)
        senders, scraping_ms = {}, {}
        for sender, node in zip(SENDERS, fleet.nodes, strict=True):
            text = sender_config(sender=sender, target=node.target, router_url=router.url)
            senders[sender] = stack.enter_context(
                PrometheusProcess.start(
                    text,
                    binary=binaries[sender],
                    workdir=work / sender,
                    extra_args=SENDER_FLAGS[sender],
                )
            )
            scraping_ms[sender] = _first_scrape(senders[sender], sender, fleet, store)
        pushed = {sender: pushed_series(sender, int(time.time() * 1000)) for sender in senders}
        for sender, prom in senders.items():
            status, answer = prom.write(push_body(pushed[sender]))
            assert status in (200, 204), (sender, status, answer)
        yield Rig(fleet, double, store, router, senders, scraping_ms, pushed)


def _first_scrape(
    prom: PrometheusProcess, sender: str, fleet: ExporterFleet, store: PrometheusProcess
) -> int:
    """Wait for ``sender``'s first scrape; for p3, also for its series in the store (the
    store's metadata book then knows p3's families). Returns when it scraped (unix ms)."""
    wait_for(lambda: prom.query("up"), timeout=20, what=f"{sender} scraping")
    scraping_ms = int(time.time() * 1000)
    if sender == "p3":
        expected = sum(not is_critical(labels) for labels in scraped(fleet, sender))
        wait_for(
            lambda: _count(store, 'count({sender="p3"})') == expected,
            timeout=30,
            what=f"p3's {expected} series in the store",
        )
    return scraping_ms


def _count(prom: PrometheusProcess, promql: str, *, time_s: float | None = None) -> int:
    result = prom.query(promql, time_s=time_s)
    return int(result[0]["value"][1]) if result else 0


# -- what each store must hold -------------------------------------------------------------
def expected_workspace(rig: Rig) -> set[LabelSet]:
    """Critical series of both senders, escaped; the pushed critical ones."""
    out = set()
    for sender in SENDERS:
        out |= {escape(labels) for labels in scraped(rig.fleet, sender) if is_critical(labels)}
        out |= {escape(p.as_written(sender)) for p in rig.pushed[sender] if is_critical(p.labels)}
    return out


def expected_store(rig: Rig) -> set[LabelSet]:
    """Every other series of both senders, names intact, with the type labels of its family
    (pushed series have no metadata)."""
    out = set()
    for sender in SENDERS:
        out |= {
            typed(labels, meta)
            for labels, meta in scraped(rig.fleet, sender).items()
            if not is_critical(labels)
        }
        out |= {p.as_written(sender) for p in rig.pushed[sender] if not is_critical(p.labels)}
    return out


def workspace_series(rig: Rig) -> dict[LabelSet, Series]:
    return dict(rig.double.series(WORKSPACE))  # a copy (the double's loop owns it)


def store_series(rig: Rig) -> set[LabelSet]:
    return {key(row["metric"]) for row in rig.store.query('{__name__=~".+"}[1h]')}


def test_workspace_holds_exactly_the_critical_series_with_escaped_names(rig: Rig) -> None:
    """Both senders' critical series, UTF-8 names escaped with underscores (the double
    refuses UTF-8 names with 400 and RW 2.0 with 415: every request was answered 200)."""
    expected = expected_workspace(rig)
    got = wait_for(
        lambda: (s := set(workspace_series(rig))) >= expected and s,
        timeout=30,
        what=f"{len(expected)} series at the workspace double",
    )
    assert got == expected
    assert all(
        re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name) for labels in got for name, _ in labels
    )
    assert {
        "gpu_utilization",
        "gpu_memory_used_bytes",
        "trainer_gpu_utilization",
        "push_critical_latency",
    } <= {name_of(labels) for labels in got}
    double = rig.double
    assert dict(double.rejections) == {}
    assert {r.status for r in list(double.requests)} == {200}
    assert double.verified_signatures == double.request_count > 0


def test_store_holds_exactly_the_rest_with_utf8_names_and_type_labels(rig: Rig) -> None:
    """Both senders' other series, UTF-8 names as they are, each with its family's
    ``__type__``/``__unit__`` (RW 2.0 metadata, from rwrouter's book), sent in RW 2.0 without
    a fallback; nothing dropped but what the workspace's keep rule drops."""
    expected = expected_store(rig)
    got = wait_for(
        lambda: (s := store_series(rig)) >= expected and s,
        timeout=30,
        what=f"{len(expected)} series in the store",
    )
    assert got == expected
    assert {"trainer.tokens_total", "push.latency"} <= {name_of(labels) for labels in got}
    router = rig.router
    assert (
        router.metric_value(
            "rwrouter_destination_protocol", destination="store", protobuf_message=RW2_MESSAGE
        )
        == 1
    )
    assert router.metric_value("rwrouter_protocol_fallbacks_total") == 0
    for protocol in ("1.0", "2.0"):
        assert (
            router.metric_value("rwrouter_received_protocol_requests_total", protocol=protocol) > 0
        )
    dropped = {
        (m.labels["destination"], m.labels["reason"])
        for m in router.metrics()
        if m.name == "rwrouter_samples_dropped_total" and m.value
    }
    assert dropped == {("workspace", "relabel")}  # the rest, by its keep rule; nothing else


def test_workspace_holds_the_critical_families_metadata_escaped(rig: Rig) -> None:
    """p3's come from its RW 2.0 series (rwrouter derives the entries), p2's from its RW 1.0
    metadata requests (``trainer_gpu_*``: only p2 has them); family names escaped."""
    expected = {}
    for sender in SENDERS:
        for labels, (kind, doc, unit) in scraped(rig.fleet, sender).items():
            if is_critical(labels):  # all gauges: the family is the series' name
                assert kind == "gauge"
                expected[escape_metric(name_of(labels))] = (TYPE_CODES[kind], doc, unit)

    def stored() -> dict[str, tuple[int, str, str]]:
        return {
            name: (m.type, m.help, m.unit)
            for name, m in dict(rig.double.metadata(WORKSPACE)).items()
        }

    got = wait_for(
        lambda: (m := stored()).keys() >= expected.keys() and m,
        timeout=30,
        what="the critical families' metadata at the workspace",
    )
    assert got == expected
    assert got["gpu_memory_used_bytes"][2] == got["trainer_gpu_memory_used_bytes"][2] == "bytes"


def _range(
    prom: PrometheusProcess, selector: str, end_ms: int, **extra: str
) -> dict[LabelSet, list[Any]]:
    """{labels + ``extra``: [(ts ms, value bits)]} of ``selector`` in (end - WINDOW_MS, end]
    (the range is wider and cut here: 2.42's range selectors include their start, 3.x's do
    not)."""
    rows = prom.query(f"{selector}[{2 * WINDOW_MS}ms]", time_s=end_ms / 1000)
    out = {}
    for row in rows:
        points = [(round(float(ts) * 1000), bits(float(value))) for ts, value in row["values"]]
        window = [p for p in points if end_ms - WINDOW_MS < p[0] <= end_ms]
        out[key({**row["metric"], **extra})] = window
    return out


@pytest.mark.parametrize("sender", SENDERS)
def test_stores_hold_the_senders_samples_bit_for_bit(rig: Rig, sender: str) -> None:
    """Over a 5 s window, every scraped series of ``sender`` has at the store (found by its
    typed labels) and at the workspace (by its escaped labels) the samples the sender holds."""
    meta = scraped(rig.fleet, sender)
    end_ms = max(int(time.time() * 1000) - 1_000, rig.scraping_ms[sender] + WINDOW_MS)
    wait_for(lambda: time.time() * 1000 > end_ms + 500, timeout=15, what="the window's end")
    # a sender stores its series without its external labels; it writes them with
    source = _range(rig.senders[sender], f'{{job="{JOB}"}}', end_ms, sender=sender)
    assert set(source) == set(meta)
    counts = sorted({len(points) for points in source.values()})
    assert counts[0] >= 2, counts  # 1 s scrapes (a slow one under load is no failure here)
    critical = {labels for labels in source if is_critical(labels)}
    want_store = {
        typed(labels, meta[labels]): points
        for labels, points in source.items()
        if labels not in critical
    }
    want_workspace = {escape(labels): source[labels] for labels in critical}

    def workspace_points() -> dict[LabelSet, list[Any]]:
        stored = {
            labels: dict(series.samples)
            for labels, series in workspace_series(rig).items()
            if labels in want_workspace
        }
        return {
            labels: sorted(
                (ts, b) for ts, b in samples.items() if end_ms - WINDOW_MS < ts <= end_ms
            )
            for labels, samples in stored.items()
        }

    selector = f'{{sender="{sender}", job="{JOB}"}}'
    wait_for(
        lambda: _range(rig.store, selector, end_ms) == want_store,
        timeout=30,
        what=f"{sender}'s samples in the store",
    )
    wait_for(
        lambda: workspace_points() == want_workspace,
        timeout=30,
        what=f"{sender}'s samples at the workspace",
    )


def _stored_histograms(prom: PrometheusProcess, name: str, **matchers: str) -> dict[int, Any]:
    """{timestamp ms: (count, sum bits, buckets)} of the one series named ``name``, from the
    query API (floats as Go prints them: shortest text that reads back exactly)."""
    extra = "".join(f', {n}="{v}"' for n, v in matchers.items())
    rows = prom.query(f'{{__name__="{name}"{extra}}}[1h]')
    assert len(rows) <= 1, rows
    return {
        round(float(ts) * 1000): (
            float(h["count"]),
            bits(float(h["sum"])),
            [(b[0], *map(float, b[1:])) for b in h["buckets"]],
        )
        for row in rows
        for ts, h in row.get("histograms", [])
    }


@pytest.mark.parametrize("sender", SENDERS)
def test_native_histograms_arrive_bit_exact(rig: Rig, sender: str) -> None:
    """Pushed into p3 (forwarded as RW 2.0) or p2 (as RW 1.0). The workspace (RW 1.0 out,
    escaped) holds each critical series' histograms as pushed, field for field (the double
    keeps the decoded message); the store (RW 2.0 out) holds each other series' histograms as
    the sender itself does (count, sum bits, every bucket), which are the pushed ones."""
    for pushed in rig.pushed[sender]:
        name = name_of(pushed.labels)
        want = {h.timestamp: h.SerializeToString(deterministic=True) for h in pushed.histograms}
        if is_critical(pushed.labels):
            labels = escape(pushed.as_written(sender))

            def arrived(labels: LabelSet = labels, want: dict[int, bytes] = want) -> bool:
                s = workspace_series(rig).get(labels)
                return s is not None and dict(s.histograms) == want

            wait_for(arrived, timeout=30, what=f"{labels} at the workspace")
            continue
        source = _stored_histograms(rig.senders[sender], name)
        counts = {
            h.timestamp: (h.count_int or h.count_float, bits(h.sum)) for h in pushed.histograms
        }
        assert {ts: point[:2] for ts, point in source.items()} == counts

        def stored(name: str = name, source: dict[int, Any] = source) -> bool:
            return _stored_histograms(rig.store, name, sender=sender) == source

        wait_for(stored, timeout=30, what=f"{name} in the store")


@pytest.mark.parametrize("sender", SENDERS)
def test_senders_sent_everything_and_nothing_failed(rig: Rig, sender: str) -> None:
    """Each sender's own counters: samples, histograms (the pushed ones) and metadata sent to
    rwrouter, none failed (Prometheus 3 counts an RW 2.0 answer without exact Written
    headers as failed)."""
    prom = rig.senders[sender]

    def sent(what: str) -> float:
        return prom.metric_value(f"prometheus_remote_storage_{what}", remote_name="rwrouter")

    histograms = sum(len(p.histograms) for p in rig.pushed[sender])
    wait_for(
        lambda: sent("histograms_total") >= histograms,
        timeout=30,
        what=f"{sender}'s histograms sent",
    )
    assert sent("samples_total") > 0
    if not UTF8[sender]:  # RW 1.0: metadata requests (RW 2.0 carries it in the series)
        assert sent("metadata_total") > 0
    kinds = ("samples", "histograms", "exemplars") + (() if UTF8[sender] else ("metadata",))
    present = {sample.name for sample in prom.metrics()}
    assert {f"prometheus_remote_storage_{what}_failed_total" for what in kinds} <= present
    failed = {what: sent(f"{what}_failed_total") for what in kinds}
    assert failed == dict.fromkeys(failed, 0.0), prom.log_text()[-3000:]


def test_vanished_targets_end_with_bit_exact_staleness_markers(rig: Rig) -> None:
    """Runs last: both exporter nodes stop. Each sender writes a staleness marker for every
    series of its target (p3 by RW 2.0, p2 by RW 1.0): the workspace holds its exact bits
    after the real values; the store treats it as a marker (the series end; a NaN would
    not end them), while ``up`` goes on (now 0)."""
    before_s = time.time()
    for node in rig.fleet.nodes:
        node.stop()
    for sender in SENDERS:
        expected = {escape(labels) for labels in scraped(rig.fleet, sender) if is_critical(labels)}

        def marked(expected: set[LabelSet] = expected) -> set[int] | None:
            stored = {k: dict(s.samples) for k, s in workspace_series(rig).items() if k in expected}
            last = [max(samples.items()) for samples in stored.values()]
            done = len(last) == len(expected) and all(b == STALE_BITS for _, b in last)
            return {ts for ts, _ in last} if done else None

        marker_ts = wait_for(marked, timeout=30, what=f"{sender}'s markers at the workspace")
        assert len(marker_ts) == 1  # one failed scrape marks every series of its target
        for labels, series in workspace_series(rig).items():
            if labels in expected:  # a real value came before the marker
                points = sorted(dict(series.samples).items())
                before = [b for ts, b in points if ts < min(marker_ts)]
                assert before and before[-1] != STALE_BITS and bits_to_float(before[-1]) >= 0
        exporter = f'count({{sender="{sender}", __name__!~"up|scrape_.*", job="{JOB}"}})'
        after_s = max(marker_ts) / 1000 + 0.5

        def passed(t: float = after_s) -> bool:
            return time.time() > t + 0.1

        def ended(exporter: str = exporter, after_s: float = after_s) -> bool:
            return rig.store.query(exporter, time_s=after_s) == []

        wait_for(passed, timeout=5, what="the marker's time")
        wait_for(ended, timeout=30, what=f"{sender}'s stale series in the store")
        rest = len(scraped(rig.fleet, sender)) - len(expected) - len(REPORT)
        assert _count(rig.store, exporter, time_s=before_s) == rest

        def down(up: str = f'up{{sender="{sender}"}}') -> bool:
            return [r["value"][1] for r in rig.store.query(up)] == ["0"]

        wait_for(down, timeout=30, what=f"{sender}'s up = 0 in the store")
