"""The dead-letter store (rwrouter.deadletter.store): format, order, bound, robustness."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from rwrouter.deadletter.entry import MAGIC
from rwrouter.deadletter.store import (
    RESPONSE_MAX_BYTES,
    DeadLetter,
    DeadLetterStore,
    dead_letter_dir,
)
from rwrouter.wire import decompress
from tests.support.series import Series, write_request

T0 = 1_700_000_000.0  # unix seconds


class Clock:
    """A settable wall clock (unix seconds)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def raw_batch(n: int, *, name: str = "up") -> bytes:
    """An uncompressed WriteRequest of ``n`` series with one sample each."""
    series = [
        Series((("__name__", name), ("i", str(i))), ((1000 + i, float(i)),)) for i in range(n)
    ]
    return bytes(write_request(series).SerializeToString())


def add(store: DeadLetterStore, raw: bytes, **overrides: Any) -> int:
    fields: dict[str, Any] = {
        "kind": "samples",
        "status": 400,
        "reason": "4xx",
        "response": "out of bounds",
        "series": 1,
        "samples": 1,
    }
    fields.update(overrides)
    return store.add(raw=raw, **fields)


def unpack(store: DeadLetterStore, entry: DeadLetter) -> bytes:
    return decompress(store.body(entry), max_decoded_bytes=1 << 30)


# round trip ----------------------------------------------------------------------------------
ROUND_TRIPS = [
    # id, add() arguments, expected DeadLetter fields (besides name, at_ms, body_bytes)
    (
        "http_400",
        {
            "status": 400,
            "reason": "4xx",
            "response": "out of bounds",
            "series": 3,
            "samples": 3,
            "kind": "samples",
        },
        None,
    ),
    (
        "no_status_retry_budget",
        {
            "status": None,
            "reason": "retry_budget",
            "response": "ClientConnectorError: refused",
            "series": 2,
            "samples": 5,
            "kind": "samples",
        },
        None,
    ),
    (
        "metadata_batch",
        {
            "status": 422,
            "reason": "4xx",
            "response": "",
            "series": 0,
            "samples": 2,
            "kind": "metadata",
        },
        None,
    ),
    (
        "response_cut_to_4_kib",
        {
            "status": 413,
            "reason": "too_large",
            "response": "x" * 10_000,
            "series": 1,
            "samples": 1,
            "kind": "samples",
        },
        {"response": "x" * RESPONSE_MAX_BYTES},
    ),
    (
        "response_cut_on_a_character_boundary",
        {
            "status": 400,
            "reason": "4xx",
            "response": "é" * 3000,
            "series": 1,
            "samples": 1,
            "kind": "samples",
        },
        {"response": "é" * (RESPONSE_MAX_BYTES // 2)},
    ),
    (
        "response_with_newlines_and_quotes",
        {
            "status": 400,
            "reason": "4xx",
            "response": 'line 1\n"line 2"\r\n\x00',
            "series": 1,
            "samples": 1,
            "kind": "samples",
        },
        None,
    ),
]


@pytest.mark.parametrize(
    ("fields", "changed"), [c[1:] for c in ROUND_TRIPS], ids=[c[0] for c in ROUND_TRIPS]
)
def test_round_trip(tmp_path: Path, fields: dict[str, Any], changed: dict[str, Any] | None) -> None:
    raw = raw_batch(3)
    store = DeadLetterStore(tmp_path / "d", max_bytes=1 << 20, wall_clock=Clock(T0 + 0.0125))
    assert store.add(raw=raw, **fields) == 0
    (entry,) = store.entries()
    expected = {**fields, **(changed or {})}
    assert {k: getattr(entry, k) for k in expected} == expected
    assert entry.at_ms == 1_700_000_000_012
    assert unpack(store, entry) == raw
    assert entry.body_bytes == len(store.body(entry))
    assert len(store) == 1
    assert store.size_bytes == (tmp_path / "d" / entry.name).stat().st_size
    store.remove(entry)
    assert store.entries() == [] and len(store) == 0 and store.size_bytes == 0
    store.remove(entry)  # already gone: no error


def test_file_format_is_magic_json_line_then_body(tmp_path: Path) -> None:
    store = DeadLetterStore(tmp_path, max_bytes=1 << 20, wall_clock=Clock())
    add(store, raw_batch(1))
    (entry,) = store.entries()
    data = (tmp_path / entry.name).read_bytes()
    assert data.startswith(MAGIC)
    header, body = data[len(MAGIC) :].split(b"\n", 1)
    assert header.startswith(b"{") and header.endswith(b"}")
    assert body == store.body(entry)


# order -------------------------------------------------------------------------------------
ORDERS = [
    # id, wall clock times (seconds) of successive adds
    ("clock_advancing", [T0, T0 + 1, T0 + 2, T0 + 3]),
    ("same_millisecond", [T0, T0, T0, T0]),
    ("clock_stepping_back", [T0 + 10, T0 + 5, T0, T0 - 100]),
]


@pytest.mark.parametrize("times", [c[1] for c in ORDERS], ids=[c[0] for c in ORDERS])
def test_entries_oldest_first(tmp_path: Path, times: list[float]) -> None:
    clock = Clock()
    store = DeadLetterStore(tmp_path, max_bytes=1 << 20, wall_clock=clock)
    for i, now in enumerate(times):
        clock.now = now
        add(store, raw_batch(1, name=f"m{i}"), series=i)
    entries = store.entries()
    assert [e.series for e in entries] == list(range(len(times)))
    assert [e.at_ms for e in entries] == [int(t * 1000) for t in times]  # the real times
    # a second store on the same directory (a restarted process) lists the same, and adds after
    restarted = DeadLetterStore(tmp_path, max_bytes=1 << 20, wall_clock=Clock(min(times) - 1))
    assert restarted.entries() == entries
    add(restarted, b"", series=99)
    assert [e.series for e in restarted.entries()] == [*range(len(times)), 99]


def test_adds_from_threads_are_all_kept_in_order(tmp_path: Path) -> None:
    """Senders hand refused batches to worker threads (``asyncio.to_thread``) concurrently."""
    store = DeadLetterStore(tmp_path, max_bytes=1 << 30, wall_clock=Clock())  # one millisecond

    def add_many(thread: int) -> None:
        for i in range(20):
            add(store, raw_batch(1), series=thread, samples=i)

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(add_many, range(4)))
    entries = store.entries()
    assert len(entries) == 80 and len({e.name for e in entries}) == 80
    for thread in range(4):
        assert [e.samples for e in entries if e.series == thread] == list(range(20))


def test_directory_created_on_first_add(tmp_path: Path) -> None:
    directory = tmp_path / "data" / "rejected" / "x"
    store = DeadLetterStore(directory, max_bytes=1 << 20)
    assert store.entries() == [] and len(store) == 0 and store.size_bytes == 0
    assert not directory.exists()
    add(store, b"")
    assert directory.is_dir() and len(store) == 1


def test_unknown_kind_is_refused(tmp_path: Path) -> None:
    store = DeadLetterStore(tmp_path / "d", max_bytes=1 << 20)
    with pytest.raises(ValueError, match="kind"):
        add(store, b"", kind="exemplars")
    assert not (tmp_path / "d").exists()


# bound -------------------------------------------------------------------------------------
def _entry_size(tmp_path: Path, series: int) -> int:
    """The file size of one entry of ``series`` series (all entries of this test are equal)."""
    probe = DeadLetterStore(tmp_path / "probe", max_bytes=1 << 30, wall_clock=Clock())
    add(probe, raw_batch(series))
    return probe.size_bytes


BOUNDS = [
    # id, bound in entry sizes (None: just under one entry), adds, removed per add, kept (indexes)
    ("under_the_bound_nothing_removed", 5, 4, [0, 0, 0, 0], [0, 1, 2, 3]),
    ("exactly_the_bound_nothing_removed", 3, 3, [0, 0, 0], [0, 1, 2]),
    ("bound_removes_oldest", 2, 5, [0, 0, 1, 1, 1], [3, 4]),
    ("oversized_single_entry_kept_alone", None, 3, [0, 1, 1], [2]),
]


@pytest.mark.parametrize(
    ("units", "adds", "removed", "kept"), [c[1:] for c in BOUNDS], ids=[c[0] for c in BOUNDS]
)
def test_bound_removes_oldest(
    tmp_path: Path, units: int | None, adds: int, removed: list[int], kept: list[int]
) -> None:
    size = _entry_size(tmp_path, 4)
    bound = size - 1 if units is None else size * units
    clock = Clock()
    store = DeadLetterStore(tmp_path / "d", max_bytes=bound, wall_clock=clock)
    got = []
    for i in range(adds):
        clock.now = T0 + i
        got.append(add(store, raw_batch(4), series=i))
    assert got == removed
    assert [e.series for e in store.entries()] == kept
    assert store.size_bytes == size * len(kept)


def test_entries_removed_by_another_process_make_room(tmp_path: Path) -> None:
    """A replay removing entries while ``run`` adds: nothing fails, nothing extra is removed."""
    size = _entry_size(tmp_path, 2)
    clock = Clock()
    store = DeadLetterStore(tmp_path / "d", max_bytes=size * 2, wall_clock=clock)
    for i in range(2):
        clock.now = T0 + i
        add(store, raw_batch(2), series=i)
    other = DeadLetterStore(tmp_path / "d", max_bytes=size * 2)
    other.remove(other.entries()[0])
    clock.now = T0 + 5
    assert add(store, raw_batch(2), series=2) == 0
    assert [e.series for e in store.entries()] == [1, 2]


# robustness --------------------------------------------------------------------------------
def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-3])


def _bad_magic(path: Path) -> None:
    path.write_bytes(b"X" + path.read_bytes()[1:])


def _bad_json(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"at_ms": ', b'"at_ms": [', 1))


def _missing_field(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"reason"', b'"reasons"', 1))


def _wrong_type(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"series": 1', b'"series": "1"', 1))


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _unreadable_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()  # an entry name that is a directory: not a regular file


def _at_ms_beyond_datetime(path: Path) -> None:
    # once failed the whole `rejected list` ("[Errno 75] Value too large" from the time)
    data = path.read_bytes()
    path.write_bytes(re.sub(rb'"at_ms": \d+', b'"at_ms": ' + str(10**20).encode(), data, count=1))


def _header_nested_too_deep(path: Path) -> None:
    # once a RecursionError traceback: 30000 "[" fit in the 64 KiB the header may take
    data = path.read_bytes()
    start = len(MAGIC)
    end = data.index(b"\n", start)
    path.write_bytes(data[:start] + b"[" * 30_000 + data[end:])


def _fifo(path: Path) -> None:
    # once hung the listing: open() of a FIFO waits for a writer
    path.unlink()
    os.mkfifo(path)


def _symlink_to_another_entry(path: Path) -> None:
    first = sorted(p for p in path.parent.iterdir() if p.name.endswith(".rej"))[0]
    path.unlink()
    path.symlink_to(first)


CORRUPTIONS = [
    ("truncated_body", _truncate),
    ("bad_magic", _bad_magic),
    ("bad_json", _bad_json),
    ("missing_header_field", _missing_field),
    ("wrong_field_type", _wrong_type),
    ("empty_file", _empty),
    ("not_a_file", _unreadable_directory),
    ("at_ms_beyond_datetime", _at_ms_beyond_datetime),
    ("header_nested_too_deep", _header_nested_too_deep),
    ("fifo", _fifo),
    ("symlink", _symlink_to_another_entry),
]


@pytest.mark.parametrize("corrupt", [c[1] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS])
def test_corrupt_entry_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, corrupt: Callable[[Path], None]
) -> None:
    clock = Clock()
    store = DeadLetterStore(tmp_path, max_bytes=1 << 20, wall_clock=clock)
    for i in range(3):
        clock.now = T0 + i
        add(store, raw_batch(1), series=1, samples=i)
    victim = store.entries()[1]
    before = (tmp_path / victim.name).read_bytes()
    corrupt(tmp_path / victim.name)
    path = tmp_path / victim.name
    assert not path.is_file() or path.is_symlink() or path.read_bytes() != before
    with caplog.at_level(logging.WARNING, logger="rwrouter.rejected"):
        assert [e.samples for e in store.entries()] == [0, 2]
    assert victim.name in caplog.text and "corrupt" in caplog.text


def test_body_not_matching_its_checksum_is_an_error(tmp_path: Path) -> None:
    store = DeadLetterStore(tmp_path, max_bytes=1 << 20)
    add(store, raw_batch(2))
    (entry,) = store.entries()
    path = tmp_path / entry.name
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match"):
        store.body(entry)
    store.remove(entry)
    with pytest.raises(FileNotFoundError):
        store.body(entry)


def test_tmp_and_foreign_files_ignored(tmp_path: Path) -> None:
    store = DeadLetterStore(tmp_path, max_bytes=1 << 20, wall_clock=Clock(), totals_ttl=0)
    add(store, raw_batch(1))
    (entry,) = store.entries()
    fresh = tmp_path / f".{entry.name[:-4]}x.rej.tmp"
    fresh.write_bytes((tmp_path / entry.name).read_bytes())  # a write in progress
    stale = tmp_path / ".1699999999999-000000-00000000.rej.tmp"
    stale.write_bytes(b"half an entry")  # a crash while writing, long ago
    os.utime(stale, (0, 0))
    for foreign in ("README", "1700000000000-000000-0000000.rej", "x.rej"):
        (tmp_path / foreign).write_bytes(MAGIC)
    assert store.entries() == [entry] and len(store) == 1
    assert store.size_bytes == (tmp_path / entry.name).stat().st_size
    assert stale.exists()  # reads never delete
    add(store, raw_batch(1))  # lists the directory (totals_ttl 0): cleans up crash leftovers
    assert not stale.exists() and fresh.exists()
    assert len(store.entries()) == 2


def test_remove_refuses_names_outside_the_store(tmp_path: Path) -> None:
    store = DeadLetterStore(tmp_path / "d", max_bytes=1 << 20)
    (tmp_path / "victim").write_bytes(b"keep me")
    forged = DeadLetter(
        name="../victim",
        at_ms=0,
        status=None,
        reason="",
        response="",
        series=0,
        samples=0,
        kind="samples",
        body_bytes=0,
    )
    with pytest.raises(ValueError, match="not a dead-letter entry name"):
        store.remove(forged)
    assert (tmp_path / "victim").exists()


# destination directory names ---------------------------------------------------------------
DIR_NAMES = [
    # id, destination name, expected directory name
    ("plain_name", "workspace", "workspace"),
    ("host_name", "prometheus.example.com", "prometheus.example.com"),
    ("host_and_port", "prometheus:9090", "prometheus%3A9090"),
    ("slash", "team/a", "team%2Fa"),
    ("dot", ".", "%2E"),
    ("dot_dot", "..", "%2E."),
    ("hidden", ".hidden", "%2Ehidden"),
    ("percent_is_escaped", "a%2Fb", "a%252Fb"),
    ("space_and_unicode", "équipe a", "%C3%A9quipe%20a"),
    ("backslash", "a\\b", "a%5Cb"),
]


@pytest.mark.parametrize(
    ("name", "expected"), [c[1:] for c in DIR_NAMES], ids=[c[0] for c in DIR_NAMES]
)
def test_rejected_dir_is_safe_and_unambiguous(tmp_path: Path, name: str, expected: str) -> None:
    path = dead_letter_dir(str(tmp_path), name)
    assert path == tmp_path / "rejected" / expected
    assert path.parent == tmp_path / "rejected"  # one path step, never outside
    assert unquote(path.name) == name  # reversible, hence one to one
    store = DeadLetterStore(path, max_bytes=1 << 20)
    add(store, b"")
    assert [p.name for p in (tmp_path / "rejected").iterdir()] == [expected]


def test_rejected_dir_names_never_collide() -> None:
    names = [c[1] for c in DIR_NAMES] + ["team%2Fa", "%2E", "%2E.", "prometheus%3A9090"]
    dirs = {dead_letter_dir("data", name) for name in names}
    assert len(dirs) == len(set(names))


def test_rejected_dir_refuses_an_empty_name() -> None:
    with pytest.raises(ValueError, match="empty"):
        dead_letter_dir("data", "")


def test_totals_are_counted_again_after_their_ttl(tmp_path: Path) -> None:
    """Another process (a replay) removes entries: the gauges see it once the totals expire."""
    store = DeadLetterStore(tmp_path, max_bytes=1 << 20, wall_clock=Clock(), totals_ttl=0)
    add(store, raw_batch(1))
    add(store, raw_batch(2))
    assert len(store) == 2
    other = DeadLetterStore(tmp_path, max_bytes=1 << 20)
    other.remove(other.entries()[0])
    assert len(store) == 1
    assert store.size_bytes == sum(p.stat().st_size for p in tmp_path.glob("*.rej"))
