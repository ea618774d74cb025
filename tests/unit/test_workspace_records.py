"""The workspace double keeps its request records bounded: the last ones, with a total; and,
when asked (``Limits.keep_points_s``, the demo), its series' points too."""

from __future__ import annotations

import pytest

from rwrouter.doubles.workspace import WorkspaceDouble
from rwrouter.doubles.workspace_records import MAX_RECORDS, RecordRing, RequestRecord
from rwrouter.doubles.workspace_store import FORGET_EVERY, Limits, WorkspaceStore
from rwrouter.wire import remote_pb2


def record(n: int) -> RequestRecord:
    return RequestRecord("POST", f"/r{n}", 200, "", "", (), (), None, None)


@pytest.mark.parametrize(
    ("maxlen", "appended", "kept"),
    [
        pytest.param(3, 0, [], id="empty"),
        pytest.param(3, 2, [0, 1], id="under_the_bound"),
        pytest.param(3, 3, [0, 1, 2], id="at_the_bound"),
        pytest.param(3, 7, [4, 5, 6], id="over_the_bound_the_last_ones"),
    ],
)
def test_record_ring_keeps_the_last_and_counts_all(
    maxlen: int, appended: int, kept: list[int]
) -> None:
    ring = RecordRing(maxlen)
    for n in range(appended):
        ring.append(record(n))
    assert [r.path for r in ring] == [f"/r{n}" for n in kept]
    assert (len(ring), ring.total) == (len(kept), appended)
    if kept:
        assert ring[-1].path == f"/r{appended - 1}"


def test_the_double_bounds_both_record_kinds() -> None:
    double = WorkspaceDouble()  # not started: no socket
    for ring in (double.requests, double.queries):
        assert isinstance(ring, RecordRing) and ring.maxlen == MAX_RECORDS
    double.requests.append(record(1))
    assert (double.request_count, double.query_count) == (1, 0)


def write(timestamps: range | list[int]) -> remote_pb2.WriteRequest:
    request = remote_pb2.WriteRequest()
    ts = request.timeseries.add()
    ts.labels.add(name="__name__", value="gpu_util")
    for t in timestamps:
        ts.samples.add(timestamp=t, value=1.0)
    return request


@pytest.mark.parametrize(
    ("keep_s", "points", "most_kept", "resent"),
    [
        pytest.param(0.0, 1000, 1000, (200, ""), id="kept_by_default"),
        pytest.param(60.0, 1000, FORGET_EVERY + 60, (400, "out_of_order"), id="bounded"),
        pytest.param(60.0, FORGET_EVERY - 1, FORGET_EVERY - 1, (200, ""), id="not_scanned_yet"),
    ],
)
def test_the_store_forgets_old_points_only_when_asked(
    keep_s: float, points: int, most_kept: int, resent: tuple[int, str]
) -> None:
    store = WorkspaceStore(limits=Limits(keep_points_s=keep_s), now_s=0.0)
    kept = []
    for i in range(points):  # one point a second, one request each
        outcome = store.ingest(write([i * 1000]), now_s=i)
        assert outcome.status == 200, outcome
        kept.append(len(store.series[(("__name__", "gpu_util"),)].samples))
    assert max(kept) <= most_kept and kept[-1] >= min(points, 61)
    assert store.stored_samples == points  # every point counted, forgotten ones too
    # The first point resent: the same point again while kept, out of order once forgotten.
    again = store.ingest(write([0]), now_s=points)
    assert (again.status, again.reason) == resent
