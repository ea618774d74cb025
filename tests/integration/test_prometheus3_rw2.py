"""A real Prometheus 3 (the peers cache's, ``peer_binary("prometheus")``) remote-writing RW 2.0
(``protobuf_message: io.prometheus.write.v2.Request``) to a real ``rwrouter run``.

Prometheus treats a 2xx answer without the Written headers, or with counts below what it sent,
as a failure (storage/remote/queue_manager.go, ``sendV2SamplesWithBackoff``/``updateMetrics``):
its failed counters staying at 0 while its sent counters grow proves the headers are exact.
With ``--enable-feature=metadata-wal-records`` Prometheus puts each series' metadata in its
RW 2.0 requests, and rwrouter forwards the request-level metadata entries it derives; with
``st-storage`` it sends the start timestamps it parsed (OpenMetrics ``_created``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]

from rwrouter.doubles.router import RouterProcess
from rwrouter.protocol import RW2_MESSAGE, message_of
from rwrouter.wire.rw2_in import to_rw1
from tests.support.capture import CaptureServer
from tests.support.peers import peer_binary
from tests.support.prometheus import PrometheusProcess
from tests.support.router import running_router

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(120)]

EXPOSITION = b"""\
# TYPE demo_requests counter
# HELP demo_requests Requests served.
demo_requests_total{code="200"} 1027 # {trace_id="4bf92f3577b34da6"} 1.0 1700000000.000
demo_requests_created{code="200"} 1700000000.0
# TYPE demo_temperature_celsius gauge
# UNIT demo_temperature_celsius celsius
# HELP demo_temperature_celsius GPU temperature.
demo_temperature_celsius{gpu="0"} 41.5
# TYPE demo_latency_seconds histogram
# UNIT demo_latency_seconds seconds
# HELP demo_latency_seconds Request latency.
demo_latency_seconds_bucket{le="0.1"} 3
demo_latency_seconds_bucket{le="1.0"} 7
demo_latency_seconds_bucket{le="+Inf"} 8
demo_latency_seconds_sum 4.5
demo_latency_seconds_count 8
demo_latency_seconds_created 1700000000.0
# TYPE demo_rpc_seconds summary
# UNIT demo_rpc_seconds seconds
# HELP demo_rpc_seconds RPC durations.
demo_rpc_seconds{quantile="0.5"} 0.2
demo_rpc_seconds_sum 12.0
demo_rpc_seconds_count 40
# EOF
"""


class _Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header(
            "Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8"
        )
        self.send_header("Content-Length", str(len(EXPOSITION)))
        self.end_headers()
        self.wfile.write(EXPOSITION)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture(scope="module")
def exporter() -> Iterator[str]:
    """A static OpenMetrics exposition on 127.0.0.1: ``host:port``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureServer]:
    with CaptureServer() as server:
        yield server


@pytest.fixture
def router(tmp_path: Path, capture: CaptureServer) -> Iterator[RouterProcess]:
    """``rwrouter run`` sending everything to the capture server's ``/out``."""
    capture.clear()

    def configure(port: int) -> str:
        return f"""
server: {{listen_address: "127.0.0.1:{port}"}}
storage: {{path: {tmp_path / "queues"}}}
remote_write:
  - name: out
    url: {capture.url("/out")}
    queue_config: {{batch_send_deadline: 100ms}}
"""

    with running_router(tmp_path, configure) as router:
        yield router


PROMETHEUS = """
global: {{scrape_interval: 1s, scrape_timeout: 900ms}}
scrape_configs:
  - job_name: demo
    static_configs: [{{targets: ["{target}"]}}]
remote_write:
  - name: router
    url: {router}/api/v1/write
    protobuf_message: io.prometheus.write.v2.Request
    send_exemplars: true
    queue_config: {{batch_send_deadline: 200ms, min_backoff: 50ms}}
  - name: raw
    url: {raw}
    protobuf_message: io.prometheus.write.v2.Request
    queue_config: {{batch_send_deadline: 200ms}}
"""


def wait_for(
    capture: CaptureServer, predicate: Callable[[], bool], what: str, timeout: float = 60
) -> None:
    try:
        capture.wait_for(predicate, timeout=timeout)
    except TimeoutError:
        raise AssertionError(f"not within {timeout} s: {what}") from None


def run_prometheus(
    exporter: str, router: RouterProcess, capture: CaptureServer, features: str, tmp_path: Path
) -> PrometheusProcess:
    config = PROMETHEUS.format(target=exporter, router=router.url, raw=capture.url("/raw"))
    extra = (f"--enable-feature={features}",) if features else ()
    return PrometheusProcess.start(
        config, binary=peer_binary("prometheus"), extra_args=extra, workdir=tmp_path / "prometheus"
    )


def check_accepted(prom: PrometheusProcess, router: RouterProcess, capture: CaptureServer) -> None:
    """Prometheus sent RW 2.0 to rwrouter without a failure, rwrouter answered 204 only, and
    forwarded what it received."""

    def sent(name: str) -> float:
        return prom.metric_value(f"prometheus_remote_storage_{name}", remote_name="router")

    wait_for(
        capture,
        lambda: (
            router.metric_value("rwrouter_received_protocol_requests_total", protocol="2.0") >= 3
            and sent("samples_total") >= 50
            and capture.sample_count("/out") >= 50
        ),
        "Prometheus's RW 2.0 requests accepted and forwarded",
    )
    for failed in ("samples_failed_total", "histograms_failed_total", "exemplars_failed_total"):
        assert sent(failed) == 0, (failed, prom.log_text()[-3000:])
    answered = {
        s.labels["code"]: s.value
        for s in router.metrics()
        if s.name == "rwrouter_received_requests_total"
    }
    assert set(answered) == {"204"}, answered
    assert router.metric_value("rwrouter_received_protocol_requests_total", protocol="1.0") == 0
    names = {dict(labels)["__name__"] for labels in capture.label_sets("/out")}
    assert {"demo_requests_total", "demo_latency_seconds_bucket", "demo_rpc_seconds", "up"} <= names


def test_prometheus_3_rw2_is_accepted_without_metadata(
    exporter: str, router: RouterProcess, capture: CaptureServer, tmp_path: Path
) -> None:
    """Without metadata-wal-records, Prometheus 3's RW 2.0 series carry empty metadata: none
    is derived."""
    with run_prometheus(exporter, router, capture, "", tmp_path) as prom:
        check_accepted(prom, router, capture)
        assert router.metric_value("rwrouter_received_metadata_total") == 0
        headers = capture.requests("/raw")[0].headers
        assert message_of(headers["Content-Encoding"], headers["Content-Type"]) == RW2_MESSAGE
    assert capture.metadata("/out") == []


EXPECTED_METADATA = {
    # family: (type, help, unit), as rwrouter derives it from the series' metadata
    "demo_requests_total": (1, "Requests served.", ""),
    "demo_temperature_celsius": (2, "GPU temperature.", "celsius"),
    "demo_latency_seconds": (3, "Request latency.", "seconds"),
    "demo_rpc_seconds": (5, "RPC durations.", "seconds"),
}


REPORT_SERIES = {
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
}


def test_prometheus_3_rw2_metadata_exemplars_and_start_timestamps(
    exporter: str, router: RouterProcess, capture: CaptureServer, tmp_path: Path
) -> None:
    """With metadata-wal-records, st-storage and exemplar-storage: the metadata entries
    rwrouter derives (one per family), exemplars counted in the Written headers, start
    timestamps in the requests."""
    features = "metadata-wal-records,st-storage,exemplar-storage"
    with run_prometheus(exporter, router, capture, features, tmp_path) as prom:
        check_accepted(prom, router, capture)
        wait_for(
            capture,
            lambda: (
                {m.metric_family_name for m in capture.metadata("/out")} >= set(EXPECTED_METADATA)
            ),
            "the metadata entries forwarded",
        )
        wait_for(
            capture,
            lambda: (
                prom.metric_value("prometheus_remote_storage_exemplars_total", remote_name="router")
                >= 1
            ),
            "an exemplar sent",
        )
        assert (
            prom.metric_value(
                "prometheus_remote_storage_exemplars_failed_total", remote_name="router"
            )
            == 0
        )
    derived = {m.metric_family_name: (m.type, m.help, m.unit) for m in capture.metadata("/out")}
    assert {family: derived[family] for family in EXPECTED_METADATA} == EXPECTED_METADATA
    assert set(derived) - set(EXPECTED_METADATA) <= REPORT_SERIES  # no _bucket, _sum, _count
    # /raw answers 200 without the Written headers: Prometheus gives each batch up after one
    # try, so these are its RW 2.0 requests as sent.
    starts = [
        to_rw1(bytes(snappy.decompress(r.body))).start_timestamps for r in capture.requests("/raw")
    ]
    assert starts and any(starts), "no start timestamp in Prometheus's RW 2.0 requests"
