"""The durable queue (rwrouter.queue.diskqueue): append, read, commit, reopen after a crash,
torn tails, corrupt records, the position file, room accounting and drop_oldest.

Segments are kept small (``segment_bytes``) so a few records span several segment files."""

from __future__ import annotations

import os
import random
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rwrouter.queue.diskqueue import (
    SUFFIX,
    DiskQueue,
    Dropped,
    Position,
    QueuedRecord,
    Recovery,
    segment_bytes_for,
)
from rwrouter.queue.records import HEADER, decode_record, encode_share
from tests.support.frames import pack_frames

SEG = 1024  # bytes per segment: three records of REC bytes each
FRAME = 260  # frame bytes per record (incompressible)
BIG = 1 << 30


def record(i: int, *, size: int = FRAME) -> bytes:
    """Record number ``i``: one frame that starts with ``i``, carrying ``i + 1`` samples."""
    frame = struct.pack("<I", i) + random.Random(i).randbytes(size - 4)
    share = encode_share(
        pack_frames([frame], [b"k%d" % i], [i + 1]), received_ms=i, max_body_bytes=BIG
    )
    (out,) = share.records
    return out


REC = len(record(0))  # every record of FRAME bytes has this size
assert 3 * REC <= SEG < 4 * REC


def ident(qr: QueuedRecord) -> int:
    block = decode_record(qr.rest)
    (i,) = struct.unpack_from("<I", block.frames[0])
    assert qr.samples == block.samples == i + 1
    return int(i)


def put(q: DiskQueue, ids: range | list[int], *, size: int = FRAME) -> int:
    """Append records ``ids``, one append each (as one request's share each), the way the
    router does (reserve, then append); returns the last ticket."""
    ticket = 0
    for i in ids:
        data = record(i, size=size)
        q.reserve(len(data))
        appended = q.append([data], [i + 1], reserved=len(data))
        assert appended is not None  # blocking: always a ticket
        ticket = appended
    return ticket


def read_blocking(q: DiskQueue, max_bytes: int) -> list[QueuedRecord]:
    """``q.read(max_bytes)``, blocking (so never None)."""
    got = q.read(max_bytes)
    assert got is not None
    return got


def read_all(q: DiskQueue, *, max_bytes: int = BIG) -> list[QueuedRecord]:
    out: list[QueuedRecord] = []
    while batch := q.read(max_bytes):
        out += batch
    return out


def ids(records: list[QueuedRecord]) -> list[int]:
    """The numbers of the intact records (corrupt ones come back marked, and are skipped)."""
    return [ident(r) for r in records if not r.corrupt]


def seg_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(SUFFIX))


Opener = Callable[..., tuple[DiskQueue, Recovery]]


@pytest.fixture
def opener(tmp_path: Path) -> Iterator[Opener]:
    """Open a queue in ``tmp_path / "q"`` (closing the one open before: a "restart")."""
    opened: list[DiskQueue] = []

    def open_queue(*, max_bytes: int = BIG, segment_bytes: int = SEG) -> tuple[DiskQueue, Recovery]:
        for old in opened:
            old.close()
        q = DiskQueue(tmp_path / "q", max_bytes=max_bytes, segment_bytes=segment_bytes)
        opened.append(q)
        return q, q.open()

    yield open_queue
    for q in opened:
        q.close()


# ---------------------------------------------------------------------------------------------
# opening, appending, reading, committing


def test_open_creates_an_empty_queue(opener: Opener, tmp_path: Path) -> None:
    q, recovery = opener()
    assert recovery == Recovery(
        segments=1,
        unsent_records=0,
        unsent_bytes=0,
        torn_records=0,
        torn_bytes=0,
        torn_samples=None,
        position_reset=False,
        resend_until=Position(0, 0),
    )
    assert [p.name for p in seg_files(tmp_path / "q")] == [f"{0:020d}{SUFFIX}"]
    assert (tmp_path / "q" / "position").exists()
    assert q.read(BIG) == []
    assert (q.size_bytes, q.unread_records, q.unread_samples, q.unread_bytes) == (0, 0, 0, 0)


def test_append_read_commit(opener: Opener) -> None:
    q, _ = opener()
    assert put(q, range(2)) == 2
    assert put(q, [2]) == 3  # one ticket per append
    assert (q.unread_records, q.unread_samples, q.unread_bytes) == (3, 6, 3 * REC)
    got = read_blocking(q, BIG)
    assert ids(got) == [0, 1, 2]
    assert [r.end for r in got] == [Position(0, REC * n) for n in (1, 2, 3)]
    assert (q.unread_records, q.unread_samples, q.unread_bytes) == (0, 0, 0)
    assert q.read(BIG) == []
    q.commit(got[-1].end)
    assert q.read(BIG) == []
    put(q, [3])
    assert ids(read_blocking(q, BIG)) == [3]


READ_SIZE_CASES = [
    # id, read max_bytes, records per read
    ("at_least_one_record", 1, [1, 1, 1, 1]),
    ("stops_once_reached", REC + 1, [2, 2]),
    ("exactly_one_record_body", REC - HEADER.size, [1, 1, 1, 1]),
    ("everything", BIG, [4]),
]


@pytest.mark.parametrize(
    ("max_bytes", "sizes"), [c[1:] for c in READ_SIZE_CASES], ids=[c[0] for c in READ_SIZE_CASES]
)
def test_read_size(opener: Opener, max_bytes: int, sizes: list[int]) -> None:
    q, _ = opener()
    put(q, range(4))  # two segments: 3 + 1
    batches = []
    while batch := q.read(max_bytes):
        batches.append(ids(batch))
    assert [len(b) for b in batches] == sizes
    assert [i for b in batches for i in b] == [0, 1, 2, 3]


def test_sync_marks_appends_on_disk(opener: Opener) -> None:
    q, _ = opener()
    assert not q.dirty
    ticket = put(q, [0])
    assert q.dirty and q.synced < ticket
    q.sync()
    assert not q.dirty and q.synced == ticket == q.appended


# ---------------------------------------------------------------------------------------------
# reopening: committed records are not sent again, everything else is, in order

REOPEN_CASES = [
    # id, records appended, records read, records committed, expected after reopen
    ("nothing_read", 5, 0, 0, [0, 1, 2, 3, 4]),
    ("read_not_committed", 5, 5, 0, [0, 1, 2, 3, 4]),
    ("committed_some", 5, 5, 2, [2, 3, 4]),
    ("committed_some_unread_rest", 5, 2, 2, [2, 3, 4]),
    ("committed_to_a_segment_end", 8, 8, 3, [3, 4, 5, 6, 7]),
    ("committed_into_a_later_segment", 8, 8, 7, [7]),
    ("committed_everything", 8, 8, 8, []),
]


@pytest.mark.parametrize(
    ("appended", "read", "committed", "resent"),
    [c[1:] for c in REOPEN_CASES],
    ids=[c[0] for c in REOPEN_CASES],
)
def test_reopen_resumes_after_the_committed_position(
    opener: Opener, tmp_path: Path, appended: int, read: int, committed: int, resent: list[int]
) -> None:
    q, _ = opener()
    put(q, range(appended))
    got = [read_blocking(q, 1)[0] for _ in range(read)]
    assert ids(got) == list(range(read))
    if committed:
        q.commit(got[committed - 1].end)
    q, recovery = opener()
    assert recovery.unsent_records == len(resent)
    assert recovery.unsent_bytes == REC * len(resent)
    assert (recovery.torn_records, recovery.position_reset) == (0, False)
    assert recovery.segments == len(seg_files(tmp_path / "q"))
    assert (q.unread_records, q.unread_bytes) == (len(resent), REC * len(resent))
    assert ids(read_all(q)) == resent
    put(q, [100])  # appends continue after the old records
    assert ids(read_all(q)) == [100]


def test_commit_only_moves_forward(opener: Opener) -> None:
    q, _ = opener()
    put(q, range(3))
    got = read_blocking(q, BIG)
    q.commit(got[1].end)
    q.commit(got[0].end)  # late and older: ignored
    q, _ = opener()
    assert ids(read_all(q)) == [2]


# ---------------------------------------------------------------------------------------------
# segments


def test_segments_roll_and_fully_committed_ones_are_deleted(opener: Opener, tmp_path: Path) -> None:
    q, _ = opener()
    put(q, range(10))  # 3 + 3 + 3 + 1 records
    files = seg_files(tmp_path / "q")
    assert [p.name for p in files] == [f"{n:020d}{SUFFIX}" for n in range(4)]
    assert [p.stat().st_size for p in files] == [3 * REC, 3 * REC, 3 * REC, REC]
    assert q.segments == 4 and q.size_bytes == 10 * REC
    got = read_all(q)
    assert ids(got) == list(range(10))
    q.commit(got[3].end)  # into segment 1: segment 0 is done
    assert [p.name for p in seg_files(tmp_path / "q")] == [p.name for p in files[1:]]
    q.commit(got[5].end)  # the end of segment 1: done too
    assert [p.name for p in seg_files(tmp_path / "q")] == [p.name for p in files[2:]]
    assert q.segments == 2 and q.size_bytes == 4 * REC
    q.commit(got[9].end)  # everything: the segment being written stays
    assert [p.name for p in seg_files(tmp_path / "q")] == [files[3].name]


ROLL_CASES = [
    # id, segment_bytes, records per segment
    ("exactly_three_records", 3 * REC, 3),
    ("one_byte_short_of_three", 3 * REC - 1, 2),
    ("one_record", REC, 1),
    ("smaller_than_a_record", 10, 1),
]


@pytest.mark.parametrize(
    ("segment_bytes", "per_segment"), [c[1:] for c in ROLL_CASES], ids=[c[0] for c in ROLL_CASES]
)
def test_segment_rolls_before_it_would_pass_segment_bytes(
    opener: Opener, tmp_path: Path, segment_bytes: int, per_segment: int
) -> None:
    q, _ = opener(segment_bytes=segment_bytes)
    for i in range(6):
        put(q, [i])
    sizes = [p.stat().st_size for p in seg_files(tmp_path / "q")]
    assert sizes == [per_segment * REC] * (6 // per_segment)
    assert ids(read_all(q)) == list(range(6))


def test_segments_before_the_position_are_removed_at_open(opener: Opener, tmp_path: Path) -> None:
    q, _ = opener()
    put(q, range(7))
    files = seg_files(tmp_path / "q")
    kept = [p.read_bytes() for p in files[:2]]
    got = read_all(q)
    q.commit(got[3].end)
    for path, data in zip(files[:2], kept, strict=True):
        path.write_bytes(data)  # as if the process died between the commit and the unlink
    q, recovery = opener()
    assert recovery.unsent_records == 3
    assert [p.name for p in seg_files(tmp_path / "q")] == [p.name for p in files[1:]]
    assert ids(read_all(q)) == [4, 5, 6]


def test_record_larger_than_a_segment_gets_its_own(opener: Opener, tmp_path: Path) -> None:
    q, _ = opener()
    put(q, [0])
    put(q, [1], size=3 * SEG)
    put(q, [2])
    assert [p.stat().st_size for p in seg_files(tmp_path / "q")] == [
        REC,
        len(record(1, size=3 * SEG)),
        REC,
    ]
    assert ids(read_all(q)) == [0, 1, 2]


@pytest.mark.parametrize(
    ("max_bytes", "expected"),
    [(0, 16 * 1024), (1 << 20, 64 * 1024), (1 << 40, 64 * 1024 * 1024)],
    ids=["floor_16_kib", "a_sixteenth", "cap_64_mib"],
)
def test_segment_bytes_for(max_bytes: int, expected: int) -> None:
    assert segment_bytes_for(max_bytes) == expected


# ---------------------------------------------------------------------------------------------
# torn tail: a write cut short by a crash is cut off at open


def _cut(keep: int) -> Callable[[Path], None]:
    """Truncate the last record of the file to its first ``keep`` bytes."""

    def damage(path: Path) -> None:
        os.truncate(path, path.stat().st_size - REC + keep)

    return damage


def _garbage(data: bytes) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        with open(path, "ab") as f:
            f.write(data)

    return damage


TORN_CASES = [
    # id, records appended, damage to the last segment, records left, torn bytes, torn samples
    ("mid_header", 5, _cut(5), 4, 5, None),
    ("header_only", 5, _cut(HEADER.size), 4, HEADER.size, None),
    ("mid_fixed_part", 5, _cut(HEADER.size + 10), 4, HEADER.size + 10, None),
    ("mid_body", 5, _cut(REC - 10), 4, REC - 10, 5),
    ("one_byte_short", 5, _cut(REC - 1), 4, REC - 1, 5),
    ("only_record_of_the_segment", 4, _cut(100), 3, 100, 4),
    ("only_record_of_the_queue", 1, _cut(100), 0, 100, 1),
    ("short_garbage", 5, _garbage(b"\x01\x02\x03"), 5, 3, None),
    ("zeros_appended", 5, _garbage(bytes(200)), 5, 200, None),
    ("garbage_length_past_the_end", 5, _garbage(b"\x00\x00\x01\x00" + b"\xff" * 14), 5, 18, None),
    ("garbage_length_not_a_record", 5, _garbage(b"\xff" * 64), 5, 64, None),  # not 2**32-1
]


@pytest.mark.parametrize(
    ("appended", "damage", "left", "torn_bytes", "torn_samples"),
    [c[1:] for c in TORN_CASES],
    ids=[c[0] for c in TORN_CASES],
)
def test_torn_tail_is_cut_at_open(
    opener: Opener,
    tmp_path: Path,
    appended: int,
    damage: Callable[[Path], None],
    left: int,
    torn_bytes: int,
    torn_samples: int | None,
) -> None:
    q, _ = opener()
    put(q, range(appended))
    q.close()
    last = seg_files(tmp_path / "q")[-1]
    damage(last)
    q, recovery = opener()
    assert recovery.torn_records == 1
    assert recovery.torn_bytes == torn_bytes
    assert recovery.torn_samples == torn_samples
    assert recovery.unsent_records == left
    assert last.stat().st_size == (left % 3) * REC  # cut exactly
    assert ids(read_all(q)) == list(range(left))
    put(q, [100])  # the process starts: appends and reads go on
    assert ids(read_all(q)) == [100]
    q, recovery = opener()
    assert (recovery.torn_records, recovery.torn_bytes) == (0, 0)
    assert ids(read_all(q)) == [*range(left), 100]


# ---------------------------------------------------------------------------------------------
# corrupt records found while reading


def _flip_at(offset: int) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[offset] ^= 0x40
        path.write_bytes(bytes(data))

    return damage


def _length(value: int, record_at: int) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        data = bytearray(path.read_bytes())
        struct.pack_into("<I", data, record_at * REC, value)
        path.write_bytes(bytes(data))

    return damage


CORRUPT_CASES = [
    # id, damage to segment 1 (records 3, 4, 5), records read back, corrupt entries
    ("first_record_body", _flip_at(REC // 2), [0, 1, 2, 4, 5, 6, 7, 8, 9], 1),
    ("middle_record_body", _flip_at(REC + REC // 2), [0, 1, 2, 3, 5, 6, 7, 8, 9], 1),
    ("last_record_body", _flip_at(2 * REC + 100), [0, 1, 2, 3, 4, 6, 7, 8, 9], 1),
    ("middle_record_crc", _flip_at(REC + 5), [0, 1, 2, 3, 5, 6, 7, 8, 9], 1),
    # a length that makes no sense: the next record cannot be found, the rest of the segment
    # is skipped
    ("length_past_the_segment", _length(10 * REC, 1), [0, 1, 2, 3, 6, 7, 8, 9], 1),
    ("length_huge", _length(0xFFFFFFFF, 0), [0, 1, 2, 6, 7, 8, 9], 1),
    # a sound but wrong length: that record fails its checksum, then one byte is left
    ("length_short", _length(REC - HEADER.size - 1, 2), [0, 1, 2, 3, 4, 6, 7, 8, 9], 2),
]


@pytest.mark.parametrize(
    ("damage", "expected", "corrupt"),
    [c[1:] for c in CORRUPT_CASES],
    ids=[c[0] for c in CORRUPT_CASES],
)
def test_corrupt_record_is_skipped_and_comes_back_marked(
    opener: Opener,
    tmp_path: Path,
    damage: Callable[[Path], None],
    expected: list[int],
    corrupt: int,
) -> None:
    q, _ = opener()
    put(q, range(10))
    q.close()
    damage(seg_files(tmp_path / "q")[1])
    q, recovery = opener()
    assert recovery.torn_records == 0  # only the last segment is checked at open
    assert q.corrupt_records == 0
    got = read_all(q)
    assert ids(got) == expected
    assert sum(r.corrupt for r in got) == corrupt == q.corrupt_records
    assert [r.end for r in got] == sorted(r.end for r in got)  # in order: all can commit
    assert (q.unread_records, q.unread_bytes) == (0, 0)
    q.commit(got[-1].end)
    put(q, [100])
    assert ids(read_all(q)) == [100]


CORRUPT_LAST_SEGMENT_CASES = [
    # id, damaged record (of 0-2, all in the last segment), records read back after a restart
    ("first", 0, [1, 2]),
    ("middle", 1, [0, 2]),
]


@pytest.mark.parametrize(
    ("damaged", "expected"),
    [c[1:] for c in CORRUPT_LAST_SEGMENT_CASES],
    ids=[c[0] for c in CORRUPT_LAST_SEGMENT_CASES],
)
def test_a_corrupt_record_before_intact_ones_is_never_cut_as_a_torn_tail(
    opener: Opener, tmp_path: Path, damaged: int, expected: list[int]
) -> None:
    q, _ = opener()
    put(q, range(3))
    q.close()
    last = seg_files(tmp_path / "q")[-1]
    size = last.stat().st_size
    _flip_at(damaged * REC + 100)(last)
    q, recovery = opener()
    assert (recovery.torn_records, recovery.torn_bytes) == (0, 0)
    assert last.stat().st_size == size  # nothing cut: intact records follow
    got = read_all(q)
    assert ids(got) == expected and q.corrupt_records == 1
    put(q, [100])  # goes to a new segment, after the damaged one
    assert ids(read_all(q)) == [100] and q.segments == 2


def test_corrupt_record_in_the_segment_being_written(opener: Opener, tmp_path: Path) -> None:
    q, _ = opener()
    put(q, range(2))
    _length(10 * REC, 1)(seg_files(tmp_path / "q")[-1])  # damaged under a running queue
    assert ids(read_all(q)) == [0]
    assert q.corrupt_records == 1
    put(q, [2, 3])  # new appends go to a fresh segment that reads back
    assert q.segments == 2
    assert ids(read_all(q)) == [2, 3]
    assert q.corrupt_records == 1


# ---------------------------------------------------------------------------------------------
# the position file


def _write(data: bytes) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        path.write_bytes(data)

    return damage


POSITION_CASES = [
    # id, damage to the position file, position_reset
    ("missing", lambda p: p.unlink(), False),  # as in a new queue: nothing to warn about
    ("empty", _write(b""), True),
    ("truncated", lambda p: _write(p.read_bytes()[:10])(p), True),
    ("flipped_offset", lambda p: _flip_at(8)(p), True),
    ("flipped_crc", lambda p: _flip_at(17)(p), True),
    ("garbage", _write(b"\xff" * 20), True),
]


@pytest.mark.parametrize(
    ("damage", "reset"), [c[1:] for c in POSITION_CASES], ids=[c[0] for c in POSITION_CASES]
)
def test_bad_position_file_sends_everything_again(
    opener: Opener, tmp_path: Path, damage: Callable[[Path], None], reset: bool
) -> None:
    q, _ = opener()
    put(q, range(5))
    got = read_all(q)
    q.commit(got[3].end)  # in segment 1: segment 0 is deleted
    damage(tmp_path / "q" / "position")
    q, recovery = opener()
    assert recovery.position_reset is reset
    assert recovery.unsent_records == 2
    assert ids(read_all(q)) == [3, 4]  # all that is left on disk
    q.commit(Position(1, 2 * REC))
    q, recovery = opener()
    assert not recovery.position_reset  # rewritten
    assert read_all(q) == []


# ---------------------------------------------------------------------------------------------
# the read mark: what may have been sent before a restart


RESEND_CASES = [
    # id, records appended, records read before the restart, committed (index into read or
    # None), records after the restart that may have been sent (ids)
    ("nothing_read", 5, 0, None, []),
    ("read_not_committed", 5, 3, None, [0, 1, 2]),
    ("read_partly_committed", 5, 4, 1, [2, 3]),
    ("all_read_all_committed", 5, 5, 4, []),
    ("read_across_segments", 8, 7, 2, [3, 4, 5, 6]),
]


@pytest.mark.parametrize(
    ("appended", "read", "committed", "maybe_sent"),
    [c[1:] for c in RESEND_CASES],
    ids=[c[0] for c in RESEND_CASES],
)
def test_read_mark_tells_what_may_have_been_sent(
    opener: Opener, appended: int, read: int, committed: int | None, maybe_sent: list[int]
) -> None:
    q, _ = opener()
    put(q, range(appended))
    got: list[QueuedRecord] = []
    while len(got) < read:
        got += read_blocking(q, 1)  # one record (at least) per read
    got = got[:read] if read else got
    if committed is not None:
        q.commit(got[committed].end)
    q, recovery = opener()  # a restart; the position file is what a crash would leave too
    again = read_all(q)
    assert [ident(r) for r in again if r.end <= recovery.resend_until] == maybe_sent
    assert ids(again)[len(maybe_sent) :] == [
        i for i in range(appended) if i not in maybe_sent and (committed is None or i > committed)
    ]


def test_read_mark_survives_a_second_restart_before_reading(opener: Opener) -> None:
    q, _ = opener()
    put(q, range(4))
    q.read(2 * REC)  # records 0, 1 (and maybe 2) read: may be sent
    q, first = opener()
    q, second = opener()  # restarted again without reading: the mark must not shrink
    assert second.resend_until == first.resend_until > Position(0, 0)


def test_unknown_position_marks_everything_as_maybe_sent(opener: Opener, tmp_path: Path) -> None:
    q, _ = opener()
    put(q, range(3))
    q.close()
    (tmp_path / "q" / "position").write_bytes(b"\xff" * 36)
    q, recovery = opener()
    assert recovery.position_reset
    assert all(r.end <= recovery.resend_until for r in read_all(q))


# ---------------------------------------------------------------------------------------------
# room: has_room, reserve, release


# (name, records, blocking): an append that fails before writing leaves the queue usable.
APPEND_ERROR_CASES = [
    ("non_bytes_record_inline", [record(1), "not bytes"], False),
    ("non_bytes_record_blocking", [record(1), "not bytes"], True),
]


@pytest.mark.parametrize(
    ("records", "blocking"),
    [c[1:] for c in APPEND_ERROR_CASES],
    ids=[c[0] for c in APPEND_ERROR_CASES],
)
def test_a_failed_append_releases_the_lock(
    opener: Opener, records: list[Any], blocking: bool
) -> None:
    q, _ = opener()
    q.reserve(100)
    with pytest.raises(TypeError):
        q.append(records, [1] * len(records), reserved=100, blocking=blocking)
    held = q._lock.locked()
    if held:  # release it, so the failure is reported instead of a hang at close
        q._lock.release()
    assert not held
    assert q._reserved == 0  # the reservation is given back too
    assert q.append([record(2)], [1], reserved=0, blocking=False) is not None
    assert ids(read_all(q)) == [2]


def test_has_room_counts_files_and_reservations(opener: Opener) -> None:
    q, _ = opener(max_bytes=4 * REC)
    assert q.has_room(4 * REC) and not q.has_room(4 * REC + 1)
    q.reserve(REC)
    assert q.has_room(3 * REC) and not q.has_room(3 * REC + 1)
    q.append([record(0)], [1], reserved=REC)  # the reservation becomes file bytes
    assert q.size_bytes == REC
    assert q.has_room(3 * REC) and not q.has_room(3 * REC + 1)
    q.reserve(2 * REC)
    assert q.has_room(REC) and not q.has_room(REC + 1)
    q.release(2 * REC)
    assert q.has_room(3 * REC) and not q.has_room(3 * REC + 1)


def test_reading_does_not_make_room_committing_does(opener: Opener) -> None:
    q, _ = opener(max_bytes=6 * REC)
    put(q, range(6))  # two full segments
    assert not q.has_room(1)
    got = read_all(q)
    assert not q.has_room(1)  # read, but not delivered yet
    q.commit(got[2].end)
    assert q.has_room(3 * REC) and not q.has_room(3 * REC + 1)


RECLAIM_CASES = [
    # id, max_bytes, segment_bytes, records appended
    ("queue_smaller_than_a_segment", 3 * REC, 16 * SEG, 3),
    ("one_full_segment", 3 * REC, SEG, 3),
    ("several_segments", 7 * REC, SEG, 7),
]


@pytest.mark.parametrize(
    ("max_bytes", "segment_bytes", "appended"),
    [c[1:] for c in RECLAIM_CASES],
    ids=[c[0] for c in RECLAIM_CASES],
)
def test_has_room_reclaims_a_fully_sent_queue(
    opener: Opener, tmp_path: Path, max_bytes: int, segment_bytes: int, appended: int
) -> None:
    q, _ = opener(max_bytes=max_bytes, segment_bytes=segment_bytes)
    for i in range(appended):
        assert q.has_room(REC)
        put(q, [i])
    assert not q.has_room(REC)
    got = read_all(q)
    q.commit(got[-2].end)
    assert not q.has_room(max_bytes)  # one record is not delivered yet
    q.commit(got[-1].end)
    assert q.has_room(max_bytes)  # everything is sent: never stuck answering 503
    assert q.size_bytes == 0
    assert len(seg_files(tmp_path / "q")) == 1
    for i in range(appended):
        assert q.has_room(REC)
        put(q, [100 + i])
    assert ids(read_all(q)) == [100 + i for i in range(appended)]
    q, recovery = opener(max_bytes=max_bytes, segment_bytes=segment_bytes)
    assert recovery.unsent_records == appended  # read, never committed
    assert ids(read_all(q)) == [100 + i for i in range(appended)]


CORRUPT_RECLAIM_CASES = [
    # id, segment_bytes, records appended, record damaged, read twice (restart), records read
    ("corrupt_last_record", 16 * SEG, 3, 2, False, [0, 1]),
    ("corrupt_middle_record", 16 * SEG, 3, 1, False, [0, 2]),
    ("corrupt_first_record_of_last_segment", SEG, 4, 3, False, [0, 1, 2]),
    ("corrupt_first_record_of_the_queue", 16 * SEG, 3, 0, False, [1, 2]),
    ("found_again_after_a_restart", 16 * SEG, 3, 1, True, [0, 2]),
]


@pytest.mark.parametrize(
    ("segment_bytes", "appended", "damaged", "restart", "expected"),
    [c[1:] for c in CORRUPT_RECLAIM_CASES],
    ids=[c[0] for c in CORRUPT_RECLAIM_CASES],
)
def test_has_room_reclaims_a_sent_queue_with_a_corrupt_segment(
    opener: Opener,
    tmp_path: Path,
    segment_bytes: int,
    appended: int,
    damaged: int,
    restart: bool,
    expected: list[int],
) -> None:
    # The position never reaches the end of a segment whose rest was skipped as corrupt: once
    # everything readable is sent, the queue must still make room (no 503 forever).
    max_bytes = appended * REC
    q, _ = opener(max_bytes=max_bytes, segment_bytes=segment_bytes)
    put(q, range(appended))
    path = seg_files(tmp_path / "q")[damaged // 3]
    _flip_at((damaged % 3) * REC + 100)(path)
    got = read_all(q)
    assert ids(got) == expected and q.corrupt_records == 1
    if restart:  # an empty segment (started after the corrupt one) is now the last one
        q, recovery = opener(max_bytes=max_bytes, segment_bytes=segment_bytes)
        assert recovery.torn_records == 0
        got = read_all(q)
        assert ids(got) == expected and q.corrupt_records == 1
    if got:
        assert not q.has_room(REC)  # read, not done yet
        q.commit(got[-1].end)
    assert q.has_room(max_bytes)
    assert q.size_bytes == 0 and len(seg_files(tmp_path / "q")) == 1
    put(q, range(100, 100 + appended))
    assert ids(read_all(q)) == list(range(100, 100 + appended))


# ---------------------------------------------------------------------------------------------
# one append is one request's share: whole in one segment, or not at all


def test_an_append_lands_whole_in_one_segment(opener: Opener, tmp_path: Path) -> None:
    q, _ = opener()  # segments of 3 records
    put(q, [0, 1])
    records = [record(i) for i in (2, 3, 4)]
    q.reserve(3 * REC)
    q.append(records, [3, 4, 5], reserved=3 * REC)  # would pass the segment: a new one first
    sizes = [p.stat().st_size for p in seg_files(tmp_path / "q")]
    assert sizes == [2 * REC, 3 * REC]
    assert ids(read_all(q)) == [0, 1, 2, 3, 4]


def test_a_failed_write_leaves_nothing_and_the_next_append_works(
    opener: Opener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    q, _ = opener()
    put(q, [0])
    real_write = os.write

    def half_then_fail(fd: int, data: bytes | memoryview) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_fail)
    q.reserve(2 * REC)
    with pytest.raises(OSError):
        q.append([record(1), record(2)], [2, 3], reserved=2 * REC)
    monkeypatch.undo()
    assert sum(p.stat().st_size for p in seg_files(tmp_path / "q")) == REC
    put(q, [3])
    assert ids(read_all(q)) == [0, 3]
    q, recovery = opener()  # nothing torn either
    assert recovery.torn_records == 0 and ids(read_all(q)) == [0, 3]


def test_cancel_takes_back_an_unread_last_append(opener: Opener) -> None:
    q, _ = opener()
    put(q, [0])
    data = [record(1), record(2)]
    q.reserve(2 * REC)
    ticket = q.append(data, [2, 3], reserved=2 * REC)
    assert ticket is not None
    assert q.cancel(ticket, data)
    assert ids(read_all(q)) == [0]
    later = put(q, [3])
    assert ids(read_all(q)) == [3]
    assert not q.cancel(later, [record(3)])  # read (maybe sent): it stays
    put(q, [4])
    assert not q.cancel(later, [record(3)])  # no longer the last append


def test_sync_failure_is_not_counted_as_synced_and_is_retried(
    opener: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    q, _ = opener()
    ticket = put(q, [0])
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError):
        q.sync()
    assert q.synced < ticket and q.dirty
    monkeypatch.setattr(os, "fsync", real_fsync)
    q.sync()
    assert q.synced == ticket and not q.dirty


# ---------------------------------------------------------------------------------------------
# drop_oldest

DROP_CASES = [
    # id, records read before the drop, room asked for, Dropped (segments, records), next read
    ("nothing_to_drop", 0, 2 * REC, (0, 0), 0),
    ("one_segment_unread", 0, 2 * REC + 1, (1, 3), 3),
    ("one_segment_partly_read", 2, 2 * REC + 1, (1, 1), 3),
    ("one_segment_all_read", 3, 3 * REC, (1, 0), 3),
    ("two_segments", 0, 5 * REC + 1, (2, 6), 6),
    ("all_but_the_last", 4, 8 * REC + 1, (3, 5), 9),
    ("everything", 0, 12 * REC, (4, 10), None),
]


@pytest.mark.parametrize(
    ("read", "room", "dropped", "next_id"),
    [c[1:] for c in DROP_CASES],
    ids=[c[0] for c in DROP_CASES],
)
def test_drop_oldest(
    opener: Opener,
    tmp_path: Path,
    read: int,
    room: int,
    dropped: tuple[int, int],
    next_id: int | None,
) -> None:
    q, _ = opener(max_bytes=12 * REC)
    put(q, range(10))  # segments of records 0-2, 3-5, 6-8, 9
    got = [read_blocking(q, 1)[0] for _ in range(read)]
    assert ids(got) == list(range(read))
    segments, records = dropped
    lost = [i for i in range(min(10, 3 * segments)) if i >= read]
    assert len(lost) == records
    result = q.drop_oldest(room)
    assert result == Dropped(
        segments=segments,
        records=records,
        samples=sum(i + 1 for i in lost),
        nbytes=records * REC,
        last_segment=segments - 1,
    )
    assert q.size_bytes + room <= 12 * REC
    assert len(seg_files(tmp_path / "q")) == max(1, 4 - segments)
    rest = read_all(q)
    assert ids(rest) == ([] if next_id is None else list(range(next_id, 10)))
    # Records read before the drop are committed later: positions in a dropped segment.
    if got:
        q.commit(got[-1].end)
    q, recovery = opener(max_bytes=12 * REC)
    assert recovery.torn_records == 0
    assert ids(read_all(q)) == ids(rest)


# ---------------------------------------------------------------------------------------------
# sync beside appends that roll segments


def test_sync_during_concurrent_rolls_never_raises(opener: Opener, tmp_path: Path) -> None:
    q, _ = opener(segment_bytes=REC)  # every append starts a new segment
    errors: list[BaseException] = []
    stop = threading.Event()

    def syncing() -> None:
        try:
            while not stop.is_set():
                q.sync()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=syncing) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(200):
            put(q, [i])
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert errors == []
    q.sync()
    assert q.synced == q.appended == 200 and not q.dirty
    assert len(seg_files(tmp_path / "q")) == 200
    assert ids(read_all(q)) == list(range(200))


def test_after_a_failed_write_what_is_done_is_freed_first(
    opener: Opener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: a write fails; once everything queued is sent and committed, the next
    append removes the done segment before writing (not 503 for ever)."""
    q, _ = opener()
    put(q, range(2))
    q.commit(read_all(q)[-1].end)
    monkeypatch.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(28, "full")))
    q.reserve(REC)
    with pytest.raises(OSError):
        q.append([record(2)], [3], reserved=REC)
    monkeypatch.undo()
    assert q.has_room(REC)
    assert q.size_bytes == 0  # the done records are gone from the disk
    put(q, [3])
    assert ids(read_all(q)) == [3] and len(seg_files(tmp_path / "q")) == 1
