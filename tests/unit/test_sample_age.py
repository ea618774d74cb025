"""The sample age limit (rwrouter.send.age, rwrouter.wire.age): which samples are too old at
a given time, and the frames left once they are dropped; the compiled scan
(``rwrouter.wire._scan.sample_ages``) gives the reference's results and errors.

Rule: Prometheus ``storage/remote/queue_manager.go`` ``isSampleOld`` (a sample is too old
when its time is before ``now - sample_age_limit``; 0 turns it off; its ``TestIsSampleOld``:
61 s old is too old for a 60 s limit, 59 s is not), applied here to samples, exemplars and
native histograms by their own timestamps.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.errors import DecodeError
from rwrouter.send.age import SampleAgeLimit
from rwrouter.wire import accelerator, remote_pb2, types_pb2, write_v2_pb2
from rwrouter.wire.age import drop_older, sample_ages, sample_ages_py

NOW = 1_700_000_000.0  # unix seconds
NOW_MS = int(NOW * 1000)

# (id, limit s, sample timestamp ms, too old at NOW)
OLD_CASES = [
    ("61s_old_limit_60s", 60.0, NOW_MS - 61_000, True),
    ("59s_old_limit_60s", 60.0, NOW_MS - 59_000, False),
    ("exactly_at_the_limit_is_kept", 60.0, NOW_MS - 60_000, False),
    ("one_ms_past_the_limit", 60.0, NOW_MS - 60_001, True),
    ("future_sample", 60.0, NOW_MS + 5_000, False),
    ("sub_second_limit", 0.5, NOW_MS - 501, True),
    ("zero_timestamp", 3600.0, 0, True),
    ("negative_timestamp", 3600.0, -5, True),
    ("off_keeps_the_oldest", 0.0, 0, False),
]


@pytest.mark.parametrize(
    ("limit", "timestamp_ms", "old"), [c[1:] for c in OLD_CASES], ids=[c[0] for c in OLD_CASES]
)
def test_is_too_old(limit: float, timestamp_ms: int, old: bool) -> None:
    assert SampleAgeLimit(limit).is_too_old(timestamp_ms, now=NOW) is old


def test_fractional_now_rounds_the_cutoff_up() -> None:
    # now - limit = 999.9995 s: 999_999 ms is before it, 1_000_000 ms is not
    age = SampleAgeLimit(1.0)
    assert age.cutoff_ms(now=1000.9995) == 1_000_000
    assert age.is_too_old(999_999, now=1000.9995)
    assert not age.is_too_old(1_000_000, now=1000.9995)


@pytest.mark.parametrize(
    ("limit", "oldest_ms", "aged_at"),
    [(60.0, NOW_MS, NOW + 60.0), (60.0, None, None), (0.0, NOW_MS, None)],
    ids=["oldest_plus_limit", "nothing_left", "off"],
)
def test_aged_at(limit: float, oldest_ms: int | None, aged_at: float | None) -> None:
    assert SampleAgeLimit(limit).aged_at(oldest_ms) == aged_at


def test_off_walks_nothing() -> None:
    age = SampleAgeLimit(0.0)
    assert not age.active
    assert age.cutoff_ms(now=NOW) is None
    assert age.recent(b"not even protobuf", now=NOW) is None


# -- the frames ---------------------------------------------------------------------------------
def series(
    name: str,
    samples: tuple[int, ...] = (),
    *,
    exemplars: tuple[int, ...] = (),
    histograms: tuple[int, ...] = (),
    zero_value: bool = False,
) -> types_pb2.TimeSeries:
    ts = types_pb2.TimeSeries()
    ts.labels.add(name="__name__", value=name)
    ts.labels.add(name="job", value="age")
    for t in samples:
        ts.samples.add(value=0.0 if zero_value else 1.5, timestamp=t)
    for t in exemplars:
        exemplar = ts.exemplars.add(value=0.25, timestamp=t)
        exemplar.labels.add(name="trace_id", value="abc")
    for t in histograms:
        ts.histograms.add(count_int=3, sum=1.5, schema=0, timestamp=t)
    return ts


def body_of(*many: types_pb2.TimeSeries) -> bytes:
    request = remote_pb2.WriteRequest()
    request.timeseries.extend(many)
    return bytes(request.SerializeToString())


OLD, NEW = 1_000, 5_000  # timestamps (ms) around the cutoff
CUTOFF = 2_000

# (id, series in, series expected out, kept, dropped)
FRAME_CASES = [
    ("all_recent_unchanged", [series("a", (NEW, NEW + 1))], [series("a", (NEW, NEW + 1))], 2, 0),
    (
        "all_old_series_gone",
        [series("a", (OLD,)), series("b", (NEW,))],
        [series("b", (NEW,))],
        1,
        1,
    ),
    ("old_samples_of_a_series", [series("a", (OLD, NEW))], [series("a", (NEW,))], 1, 1),
    (
        "value_0_omitted_on_the_wire",
        [series("a", (OLD, NEW), zero_value=True)],
        [series("a", (NEW,), zero_value=True)],
        1,
        1,
    ),
    ("negative_timestamp", [series("a", (-1, NEW))], [series("a", (NEW,))], 1, 1),
    (
        "old_exemplar_recent_sample",
        [series("a", (NEW,), exemplars=(OLD,))],
        [series("a", (NEW,))],
        1,
        1,
    ),
    (
        "recent_exemplar_kept_alone",
        [series("a", (OLD,), exemplars=(NEW,))],
        [series("a", exemplars=(NEW,))],
        1,
        1,
    ),
    (
        "histograms_by_their_timestamp",
        [series("h", histograms=(OLD, NEW))],
        [series("h", histograms=(NEW,))],
        1,
        1,
    ),
    (
        "only_the_changed_series_rebuilt",
        [series("a", (NEW,)), series("b", (OLD, NEW)), series("c", (NEW,), exemplars=(NEW,))],
        [series("a", (NEW,)), series("b", (NEW,)), series("c", (NEW,), exemplars=(NEW,))],
        4,
        1,
    ),
    ("everything_old", [series("a", (OLD,)), series("b", (OLD - 1,))], [], 0, 2),
]


@pytest.mark.parametrize(
    ("given", "expected", "kept", "dropped"),
    [c[1:] for c in FRAME_CASES],
    ids=[c[0] for c in FRAME_CASES],
)
def test_drop_older(
    given: list[types_pb2.TimeSeries],
    expected: list[types_pb2.TimeSeries],
    kept: int,
    dropped: int,
) -> None:
    body = body_of(*given)
    recent = drop_older(body, CUTOFF)
    assert (recent.kept, recent.dropped) == (kept, dropped)
    assert recent.body == body_of(*expected)  # byte for byte: the kept fields as they were
    if dropped:
        assert recent.items == [
            (body_of(s), len(s.samples) + len(s.exemplars) + len(s.histograms)) for s in expected
        ]
    else:
        assert recent.body is body and recent.items is None


def test_oldest_kept_timestamp() -> None:
    body = body_of(series("a", (OLD, NEW + 7)), series("b", (NEW + 3,), exemplars=(NEW + 1,)))
    assert drop_older(body, CUTOFF).oldest_ms == NEW + 1
    assert drop_older(body_of(series("a", (OLD,))), CUTOFF).oldest_ms is None


def test_start_timestamps_and_unknown_fields_stay() -> None:
    # A series received by remote write 2.0 keeps its samples' start timestamps (field 3)
    # in the RW1 form: a kept sample keeps them, bytes unchanged.
    kept = write_v2_pb2.Sample(value=2.0, timestamp=NEW, start_timestamp=NEW - 10)
    gone = write_v2_pb2.Sample(value=1.0, timestamp=OLD, start_timestamp=OLD - 10)
    labels = series("a").SerializeToString()
    payload = labels + b"".join(
        b"\x12" + bytes([s.ByteSize()]) + s.SerializeToString() for s in (gone, kept)
    )
    body = b"\x0a" + bytes([len(payload)]) + payload
    expected = labels + b"\x12" + bytes([kept.ByteSize()]) + kept.SerializeToString()
    recent = drop_older(body, CUTOFF)
    assert recent.body == b"\x0a" + bytes([len(expected)]) + expected
    assert (recent.kept, recent.dropped, recent.oldest_ms) == (1, 1, NEW)


SCANS: list[Callable[[bytes], tuple[int | None, int]]] = [sample_ages_py]
if accelerator.compiled("sample_ages") is not None:
    SCANS.append(sample_ages)
SCAN_IDS = ["pure", "compiled"][: len(SCANS)]

MALFORMED = [
    ("truncated_series", b"\x0a\x05\x0a"),
    ("not_a_timeseries_field", b"\x12\x00"),
    ("truncated_sample", b"\x0a\x02\x12\x05"),
    ("truncated_timestamp", b"\x0a\x0d\x12\x0b\x09" + bytes(8) + b"\x10\x80"),
    ("bad_wire_type_in_sample", b"\x0a\x04\x12\x02\x0f\x00"),
]


@pytest.mark.parametrize("body", [c[1] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
@pytest.mark.parametrize("scan", SCANS, ids=SCAN_IDS)
def test_malformed_frames_are_decode_errors(
    body: bytes, scan: Callable[[bytes], tuple[int | None, int]]
) -> None:
    with pytest.raises(DecodeError) as reference:
        sample_ages_py(body)
    with pytest.raises(DecodeError) as got:
        scan(body)
    assert str(got.value) == str(reference.value)
    with pytest.raises(DecodeError):
        drop_older(body, CUTOFF)


@pytest.mark.parametrize("scan", SCANS, ids=SCAN_IDS)
@pytest.mark.parametrize(
    ("given", "oldest", "samples"),
    [
        ([], None, 0),
        ([series("a")], None, 0),
        ([series("a", (NEW, OLD)), series("b", histograms=(OLD - 5,))], OLD - 5, 3),
        ([series("a", (-7,), zero_value=True)], -7, 1),
        ([series("a", exemplars=(NEW,))], NEW, 1),
    ],
    ids=["empty", "labels_only", "mixed_kinds", "negative_zero_value", "exemplar_only"],
)
def test_sample_ages(
    scan: Callable[[bytes], tuple[int | None, int]],
    given: list[types_pb2.TimeSeries],
    oldest: int | None,
    samples: int,
) -> None:
    assert scan(body_of(*given)) == (oldest, samples)


_timestamps = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
_series = st.builds(
    lambda s, e, h, z: series("x", tuple(s), exemplars=tuple(e), histograms=tuple(h), zero_value=z),
    st.lists(_timestamps, max_size=3),
    st.lists(_timestamps, max_size=2),
    st.lists(_timestamps, max_size=2),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(many=st.lists(_series, max_size=5), cutoff=_timestamps, cut=st.integers(0, 40))
def test_compiled_scan_and_drop_agree_with_the_reference(
    many: list[types_pb2.TimeSeries], cutoff: int, cut: int
) -> None:
    body = body_of(*many)
    expected = sample_ages_py(body)
    assert sample_ages(body) == expected
    recent = drop_older(body, cutoff)
    every = [
        t
        for s in many
        for t in (
            *[x.timestamp for x in s.samples],
            *[x.timestamp for x in s.exemplars],
            *[x.timestamp for x in s.histograms],
        )
    ]
    assert recent.dropped == sum(1 for t in every if t < cutoff)
    assert recent.kept == len(every) - recent.dropped
    damaged = body[: len(body) - cut] if cut < len(body) else b"\x0a"
    try:
        reference: object = sample_ages_py(damaged)
    except DecodeError as exc:
        reference = str(exc)
    try:
        compiled: object = sample_ages(damaged)
    except DecodeError as exc:
        compiled = str(exc)
    assert compiled == reference


def test_policy_filters_with_the_cutoff_of_now() -> None:
    age = SampleAgeLimit(10.0)
    body = body_of(series("a", (NOW_MS - 11_000, NOW_MS - 9_000)))
    recent = age.recent(body, now=NOW)
    assert recent is not None
    assert recent.body == body_of(series("a", (NOW_MS - 9_000,)))
