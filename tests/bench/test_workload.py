"""Unit tests of the benchmark workload generator (no sockets, no processes)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]

from bench import workload as wl
from rwrouter.wire import remote_pb2

A_FIELDS = 8  # GPU_UTIL, FB_USED, MEM_COPY_UTIL and the 5 DCGM_FI_PROF_* fields


def decode(body: bytes) -> remote_pb2.WriteRequest:
    request = remote_pb2.WriteRequest()
    request.ParseFromString(snappy.uncompress(body))
    return request


@pytest.mark.parametrize(
    ("seed", "nodes", "scrapes"),
    [
        pytest.param(1, 1, 1, id="one-node-one-scrape"),
        pytest.param(7, 3, 2, id="three-nodes-two-scrapes"),
        pytest.param(42, 5, 3, id="five-nodes-crossing-request-boundaries"),
    ],
)
def test_deterministic_by_seed(seed: int, nodes: int, scrapes: int) -> None:
    first = wl.generate(seed, nodes, scrapes)
    again = wl.generate(seed, nodes, scrapes)
    other = wl.generate(seed + 1, nodes, scrapes)
    assert first.bodies == again.bodies
    assert first.bodies != other.bodies


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        pytest.param("dcgm-exporter", 200, id="dcgm-8-gpus-x-25-fields"),
        pytest.param("node-exporter", 48 * 8 + 6 * 9 + 3 * 4 + 8, id="node-exporter"),
        pytest.param("kubelet", 6 * 12, id="kubelet-6-metrics-x-12-pods"),
    ],
)
def test_series_per_node_by_job(job: str, expected: int) -> None:
    series = wl.fleet_series(seed=3, nodes=2)
    per_node = len(series) // 2
    for node in range(2):
        mine = series[node * per_node : (node + 1) * per_node]
        assert sum(1 for s in mine if dict(s.labels)["job"] == job) == expected


@pytest.mark.parametrize(
    ("nodes", "scrapes"),
    [
        pytest.param(1, 1, id="1-node"),
        pytest.param(3, 2, id="3-nodes-2-scrapes"),
        pytest.param(6, 1, id="6-nodes-3-requests"),
    ],
)
def test_counts_and_batches(nodes: int, scrapes: int) -> None:
    w = wl.generate(1, nodes, scrapes)
    assert w.series_per_scrape == nodes * wl.SERIES_PER_NODE
    requests = [decode(b) for b in w.bodies]
    sizes = [len(r.timeseries) for r in requests]
    assert sum(sizes) == nodes * wl.SERIES_PER_NODE * scrapes
    assert sizes == w.samples_per_body
    per_scrape = sizes[: w.requests_per_scrape]
    assert all(n == wl.SERIES_PER_REQUEST for n in per_scrape[:-1])
    assert 0 < per_scrape[-1] <= wl.SERIES_PER_REQUEST
    assert all(len(ts.samples) == 1 for r in requests for ts in r.timeseries)


@pytest.mark.parametrize(
    ("seed", "nodes"),
    [pytest.param(1, 1, id="seed-1"), pytest.param(9, 4, id="seed-9-4-nodes")],
)
def test_label_names_sorted_by_bytes(seed: int, nodes: int) -> None:
    w = wl.generate(seed, nodes, 1)
    for body in w.bodies:
        for ts in decode(body).timeseries:
            names = [label.name.encode() for label in ts.labels]
            assert names == sorted(names)
            assert len(set(names)) == len(names)
            assert all(label.value for label in ts.labels)


def test_dcgm_series_carry_the_listed_labels() -> None:
    wanted = {
        "__name__",
        "cluster",
        "job",
        "instance",
        "namespace",
        "gpu",
        "UUID",
        "device",
        "modelName",
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
        "container",
        "pod",
    }
    dcgm = [s for s in wl.fleet_series(1, 1) if s.name.startswith("DCGM_")]
    assert {s.name for s in dcgm} == set(wl.DCGM_FIELDS)
    assert all({name for name, _ in s.labels} == wanted for s in dcgm)


@pytest.mark.parametrize(
    ("nodes", "scrapes"),
    [pytest.param(1, 1, id="1x1"), pytest.param(4, 3, id="4x3")],
)
def test_a_b_split(nodes: int, scrapes: int) -> None:
    w = wl.generate(2, nodes, scrapes)
    assert w.samples_a == A_FIELDS * wl.GPUS_PER_NODE * nodes * scrapes
    assert w.samples_b == (wl.SERIES_PER_NODE - A_FIELDS * wl.GPUS_PER_NODE) * nodes * scrapes
    names = collections.Counter(
        ts.labels[[x.name for x in ts.labels].index("__name__")].value
        for body in w.bodies
        for ts in decode(body).timeseries
    )
    in_a = sum(n for name, n in names.items() if wl.is_destination_a(name))
    assert in_a == w.samples_a
    assert sum(names.values()) - in_a == w.samples_b


@pytest.mark.parametrize(
    ("name", "to_a"),
    [
        pytest.param("DCGM_FI_DEV_GPU_UTIL", True, id="gpu-util"),
        pytest.param("DCGM_FI_PROF_DRAM_ACTIVE", True, id="prof-prefix"),
        pytest.param("DCGM_FI_DEV_GPU_UTIL_X", False, id="anchored-end"),
        pytest.param("X_DCGM_FI_DEV_FB_USED", False, id="anchored-start"),
        pytest.param("DCGM_FI_DEV_FB_FREE", False, id="fb-free-goes-to-b"),
        pytest.param("node_load1", False, id="node-exporter"),
    ],
)
def test_destination_regex(name: str, to_a: bool) -> None:
    assert wl.is_destination_a(name) is to_a


def test_timestamps_increase_per_scrape() -> None:
    w = wl.generate(5, 1, 3)
    stamps = [{ts.samples[0].timestamp for ts in decode(body).timeseries} for body in w.bodies]
    per_scrape = [max(s) for s in stamps]
    assert per_scrape == sorted(per_scrape) and len(set(per_scrape)) == 3
    assert max(stamps[0]) < min(stamps[1])


def test_average_sizes_match_the_reference() -> None:
    w = wl.generate(1, 10, 2)
    assert 230 <= w.raw_bytes_per_series <= 260  # workload.md: ~245
    assert 24 <= w.compressed_bytes_per_series <= 34  # workload.md: ~29


def test_cache_round_trip(tmp_path: Path) -> None:
    first, path = wl.load_or_generate(3, 2, 2, cache_dir=tmp_path)
    assert path.exists()
    again, _ = wl.load_or_generate(3, 2, 2, cache_dir=tmp_path)
    assert again.bodies == first.bodies and again.samples_a == first.samples_a
