"""``rwrouter run --workers``: the parts that need no process or socket (the spec handed to a
worker, its storage and address, the merged exposition, orphaned queues, the option)."""

from __future__ import annotations

import logging
import struct
import zlib
from pathlib import Path

import pytest

from rwrouter.cli import build_parser
from rwrouter.config import parse_config
from rwrouter.doubles.prometheus import parse_metrics
from rwrouter.metrics import Metrics, merge_expositions
from rwrouter.server.supervisor import orphaned_queues
from rwrouter.server.workers import WorkerSpec, _WorkerFormatter, worker_config, worker_storage

SPEC = WorkerSpec(index=1, count=2, port=9999, runtime_dir="/run/x", ready_fd=5, lifeline_fd=6)


def test_spec_round_trips_through_its_argument() -> None:
    assert WorkerSpec.from_arg(SPEC.to_arg()) == SPEC


@pytest.mark.parametrize(
    ("path", "index", "expected"),
    [
        ("data", 0, "data"),
        ("data", 1, "data/worker-1"),
        ("/var/lib/rw", 12, "/var/lib/rw/worker-12"),
    ],
    ids=["worker0_keeps_the_single_process_layout", "worker1", "absolute"],
)
def test_worker_storage(path: str, index: int, expected: str) -> None:
    assert worker_storage(path, index) == expected


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("127.0.0.1:9250", "127.0.0.1:9250"),
        ("127.0.0.1:0", "127.0.0.1:9999"),
        ("[::1]:0", "[::1]:9999"),
    ],
    ids=["configured_port_kept", "port0_gets_the_supervisors_port", "ipv6"],
)
def test_worker_config(listen: str, expected: str) -> None:
    config = parse_config(
        f'server: {{listen_address: "{listen}"}}\nremote_write: [{{url: "http://x/w"}}]\n', env={}
    )
    mine = worker_config(config, SPEC)
    assert mine.server.listen_address == expected
    assert mine.storage.path == "data/worker-1"
    assert mine.remote_write == config.remote_write


@pytest.mark.parametrize(
    ("limit", "count", "expected"),
    [
        pytest.param(1000, 2, 1000, id="two_workers"),
        pytest.param(1001, 3, 1001, id="three_workers"),
        pytest.param(2, 4, 2, id="more_workers_than_the_limit"),
    ],
)
def test_every_worker_holds_the_whole_series_limit_they_share(
    limit: int, count: int, expected: int
) -> None:
    config = parse_config(
        "remote_write:\n"
        f"  - {{url: 'http://x/w', series_limit: {limit}, on_series_limit: drop}}\n"
        "  - {url: 'http://y/w'}\n",
        env={},
    )
    spec = WorkerSpec(index=0, count=count, port=1, runtime_dir="/r", ready_fd=5, lifeline_fd=6)
    budgeted, plain = worker_config(config, spec).remote_write
    assert (budgeted.series_limit, plain.series_limit) == (expected, None)


def _exposition(requests: int, duration: float | None = None) -> str:
    metrics = Metrics()
    metrics.receive.requests.labels("204").inc(requests)
    if duration is not None:
        metrics.receive.duration.observe(duration)
    return metrics.exposition()[0].decode()


def _values(body: bytes, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for s in parse_metrics(body.decode())
        if s.name == name
    }


MERGE_CASES = [
    (
        "both_answer",
        {"0": _exposition(3), "1": _exposition(5)},
        {(("code", "204"), ("worker", "0")): 3.0, (("code", "204"), ("worker", "1")): 5.0},
        {"0": 1.0, "1": 1.0},
    ),
    (
        "one_absent",
        {"0": _exposition(3), "1": None},
        {(("code", "204"), ("worker", "0")): 3.0},
        {"0": 1.0, "1": 0.0},
    ),
    (
        "one_unparsable",
        {"0": "garbage{{{ 1\n", "1": _exposition(5)},
        {(("code", "204"), ("worker", "1")): 5.0},
        {"0": 0.0, "1": 1.0},
    ),
]


@pytest.mark.parametrize(
    ("parts", "requests", "up"), [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES]
)
def test_merge_expositions(
    parts: dict[str, str | None],
    requests: dict[tuple[tuple[str, str], ...], float],
    up: dict[str, float],
) -> None:
    body = merge_expositions(parts, workers=len(parts))
    assert _values(body, "rwrouter_received_requests_total") == requests
    assert _values(body, "rwrouter_worker_up") == {(("worker", w),): v for w, v in up.items()}
    assert _values(body, "rwrouter_workers") == {(): float(len(parts))}
    text = body.decode()
    assert text.count("# TYPE rwrouter_received_requests_total counter") == 1


def test_merged_histograms_keep_their_buckets_per_worker() -> None:
    body = merge_expositions({"0": _exposition(1, 0.3), "1": _exposition(1, 3.0)}, workers=2)
    buckets = _values(body, "rwrouter_receive_duration_seconds_bucket")
    assert buckets[(("le", "0.5"), ("worker", "0"))] == 1.0
    assert buckets[(("le", "0.5"), ("worker", "1"))] == 0.0
    assert _values(body, "rwrouter_receive_duration_seconds_count") == {
        (("worker", "0"),): 1.0,
        (("worker", "1"),): 1.0,
    }


def _queue(
    root: Path, worker: int, *, segments: dict[int, int], committed: tuple[int, int]
) -> Path:
    directory = root / f"worker-{worker}" / "queue" / "sink"
    directory.mkdir(parents=True)
    for seq, size in segments.items():
        (directory / f"{seq:020d}.seg").write_bytes(b"x" * size)
    data = struct.pack("<QQQQ", *committed, *committed)
    (directory / "position").write_bytes(data + struct.pack("<I", zlib.crc32(data)))
    return directory


ORPHAN_CASES = [
    ("read_by_a_running_worker", 1, {0: 100}, (0, 0), 2, None),
    ("unsent_data", 2, {0: 100, 1: 50}, (0, 40), 2, 110),
    ("all_sent", 2, {3: 100}, (3, 100), 2, None),
    ("shrunk_to_one", 1, {0: 10}, (0, 0), 1, 10),
]


@pytest.mark.parametrize(
    ("worker", "segments", "committed", "workers", "unsent"),
    [c[1:] for c in ORPHAN_CASES],
    ids=[c[0] for c in ORPHAN_CASES],
)
def test_orphaned_queues(
    tmp_path: Path,
    worker: int,
    segments: dict[int, int],
    committed: tuple[int, int],
    workers: int,
    unsent: int | None,
) -> None:
    directory = _queue(tmp_path, worker, segments=segments, committed=committed)
    expected = [] if unsent is None else [(directory, unsent)]
    assert orphaned_queues(str(tmp_path), workers) == expected


@pytest.mark.parametrize(
    ("argv", "workers"),
    [([], 1), (["--workers", "4"], 4)],
    ids=["default_is_one_process", "four"],
)
def test_workers_option(argv: list[str], workers: int) -> None:
    assert build_parser().parse_args(["run", "--config", "f", *argv]).workers == workers


@pytest.mark.parametrize("value", ["0", "-1", "two"], ids=["zero", "negative", "not_a_number"])
def test_workers_option_refuses(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["run", "--config", "f", "--workers", value])
    assert exc.value.code == 2
    assert "--workers" in capsys.readouterr().err


def test_worker_log_lines_name_the_worker() -> None:
    record = logging.LogRecord("rwrouter.x", logging.INFO, __file__, 1, "hello there", None, None)
    line = _WorkerFormatter(3).format(record)
    assert ' level=info worker=3 logger=rwrouter.x msg="hello there"' in line
