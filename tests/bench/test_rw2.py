"""The benchmark's remote write 2.0 input and its checks (no sockets, no processes): the RW 2.0
bodies carry exactly the RW 1.0 bodies' series and samples, the driver's Written-headers check,
the sinks' refusal of what is not RW 1.0, the sample digests, the contenders per ``--input``
and the three-column table."""

from __future__ import annotations

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]

from bench import driver, measure, report, runner, rw2, sink
from bench.workload import Workload, load_or_generate
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE, Written, request_headers
from rwrouter.wire import remote_pb2, types_pb2, write_v2_pb2
from rwrouter.wire.rw2_out import Meta


def rw1_series(body: bytes) -> list[tuple[tuple[tuple[str, str], ...], list[tuple[float, int]]]]:
    request = remote_pb2.WriteRequest()
    request.ParseFromString(snappy.uncompress(body))
    return [
        (
            tuple((lb.name, lb.value) for lb in ts.labels),
            [(s.value, s.timestamp) for s in ts.samples],
        )
        for ts in request.timeseries
    ]


def rw2_request(body: bytes) -> write_v2_pb2.Request:
    request = write_v2_pb2.Request()
    request.ParseFromString(snappy.uncompress(body))
    return request


def rw2_series(
    request: write_v2_pb2.Request,
) -> list[tuple[tuple[tuple[str, str], ...], list[tuple[float, int]]]]:
    sym = request.symbols
    out = []
    for ts in request.timeseries:
        refs = list(ts.labels_refs)
        labels = tuple((sym[refs[i]], sym[refs[i + 1]]) for i in range(0, len(refs), 2))
        out.append((labels, [(s.value, s.timestamp) for s in ts.samples]))
    return out


@pytest.fixture(scope="module")
def small() -> Workload:
    workload, _ = load_or_generate(7, 3, 2)  # 2,190 series per scrape: 2 requests per scrape
    return workload


@pytest.mark.parametrize("metadata", [False, True], ids=["no-metadata", "with-metadata"])
def test_rw2_bodies_carry_the_rw1_series(small: Workload, metadata: bool) -> None:
    encoded = rw2.as_rw2(small, metadata=metadata)
    assert len(encoded.bodies) == len(small.bodies)
    assert (encoded.samples_a, encoded.samples_b) == (small.samples_a, small.samples_b)
    assert encoded.samples_per_body == small.samples_per_body
    book = rw2.metadata_book(small.seed)
    for rw1_body, rw2_body in zip(small.bodies, encoded.bodies, strict=True):
        request = rw2_request(rw2_body)
        assert request.symbols[0] == ""
        assert len(set(request.symbols)) == len(request.symbols)  # one table, each string once
        assert rw2_series(request) == rw1_series(rw1_body)  # same series, labels, samples, order
        for ts in request.timeseries:
            name = next(v for n, v in rw2_series_labels(request, ts) if n == "__name__")
            meta = ts.metadata
            if metadata:
                kind, help_text, _ = book_entry(book, name.encode())
                assert (meta.type, request.symbols[meta.help_ref]) == (kind, help_text.decode())
                assert meta.unit_ref == 0
            else:  # what Prometheus 3 sends without metadata-wal-records
                assert (meta.type, meta.help_ref, meta.unit_ref) == (0, 0, 0)
    assert encoded.compressed_bytes < small.compressed_bytes
    assert encoded.raw_bytes < small.raw_bytes


def book_entry(book: dict[bytes, Meta | None], name: bytes) -> Meta:
    entry = book[name]
    assert entry is not None
    return entry


def rw2_series_labels(
    request: write_v2_pb2.Request, ts: write_v2_pb2.TimeSeries
) -> list[tuple[str, str]]:
    refs = list(ts.labels_refs)
    return [
        (request.symbols[refs[i]], request.symbols[refs[i + 1]]) for i in range(0, len(refs), 2)
    ]


def test_metadata_book_types(small: Workload) -> None:
    book = rw2.metadata_book(small.seed)
    assert book_entry(book, b"node_cpu_seconds_total")[0] == rw2.COUNTER
    assert book_entry(book, b"DCGM_FI_DEV_GPU_UTIL")[0] == rw2.GAUGE
    assert len(book) == 25 + 1 + 6 + 3 + 8 + 6  # every metric name of a node


def test_sizes_line(small: Workload) -> None:
    line = rw2.sizes_line(small, rw2.as_rw2(small))
    assert line.startswith("request bodies, bytes per sample: RW 1.0 ")
    assert " RW 2.0 " in line and "RW2/RW1 0." in line


WRITTEN_CASES = [
    # id, message, the answer's Written (None: no headers), samples in the body, the counter
    ("rw2-exact", RW2_MESSAGE, Written(samples=2000), 2000, "written_exact"),
    ("rw2-missing", RW2_MESSAGE, None, 2000, "written_missing"),
    ("rw2-fewer", RW2_MESSAGE, Written(samples=1999), 2000, "written_wrong"),
    ("rw2-histograms", RW2_MESSAGE, Written(samples=2000, histograms=1), 2000, "written_wrong"),
    ("rw2-zeros", RW2_MESSAGE, Written(), 2000, "written_wrong"),
    ("rw1-absent", RW1_MESSAGE, None, 2000, None),
    ("rw1-exact", RW1_MESSAGE, Written(samples=2000), 2000, "written_exact"),
    ("rw1-wrong", RW1_MESSAGE, Written(samples=5), 2000, "written_wrong"),
]


@pytest.mark.parametrize(
    ("message", "answered", "samples", "counter"),
    [c[1:] for c in WRITTEN_CASES],
    ids=[c[0] for c in WRITTEN_CASES],
)
def test_driver_checks_the_written_headers(
    message: str, answered: Written | None, samples: int, counter: str | None
) -> None:
    result = driver.Result(url="http://127.0.0.1:1/api/v1/write", senders=1, message=message)
    driver.check_written(result, answered, samples)
    counters = ("written_exact", "written_missing", "written_wrong")
    assert {c: getattr(result, c) for c in counters} == {c: int(c == counter) for c in counters}


@pytest.mark.parametrize("message", [RW1_MESSAGE, RW2_MESSAGE], ids=["rw1", "rw2"])
def test_driver_headers(message: str) -> None:
    headers = driver.headers_for(message)
    assert {k: headers[k] for k in request_headers(message)} == request_headers(message)
    assert headers["User-Agent"] == driver.USER_AGENT


REFUSAL_CASES = [
    ("rw1", "snappy", "application/x-protobuf", False),
    ("rw1-named", "snappy", "application/x-protobuf;proto=prometheus.WriteRequest", False),
    ("no-headers", None, None, False),
    ("rw2", "snappy", "application/x-protobuf;proto=io.prometheus.write.v2.Request", True),
    ("zstd", "zstd", "application/x-protobuf", True),
    ("json", "snappy", "application/json", True),
]


@pytest.mark.parametrize(
    ("encoding", "content_type", "refused"),
    [c[1:] for c in REFUSAL_CASES],
    ids=[c[0] for c in REFUSAL_CASES],
)
def test_sink_takes_remote_write_1_only(
    encoding: str | None, content_type: str | None, refused: bool
) -> None:
    reason = sink.refusal(encoding, content_type)
    assert (reason is not None) == refused
    if reason:
        assert reason.startswith("remote write 1.0 only")


def series(labels: list[tuple[str, str]], samples: list[tuple[float, int]]) -> types_pb2.TimeSeries:
    ts = types_pb2.TimeSeries()
    for name, text in labels:
        ts.labels.add(name=name, value=text)
    for value, timestamp in samples:
        ts.samples.add(value=value, timestamp=timestamp)
    return ts


LABELS = [("__name__", "up"), ("instance", "a:1"), ("job", "j")]


def test_sample_digest_ignores_order_and_grouping() -> None:
    together = sink.sample_digest(series(LABELS, [(1.0, 10), (2.0, 20)]))
    apart = sink.sample_digest(series(LABELS[::-1], [(2.0, 20)])) + sink.sample_digest(
        series(LABELS, [(1.0, 10)])
    )
    assert together == apart & sink.DIGEST_MASK


@pytest.mark.parametrize(
    ("labels", "samples"),
    [
        pytest.param([*LABELS[:2], ("job", "k")], [(1.0, 10)], id="another-label-value"),
        pytest.param(LABELS, [(1.5, 10)], id="another-value"),
        pytest.param(LABELS, [(1.0, 11)], id="another-timestamp"),
        pytest.param(LABELS, [(1.0, 10), (1.0, 10)], id="a-duplicate"),
    ],
)
def test_sample_digest_sees_a_difference(
    labels: list[tuple[str, str]], samples: list[tuple[float, int]]
) -> None:
    assert sink.sample_digest(series(labels, samples)) != sink.sample_digest(
        series(LABELS, [(1.0, 10)])
    )


def test_expected_digests_are_the_bodies_split_by_destination(small: Workload) -> None:
    a, b = measure.expected_digests(small)
    total = sum(sink.count_body(body, digest=True)[2] for body in small.bodies)
    assert (int(a, 16) + int(b, 16)) & sink.DIGEST_MASK == total & sink.DIGEST_MASK
    assert a != b


NAMES_CASES = [
    ("default", [], ["fleet/vmagent", "fleet/rwrouter", "fleet/rwrouter-rw2"]),
    ("rw1", ["--input", "rw1"], ["fleet/vmagent", "fleet/rwrouter"]),
    ("rw2", ["--input", "rw2"], ["fleet/rwrouter-rw2"]),
    ("rwrouter-both", ["--only", "rwrouter"], ["fleet/rwrouter", "fleet/rwrouter-rw2"]),
    ("rwrouter-rw1", ["--only", "rwrouter", "--input", "rw1"], ["fleet/rwrouter"]),
    ("vmagent", ["--only", "vmagent"], ["fleet/vmagent"]),
]


@pytest.mark.parametrize(
    ("argv", "keys"), [c[1:] for c in NAMES_CASES], ids=[c[0] for c in NAMES_CASES]
)
def test_runs_per_input(argv: list[str], keys: list[str]) -> None:
    args = runner.parse_args(["--scenarios", "warm,rw2", *argv])
    assert runner.run_keys(args) == keys


def test_vmagent_with_rw2_only_is_refused() -> None:
    with pytest.raises(SystemExit):
        runner.parse_args(["--only", "vmagent", "--input", "rw2"])


def measurement(name: str, rate: float, written: int = 0) -> report.Measurement:
    return report.Measurement(
        name,
        ok=True,
        input=report.INPUT_OF[name],
        samples_per_cpu_second=rate,
        p99_ms=10.0,
        peak_rss_mib=100.0,
        body_bytes_per_sample=28.0 if name != "rwrouter-rw2" else 14.0,
        driver={"requests": 4, "written_exact": written},
    )


def test_table_with_both_inputs() -> None:
    results = {
        "vmagent": measurement("vmagent", 1000.0),
        "rwrouter": measurement("rwrouter", 2000.0),
        "rwrouter-rw2": measurement("rwrouter-rw2", 1500.0, written=4),
    }
    lines = report.table(results, 4000.0).splitlines()
    assert lines[0].split() == [
        "vmagent",
        "rwrouter",
        "rwrouter-rw2",
        "rwrouter/vmagent",
        "rw2/rw1",
    ]
    rate = next(line for line in lines if line.startswith("samples per CPU-second"))
    assert rate.split()[-5:] == ["1,000", "2,000", "1,500", "2.00", "0.75"]
    size = next(line for line in lines if line.startswith("request bytes per sample"))
    assert size.split()[-2:] == ["1.00", "0.50"]
    written = next(line for line in lines if line.startswith("Written headers"))
    assert written.split()[-5:] == ["absent", "absent", "4/4", "-", "-"]
    ratios = report.ratios(results, 4000.0)
    assert ratios["samples_per_cpu_second"] == 2.0
    assert ratios["rw2_over_rw1_samples_per_cpu_second"] == 0.75


def test_rounds_summary_has_both_ratios() -> None:
    rounds = [
        {
            "vmagent": measurement("vmagent", v),
            "rwrouter": measurement("rwrouter", r),
            "rwrouter-rw2": measurement("rwrouter-rw2", r2),
        }
        for v, r, r2 in [(1.0, 2.0, 1.0), (1.0, 3.0, 3.0), (2.0, 2.0, 1.0)]
    ]
    lines = report.rounds_summary(rounds).splitlines()
    assert lines[-2] == "rwrouter/vmagent by round: 2.00, 3.00, 1.00 (median 2.00)"
    assert lines[-1] == "rw2/rw1 by round: 0.50, 1.00, 0.50 (median 0.50)"


DRIVER_CASES = [
    ("clean", {"lost": 0, "written_missing": 0, "written_wrong": 0}, True),
    ("lost", {"lost": 1}, False),
    ("written-missing", {"written_missing": 2}, False),
    ("written-wrong", {"written_wrong": 1}, False),
]


@pytest.mark.parametrize(
    ("driver_result", "ok"), [c[1:] for c in DRIVER_CASES], ids=[c[0] for c in DRIVER_CASES]
)
def test_driver_ok(driver_result: dict[str, int], ok: bool) -> None:
    m = report.Measurement("rwrouter-rw2", driver=driver_result)
    assert measure.driver_ok(m) == ok
    assert bool(m.notes) == (not ok)


class CannedSink(measure.Sink):
    """A Sink whose /stats is given (read_sinks only reads it)."""

    def __init__(self, name: str, stats: dict[str, object]) -> None:
        super().__init__(name, proc=None, port=0)  # type: ignore[arg-type]
        self.canned = stats

    def stats(self) -> dict[str, object]:
        return self.canned


def canned(
    samples: int, digest: str, errors: int = 0, ctype: str = "application/x-protobuf"
) -> dict[str, object]:
    return {
        "samples": samples,
        "requests": 1,
        "errors": errors,
        "digest": digest,
        "content_types": {ctype: 1 + errors},
    }


READ_CASES = [
    ("same", canned(3, "aa"), canned(5, "bb"), True, "same"),
    ("other-samples", canned(3, "ab"), canned(5, "bb"), False, "DIFFERENT"),
    (
        "refused-rw2",
        canned(3, "aa"),
        canned(5, "bb", errors=1, ctype="application/x-protobuf;proto=x"),
        False,
        "same",
    ),
]


@pytest.mark.parametrize(
    ("a", "b", "ok", "content"), [c[1:] for c in READ_CASES], ids=[c[0] for c in READ_CASES]
)
def test_read_sinks(a: dict[str, object], b: dict[str, object], ok: bool, content: str) -> None:
    m = report.Measurement("rwrouter-rw2", ok=True)
    measure.read_sinks(m, (CannedSink("A", a), CannedSink("B", b)), ("aa", "bb"))
    assert (m.ok, m.content) == (ok, content)
    assert (m.delivered_a, m.delivered_b) == (3, 5)


def test_rwrouter_ref_and_src_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        runner.parse_args(["--rwrouter-ref", "HEAD", "--rwrouter-src", "/tmp"])


@pytest.mark.parametrize(
    ("argv", "check"),
    [([], False), (["--smoke"], True), (["--check-content"], True)],
    ids=["default", "smoke", "flag"],
)
def test_content_check_is_on_with_smoke(argv: list[str], check: bool) -> None:
    assert runner.parse_args(argv).check_content is check
