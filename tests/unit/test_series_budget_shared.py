"""The series budget shared by the workers of ``rwrouter run --workers``: the table of active
series in a memory-mapped file (:mod:`rwrouter.pipeline.budgets`) and the pure policy deciding
against it (:class:`rwrouter.routing.budget.SeriesBudget` with a store)."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

from rwrouter.config import OnSeriesLimit
from rwrouter.pipeline.budgets import BudgetTables, SharedSeries, table_size
from rwrouter.routing.budget import SeriesBudget, series_key

WINDOW = 80.0  # seconds: buckets of 10 s
T0 = 1_000.0


def table(path: Path, limit: int = 10) -> SharedSeries:
    return SharedSeries(str(path), window=WINDOW, limit=limit)


def test_two_maps_of_one_file_agree(tmp_path: Path) -> None:
    a, b = table(tmp_path / "t"), table(tmp_path / "t")
    assert [a.admit(k, T0, 2) for k in (11, 12)] == [True, True]
    assert (b.active(T0), b.keys()) == (2, 2)
    assert b.admit(11, T0 + 1, 2), "a series the other map admitted is active"
    assert not b.admit(13, T0 + 1, 2), "no room left: the other map's series count"
    assert a.admit(13, T0 + 1, 3), "a larger limit has room"
    assert a.active(T0 + 1) == b.active(T0 + 1) == 3


@pytest.mark.parametrize(
    ("later", "active"),
    [
        pytest.param(WINDOW - 1, 1, id="within_the_window"),
        pytest.param(WINDOW + 5, 1, id="up_to_a_bucket_longer"),
        pytest.param(WINDOW + 10, 0, id="past_the_window_and_a_bucket"),
        pytest.param(10 * WINDOW, 0, id="long_after"),
    ],
)
def test_series_leave_the_window(tmp_path: Path, later: float, active: int) -> None:
    t = table(tmp_path / "t")
    assert t.admit(7, T0, 1)
    assert t.active(T0 + later) == active
    assert t.admit(8, T0 + later, 1) == (active == 0), "room only once the first one left"


def test_a_refreshed_series_stays_and_an_absent_one_is_added(tmp_path: Path) -> None:
    t = table(tmp_path / "t")
    assert t.admit(1, T0, 2)
    t.refresh([1, 2], T0 + WINDOW / 2)  # 2: sent, admitted by no one here (beyond the limit)
    assert t.active(T0 + WINDOW + 20) == 2
    assert not t.admit(3, T0 + WINDOW + 20, 2)
    assert t.active(T0 + 2 * WINDOW) == 0


def test_expired_keys_are_swept_when_the_table_is_full(tmp_path: Path) -> None:
    limit = 8
    t = table(tmp_path / "t", limit)
    max_keys, capacity = table_size(limit)
    now, admitted = T0, 0
    for key in range(1, 3 * max_keys):
        if key % limit == 0:
            now += WINDOW * 2  # the earlier ones left the window
        admitted += t.admit(key, now, limit)
        assert t.keys() <= max_keys < capacity
    assert admitted == 3 * max_keys - 1, "the room of expired keys was always found"


def _admit_all(path: str, keys: range, limit: int, out: multiprocessing.SimpleQueue[int]) -> None:
    t = SharedSeries(path, window=WINDOW, limit=limit)
    out.put(sum(t.admit(k, T0, limit) for k in keys))


def test_two_processes_never_admit_more_than_the_limit(tmp_path: Path) -> None:
    path, limit = str(tmp_path / "t"), 300
    context = multiprocessing.get_context("fork")
    out = context.SimpleQueue()
    procs = [
        context.Process(target=_admit_all, args=(path, range(1 + i, 2_000, 2), limit, out))
        for i in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert out.get() + out.get() == limit
    assert table(tmp_path / "t", limit).active(T0) == limit


def test_two_threads_never_admit_more_than_the_limit(tmp_path: Path) -> None:
    limit, counts = 300, [0, 0]
    tables = [table(tmp_path / "t", limit), table(tmp_path / "t", limit)]

    def run(i: int) -> None:
        for start, shared in ((1, tables[i]), (1_000, tables[0])):  # own map, then a shared one
            keys = range(start + i, start + 999, 2)
            counts[i] += sum(shared.admit(k, T0, limit) for k in keys)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert sum(counts) == limit == tables[1].active(T0)


def test_a_table_of_another_size_is_refused(tmp_path: Path) -> None:
    table(tmp_path / "t", 10)
    with pytest.raises(OSError, match="another size"):
        table(tmp_path / "t", 100_000)


def test_tables_are_one_per_destination_window_and_size(tmp_path: Path) -> None:
    from rwrouter.config import parse_config

    config = parse_config(
        "remote_write:\n"
        "  - {name: a, url: 'http://x/w', series_limit: 10, on_series_limit: drop}\n"
        "  - {name: b, url: 'http://y/w', series_limit: 10, on_series_limit: drop}\n",
        env={},
    )
    tables = BudgetTables(str(tmp_path))
    a, b = config.remote_write
    assert tables(a) is tables(a) and tables(a) is not tables(b)
    tables.close()


def budget(store: SharedSeries | None, limit: int = 2) -> SeriesBudget:
    return SeriesBudget(
        limit=limit, window=WINDOW, action=OnSeriesLimit.FALLBACK, now=T0, store=store
    )


def test_budgets_of_two_workers_on_one_table_are_one_budget(tmp_path: Path) -> None:
    one, two = budget(table(tmp_path / "t")), budget(table(tmp_path / "t"))
    assert one.decide(key=b"k1", name=b"up", hashed=1, now=T0)
    assert two.decide(key=b"k2", name=b"up", hashed=2, now=T0)
    assert two.decide(key=b"k1", name=b"up", hashed=1, now=T0), "the other worker's series"
    assert not one.decide(key=b"k3", name=b"up", hashed=3, now=T0)
    assert (one.active(T0), two.active(T0), one.limited, two.limited) == (2, 2, 1, 0)
    assert one.state(T0).over == {"up": 1}


def test_series_key_is_never_zero() -> None:
    assert series_key(b"", 0) == 1 and series_key(b"up", 5) & 0xFFFFFFFF == 5
