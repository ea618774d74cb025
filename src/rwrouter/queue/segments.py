"""The files of a destination's durable queue (:mod:`rwrouter.queue.diskqueue`): segment
files of queue records, the position file, the lock — how they are named, read, checked and
written. Blocking file I/O; no state beyond what the functions are given.

- ``<sequence, 20 digits>.seg``: records back to back (:mod:`rwrouter.queue.records`).
- ``position``: ``u64 segment, u64 offset`` of the committed position, ``u64 segment, u64
  offset`` of the read mark, ``u32 crc32`` of those 32 bytes (little-endian).
- ``lock``: ``flock``-ed by the process using the queue.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from rwrouter.errors import QueueInUseError
from rwrouter.logs import kv
from rwrouter.queue.records import (
    HEADER,
    KIND_SAMPLES,
    MAX_RECORD_BYTES,
    META_SIZE,
    VERSION,
    check_record,
    record_samples,
)

log = logging.getLogger("rwrouter.queue")

SUFFIX = ".seg"
POSITION = struct.Struct("<QQQQI")  # committed segment/offset, read segment/offset, crc32


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A place in the queue: segment sequence number and byte offset in it."""

    segment: int
    offset: int


@dataclass(slots=True)
class Segment:
    """One segment file: its size (bytes), its records and samples (counted from headers), and
    how many of them were read for sending (``read_bytes``: the end of the last one read)."""

    seq: int
    path: Path
    size: int = 0
    records: int = 0
    samples: int = 0
    read_records: int = 0
    read_samples: int = 0
    read_bytes: int = 0


@dataclass(frozen=True, slots=True)
class QueuedRecord:
    """A record read back: its body (after the 8-byte header), its end and its sample count.
    ``corrupt``: it failed its checksum (or, with ``rest`` empty, the rest of a segment whose
    records could not be found any more) and was skipped; ``samples`` is then what its header
    (or the count made at open) says, as far as known. The caller treats it as done."""

    rest: bytes
    end: Position
    samples: int
    corrupt: bool = False


@dataclass(slots=True)
class Cursor:
    """Where the reader is (segment, offset), its open file, and the corrupt records (and the
    samples in them, as far as known) it skipped."""

    seq: int = 0
    offset: int = 0
    fd: int | None = None
    fd_seq: int = -1
    corrupt: int = 0
    corrupt_samples: int = 0

    def read_one(self, seg: Segment, *, queue: Path) -> QueuedRecord:
        """Read the record at the cursor in ``seg`` (which holds at least a byte there) and
        move past it, counting it as read. A record failing its checksum comes back marked
        ``corrupt`` (skipped alone: its length is sound); a length that makes no sense skips
        the rest of the segment (one ``corrupt`` entry for it all)."""
        if self.fd is None or self.fd_seq != seg.seq:
            if self.fd is not None:
                os.close(self.fd)
            self.fd, self.fd_seq = os.open(seg.path, os.O_RDONLY), seg.seq
        fd = self.fd
        header = os.pread(fd, HEADER.size, self.offset)
        length = HEADER.unpack(header)[0] if len(header) == HEADER.size else -1
        end = self.offset + HEADER.size + length
        if length < 0 or length > MAX_RECORD_BYTES or end > seg.size:
            return self._skip_rest(seg, queue)
        rest = os.pread(fd, length, self.offset + HEADER.size)
        samples = record_samples(rest)[1] if is_record_meta(rest) else 0
        seg.read_records += 1
        seg.read_samples += samples
        seg.read_bytes = end
        self.offset = end
        if check_record(header, rest):
            return QueuedRecord(rest, Position(seg.seq, end), samples)
        self.corrupt += 1
        self.corrupt_samples += samples
        log.error(
            kv(
                queue=queue,
                segment=seg.seq,
                offset=end - length - HEADER.size,
                samples=samples,
                msg="corrupt record (checksum): skipped",
            )
        )
        return QueuedRecord(b"", Position(seg.seq, end), samples, corrupt=True)

    def _skip_rest(self, seg: Segment, queue: Path) -> QueuedRecord:
        self.corrupt += 1
        skipped = max(0, seg.samples - seg.read_samples)  # from the headers counted at open
        self.corrupt_samples += skipped
        log.error(
            kv(
                queue=queue,
                segment=seg.seq,
                offset=self.offset,
                records=seg.records - seg.read_records,
                samples=skipped,
                msg="corrupt record: skipping the rest of the segment",
            )
        )
        seg.read_records, seg.read_samples, seg.read_bytes = seg.records, seg.samples, seg.size
        self.offset = seg.size
        return QueuedRecord(b"", Position(seg.seq, seg.size), skipped, corrupt=True)


@dataclass(frozen=True, slots=True)
class Tail:
    """What :func:`check_tail` found: the bytes cut, the samples of the first cut record (None
    when its header is not a real one), and whether a corrupt record was kept before intact
    ones."""

    cut: int
    cut_samples: int | None
    kept_corrupt: bool


def segment_path(directory: Path, seq: int) -> Path:
    return directory / f"{seq:020d}{SUFFIX}"


def segment_numbers(directory: Path) -> list[int]:
    """The sequence numbers of the segment files in ``directory``, in order."""
    return sorted(
        int(p.name[: -len(SUFFIX)])
        for p in directory.iterdir()
        if p.name.endswith(SUFFIX) and p.name[: -len(SUFFIX)].isdigit()
    )


def take_lock(directory: Path) -> int:
    """``flock`` the queue's lock file; returns its fd (closing it releases the lock).
    Raises QueueInUseError when another process holds it."""
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise QueueInUseError(
            f"queue directory {directory} is in use by another process "
            "(each rwrouter process needs its own storage.path)"
        ) from None
    return fd


def load_position(directory: Path) -> tuple[Position, Position | None, bool]:
    """The stored committed position and read mark; the start, None (everything may have been
    sent) and True when the file is corrupt; the start, None and False when it is missing (a
    new queue, or files from elsewhere: sent again, carefully)."""
    try:
        data = (directory / "position").read_bytes()
    except FileNotFoundError:
        return Position(0, 0), None, False
    if len(data) >= POSITION.size:
        seq, offset, read_seq, read_offset, crc = POSITION.unpack_from(data)
        if zlib.crc32(data[: POSITION.size - 4]) == crc:
            return Position(seq, offset), Position(read_seq, read_offset), False
    log.warning(kv(queue=directory, msg="position file corrupt: sending the whole queue again"))
    return Position(0, 0), None, True


def write_position(fd: int, committed: Position, read: Position) -> None:
    """Store the committed position and the read mark in place (one ``pwrite``)."""
    data = struct.pack("<QQQQ", committed.segment, committed.offset, read.segment, read.offset)
    os.pwrite(fd, data + struct.pack("<I", zlib.crc32(data)), 0)


def check_tail(seg: Segment) -> Tail:
    """Cut a (last) segment after its last intact record: what follows is a write the process
    or the machine did not finish. Records failing their checksum *before* an intact one are
    kept, for the reader to skip and count: intact records are never cut."""
    offset = good_end = 0
    kept_bad = False
    with open(seg.path, "rb") as f:
        data = f.read()
    while offset + HEADER.size <= len(data):
        length = HEADER.unpack_from(data, offset)[0]
        end = offset + HEADER.size + length
        if length > MAX_RECORD_BYTES or end > len(data):
            break  # cut short, or a length that makes no sense: nothing more to find
        if check_record(data[offset : offset + HEADER.size], data[offset + HEADER.size : end]):
            kept_bad = kept_bad or good_end < offset
            good_end = end
        offset = end
    first_cut = data[good_end + HEADER.size : good_end + HEADER.size + META_SIZE]
    samples = record_samples(first_cut)[1] if is_record_meta(first_cut) else None
    cut = len(data) - good_end
    if cut:
        os.truncate(seg.path, good_end)
        seg.size = good_end
    return Tail(cut, samples, kept_bad)


def is_record_meta(rest: bytes) -> bool:
    """Whether ``rest`` starts with a real record's fixed part (version 1, kind samples)."""
    return len(rest) >= META_SIZE and rest[:2] == bytes((VERSION, KIND_SAMPLES))


def count_records(seg: Segment, *, read_until: int) -> None:
    """Count a segment's records and samples from their headers (those ending at or before
    ``read_until`` as read). Stops at a length that makes no sense (the reader skips the rest)."""
    offset = 0
    with open(seg.path, "rb") as f:
        while offset + HEADER.size + META_SIZE <= seg.size:
            f.seek(offset)
            head = f.read(HEADER.size + META_SIZE)
            length = HEADER.unpack_from(head)[0]
            end = offset + HEADER.size + length
            if length > MAX_RECORD_BYTES or end > seg.size:
                break
            samples = record_samples(head[HEADER.size :])[1]
            seg.records += 1
            seg.samples += samples
            if end <= read_until:
                seg.read_records += 1
                seg.read_samples += samples
                seg.read_bytes = end
            offset = end


def recover_segments(
    directory: Path,
) -> tuple[list[Segment], Position, Position | None, bool, Tail]:
    """Take stock of a queue directory at open: remove the segments wholly before the stored
    position, create the first one of a new queue, cut the torn tail of the last one, count
    every segment's records. Returns the segments, the committed position (moved to the first
    segment when its own is gone), the read mark, whether the position file was corrupt, and
    the tail check."""
    seqs = segment_numbers(directory)
    position, read_mark, reset = load_position(directory)
    segments: list[Segment] = []
    for seq in seqs:
        path = segment_path(directory, seq)
        if seq < position.segment:
            path.unlink()
        else:
            segments.append(Segment(seq, path, path.stat().st_size))
    if not segments:
        first = max(position.segment, seqs[-1] + 1 if seqs else 0)
        segments.append(Segment(first, segment_path(directory, first)))
        segments[0].path.touch()
        for parent in (directory, directory.parent):
            fsync_dir(parent)  # a new queue's entries survive a power loss
    head = segments[0]
    if position.segment != head.seq:
        position = Position(head.seq, 0)
    tail = check_tail(segments[-1])
    for seg in segments:
        count_records(seg, read_until=position.offset if seg.seq == position.segment else 0)
    return segments, Position(head.seq, min(position.offset, head.size)), read_mark, reset, tail


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(directory: Path) -> None:
    """fsync a directory (its entries survive a power loss)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
