"""The compiled accelerator and its pure-Python fallback, end to end in a real ``rwrouter run``:
both route the benchmark workload to the same content, and the process says which one runs
(``rwrouter_build_info{accelerated}`` and its log)."""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]

from bench.workload import A_REGEX, generate
from rwrouter.doubles.prometheus import free_port
from rwrouter.doubles.router import RouterProcess
from rwrouter.wire import remote_pb2, types_pb2
from rwrouter.wire.accelerator import ACCELERATED
from tests.support.capture import CaptureServer

CONFIG = """
server: {{listen_address: "127.0.0.1:{port}", shutdown_timeout: 2s}}
storage: {{path: {storage}}}
remote_write:
  - name: a
    url: {url_a}
    write_relabel_configs:
      - {{source_labels: [__name__], regex: "{regex}", action: keep}}
    queue_config: {{batch_send_deadline: 50ms}}
  - name: b
    url: {url_b}
    fallback: true
    queue_config: {{batch_send_deadline: 50ms}}
"""

# (name, RWROUTER_NO_EXTENSIONS, accelerated label)
PATHS = [("compiled", "", "true"), ("pure_python", "1", "false")]


@pytest.mark.parametrize(
    ("no_extensions", "label"), [p[1:] for p in PATHS], ids=[p[0] for p in PATHS]
)
def test_both_paths_route_the_workload_and_say_which_runs(
    no_extensions: str,
    label: str,
    fresh_capture: CaptureServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if label == "true" and not ACCELERATED:
        if os.environ.get("CI"):
            pytest.fail("the compiled accelerator is not built in CI")
        pytest.skip("the compiled accelerator is not built here")
    monkeypatch.setenv("RWROUTER_NO_EXTENSIONS", no_extensions)
    port = free_port()
    config = tmp_path / "rwrouter.yaml"
    urls = {"url_a": fresh_capture.url("/a"), "url_b": fresh_capture.url("/b")}
    config.write_text(CONFIG.format(port=port, storage=tmp_path / "data", regex=A_REGEX, **urls))
    workload = generate(seed=3, nodes=2, scrapes=2)
    router = RouterProcess(config_path=config, port=port, log_path=tmp_path / "router.log")
    try:
        router.wait_ready(timeout_s=20)
        info = [s for s in router.metrics() if s.name == "rwrouter_build_info"]
        assert [s.labels["accelerated"] for s in info] == [label]
        for body in workload.bodies:
            request = urllib.request.Request(
                router.url + "/api/v1/write",
                data=body,
                method="POST",
                headers={"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 204
        deadline = time.monotonic() + 20
        while (fresh_capture.sample_count("/a"), fresh_capture.sample_count("/b")) != (
            workload.samples_a,
            workload.samples_b,
        ):
            assert time.monotonic() < deadline, "not all samples delivered in time"
            time.sleep(0.05)
    finally:
        router.stop()
    sent = sorted(
        (tuple((lab.name, lab.value) for lab in ts.labels), s.timestamp, s.value)
        for body in workload.bodies
        for ts in _parse(body).timeseries
        for s in ts.samples
    )
    got = sorted(
        (labels, s.timestamp, s.value)
        for path in ("/a", "/b")
        for received in fresh_capture.requests(path)
        for labels, s in _samples(received.body)
    )
    assert got == sent
    warned = "pure-Python hot path runs" in (tmp_path / "router.log").read_text()
    assert warned == (label == "false")


def _parse(body: bytes) -> remote_pb2.WriteRequest:
    request = remote_pb2.WriteRequest()
    request.ParseFromString(snappy.decompress(body))
    return request


def _samples(body: bytes) -> list[tuple[tuple[tuple[str, str], ...], types_pb2.Sample]]:
    return [
        (tuple((lab.name, lab.value) for lab in ts.labels), s)
        for ts in _parse(body).timeseries
        for s in ts.samples
    ]
