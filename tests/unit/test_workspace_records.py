"""The workspace double keeps its request records bounded: the last ones, with a total."""

from __future__ import annotations

import pytest

from rwrouter.doubles.workspace import WorkspaceDouble
from rwrouter.doubles.workspace_records import MAX_RECORDS, RecordRing, RequestRecord


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
