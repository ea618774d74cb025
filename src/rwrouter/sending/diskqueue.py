"""A destination's durable queue: append-only segment files of queue records
(:mod:`rwrouter.sending.records`) and the position before which everything is done.

Files in the queue directory:

- ``<sequence, 20 digits>.seg``: records back to back; a new segment starts when the current
  one would pass ``segment_bytes``.
- ``lock``: held (``flock``) by the process using the queue: two processes never share one.
- ``position``: ``u64 segment, u64 offset`` of the committed position (every record before it
  was delivered, refused for good, or dropped), ``u64 segment, u64 offset`` of the read mark
  (every record after it was never read for sending), ``u32 crc32`` (little-endian). Written in
  place on every commit and read (no fsync: a lost update only means sending some records
  twice).

After a crash, the records between the committed position and the read mark may have been
delivered already: :attr:`Recovery.resend_until` tells the sender, which keeps them apart from
newer data (a destination refuses a whole request whose samples it already has as "out of
order").

On :meth:`DiskQueue.open`, segments wholly before the position are removed, the last segment
is cut after its last intact record (a write cut short by a crash or power loss), and reading
starts at the position: unsent records go out first. A record failing its checksum is skipped
alone while reading (counted, handed back marked ``corrupt``); a length that makes no sense
skips the rest of its segment (the next record cannot be found).

All methods are blocking and thread-safe (one lock): callers on an event loop run
:meth:`append`, :meth:`read` and :meth:`sync` in a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import struct
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rwrouter.sending.records import (
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
MIN_SEGMENT_BYTES = 16 * 1024
MAX_SEGMENT_BYTES = 64 * 1024 * 1024


class QueueInUseError(OSError):
    """Another process holds this queue directory's lock."""


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A place in the queue: segment sequence number and byte offset in it."""

    segment: int
    offset: int


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


@dataclass(frozen=True, slots=True)
class Recovery:
    """What :meth:`DiskQueue.open` found: unsent records and bytes, and the torn tail it cut
    (``torn_records`` is 0 or 1; ``torn_samples`` is None when the cut header was unreadable)."""

    segments: int
    unsent_records: int
    unsent_bytes: int
    torn_records: int
    torn_bytes: int
    torn_samples: int | None
    position_reset: bool
    resend_until: Position  # records ending at or before this may have been sent already


@dataclass(frozen=True, slots=True)
class Dropped:
    """What :meth:`DiskQueue.drop_oldest` removed: segments, and the unread records, samples and
    bytes in them (records already read for sending are not lost: they are in memory)."""

    segments: int = 0
    records: int = 0
    samples: int = 0
    nbytes: int = 0
    last_segment: int = -1  # the newest segment removed (-1: none); records read from it or
    # before it and not yet done are the caller's to drop from memory


@dataclass(slots=True)
class _Segment:
    seq: int
    path: Path
    size: int = 0
    records: int = 0
    samples: int = 0
    read_records: int = 0
    read_samples: int = 0
    read_bytes: int = 0


@dataclass(slots=True)
class _Cursor:
    seq: int = 0
    offset: int = 0
    fd: int | None = None
    fd_seq: int = -1
    corrupt: int = 0  # records found corrupt while reading
    corrupt_samples: int = 0  # samples in the records skipped after them (as far as known)
    reasons: list[str] = field(default_factory=list)


def segment_bytes_for(max_bytes: int) -> int:
    """Segment size for a queue bounded by ``max_bytes``: a sixteenth of it, within 16 KiB ..
    64 MiB (so ``drop_oldest`` drops at most about 1/16 of the queue at a time)."""
    return max(MIN_SEGMENT_BYTES, min(MAX_SEGMENT_BYTES, max_bytes // 16))


class DiskQueue:
    """The durable queue of one destination in ``directory`` (see the module docstring).

    ``max_bytes`` bounds the segment files' total size (:meth:`has_room`); ``sync_on_roll``
    fsyncs a segment (and the directory) when a new one starts.
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, max_bytes: int, segment_bytes: int = 0
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or segment_bytes_for(max_bytes)
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._fd: int | None = None  # the last segment, opened for appending
        self._position = Position(0, 0)
        self._position_fd: int | None = None
        self._cursor = _Cursor()
        self._reserved = 0
        self.appended = 0  # appends so far (tickets for group commit)
        self.synced = 0  # appends known to be on disk
        self._dirty = False
        self._read_end = Position(0, 0)  # end of the last record read
        self._lock_fd: int | None = None
        self._retired: dict[int, int] = {}  # segment seq -> fd of a rolled segment, to fsync
        self._dir_dirty = False  # a segment was created since the last sync
        self._roll_next = False  # after a failed fsync, new data goes to a fresh segment

    # -- opening and closing -------------------------------------------------------------

    def open(self) -> Recovery:
        """Create or recover the queue (see the module docstring). Raises OSError, and
        QueueInUseError when another process holds the queue."""
        with self._lock:
            try:
                return self._open()
            except BaseException:
                self._close_files()
                self._segments.clear()
                raise

    def _open(self) -> Recovery:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        seqs = sorted(
            int(p.name[: -len(SUFFIX)])
            for p in self.directory.iterdir()
            if p.name.endswith(SUFFIX) and p.name[: -len(SUFFIX)].isdigit()
        )
        position, read_mark, reset = self._load_position()
        for seq in seqs:
            path = self._path(seq)
            if seq < position.segment:
                path.unlink()
            else:
                self._segments.append(_Segment(seq, path, path.stat().st_size))
        if not self._segments:
            first = max(position.segment, seqs[-1] + 1 if seqs else 0)
            self._segments.append(_Segment(first, self._path(first)))
            self._segments[0].path.touch()
            for directory in (self.directory, self.directory.parent):
                _fsync_dir(directory)  # a new queue's entries survive a power loss
        head = self._segments[0]
        if position.segment != head.seq:
            position = Position(head.seq, 0)
        torn_bytes, torn_samples = self._check_tail(self._segments[-1])
        for seg in self._segments:
            self._count(seg, read_until=position.offset if seg.seq == position.segment else 0)
        position = Position(head.seq, min(position.offset, head.size))
        tail = Position(self._segments[-1].seq, self._segments[-1].size)
        resend_until = tail if read_mark is None else max(position, min(read_mark, tail))
        self._position = position
        self._cursor = _Cursor(position.segment, position.offset)
        self._read_end = resend_until  # what may have been read: kept until read again
        self._fd = os.open(self._segments[-1].path, os.O_WRONLY | os.O_APPEND)
        self._position_fd = os.open(self.directory / "position", os.O_RDWR | os.O_CREAT, 0o644)
        self._write_position()
        return Recovery(
            segments=len(self._segments),
            unsent_records=self.unread_records,
            unsent_bytes=sum(s.size for s in self._segments) - position.offset,
            torn_records=1 if torn_bytes else 0,
            torn_bytes=torn_bytes,
            torn_samples=torn_samples,
            position_reset=reset,
            resend_until=resend_until,
        )

    def close(self) -> None:
        """Write the position, fsync and close every file (all of them, even after an error;
        the first error is raised)."""
        with self._lock:
            self._close_files(sync=True)

    def _close_files(self, *, sync: bool = False) -> None:
        error: OSError | None = None
        fds = [self._fd, self._position_fd, *self._retired.values()]
        for fd in fds:
            if fd is None:
                continue
            try:
                if sync:
                    os.fsync(fd)
            except OSError as exc:
                error = error or exc
            finally:
                os.close(fd)
        for fd in (self._cursor.fd, self._lock_fd):  # closing the lock file releases the flock
            if fd is not None:
                os.close(fd)
        self._fd = self._position_fd = self._cursor.fd = self._lock_fd = None
        self._cursor.fd_seq = -1
        self._retired.clear()
        if error is not None:
            raise error

    def _take_lock(self) -> None:
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise QueueInUseError(
                f"queue directory {self.directory} is in use by another process "
                "(each rwrouter process needs its own storage.path)"
            ) from None
        self._lock_fd = fd

    def _path(self, seq: int) -> Path:
        return self.directory / f"{seq:020d}{SUFFIX}"

    def _load_position(self) -> tuple[Position, Position | None, bool]:
        """The stored committed position and read mark; the start, None (everything may have
        been sent) and True when the file is corrupt; the start, None and False when it is
        missing (a new queue, or files from elsewhere: sent again, carefully)."""
        try:
            data = (self.directory / "position").read_bytes()
        except FileNotFoundError:
            return Position(0, 0), None, False
        if len(data) >= POSITION.size:
            seq, offset, read_seq, read_offset, crc = POSITION.unpack_from(data)
            if zlib.crc32(data[: POSITION.size - 4]) == crc:
                return Position(seq, offset), Position(read_seq, read_offset), False
        log.warning("queue=%s msg=%s", self.directory,
                    '"position file corrupt: sending the whole queue again"')  # fmt: skip
        return Position(0, 0), None, True

    def _write_position(self) -> None:
        """Store the committed position and the read mark (under the lock)."""
        assert self._position_fd is not None
        committed, read = self._position, max(self._position, self._read_end)
        data = struct.pack("<QQQQ", committed.segment, committed.offset, read.segment, read.offset)
        os.pwrite(self._position_fd, data + struct.pack("<I", zlib.crc32(data)), 0)

    def _check_tail(self, seg: _Segment) -> tuple[int, int | None]:
        """Cut the last segment after its last intact record: what follows is a write the
        process or the machine did not finish. Returns the bytes cut and the samples of the
        first cut record when its header is a real one. Records failing their checksum
        *before* an intact one are kept for the reader, which skips and counts each (new
        records then go to a new segment): intact records are never cut."""
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
        samples = None
        first_cut = data[good_end + HEADER.size : good_end + HEADER.size + META_SIZE]
        if len(first_cut) == META_SIZE and first_cut[:2] == bytes((VERSION, KIND_SAMPLES)):
            samples = record_samples(first_cut)[1]
        cut = len(data) - good_end
        if cut:
            os.truncate(seg.path, good_end)
            seg.size = good_end
        if kept_bad:
            self._roll_next = True
        return cut, samples

    def _count(self, seg: _Segment, *, read_until: int) -> None:
        """Count a segment's records and samples from their headers (read before
        ``read_until``)."""
        offset = 0
        with open(seg.path, "rb") as f:
            while offset + HEADER.size + META_SIZE <= seg.size:
                f.seek(offset)
                head = f.read(HEADER.size + META_SIZE)
                length = HEADER.unpack_from(head)[0]
                end = offset + HEADER.size + length
                if length > MAX_RECORD_BYTES or end > seg.size:
                    break  # corrupt: reading will find it and skip the rest
                samples = record_samples(head[HEADER.size :])[1]
                seg.records += 1
                seg.samples += samples
                if end <= read_until:
                    seg.read_records += 1
                    seg.read_samples += samples
                    seg.read_bytes = end
                offset = end

    # -- writing -------------------------------------------------------------------------

    def has_room(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more fit under ``max_bytes`` (reservations included). A segment
        whose records are all done is removed first, even the one being written."""
        with self._lock:
            if self._roll_next or self.size_bytes + self._reserved + nbytes > self.max_bytes:
                self._reclaim()  # also after a failed write: free the disk of what is done
            return self.size_bytes + self._reserved + nbytes <= self.max_bytes

    def _reclaim(self) -> None:
        """Remove every segment when all was read and all read is done (a new one starts): the
        one being written, and one whose corrupt rest was skipped (the position never reaches
        its end)."""
        if self.size_bytes and not self.unread_bytes and self._position >= self._read_end:
            done = list(self._segments)
            self._roll()
            del self._segments[:-1]
            for seg in done:
                self._forget(seg)

    def reserve(self, nbytes: int) -> None:
        """Hold ``nbytes`` of room for an :meth:`append` to come (call it with ``reserved``)."""
        with self._lock:
            self._reserved += nbytes

    def release(self, nbytes: int) -> None:
        """Give back a reservation that will not be appended."""
        with self._lock:
            self._reserved -= nbytes

    def append(self, records: Sequence[bytes], samples: Sequence[int], *, reserved: int) -> int:
        """Append complete records (with their sample counts) in order, in one write to one
        segment (a new one starts first when they would pass ``segment_bytes``); returns the
        append's ticket for :meth:`sync`. The data is in the OS page cache when this returns:
        it survives a crash of the process, and a power loss once synced. Raises OSError: then
        nothing of these records stays (the segment is cut back)."""
        data = b"".join(records)
        with self._lock:
            self._reserved -= reserved
            if self._roll_next:
                self._reclaim()  # after a failed write (disk full?): drop what is done first
            seg = self._segments[-1]
            if self._fd is None or self._roll_next or (
                seg.size and seg.size + len(data) > self.segment_bytes
            ):
                seg = self._roll()
            assert self._fd is not None
            try:
                _write_all(self._fd, data)
            except OSError:
                with contextlib.suppress(OSError):
                    os.truncate(seg.path, seg.size)
                self._roll_next = True  # whatever happened to this file, go on in a new one
                raise
            seg.size += len(data)
            seg.records += len(records)
            seg.samples += sum(samples)
            self.appended += 1
            self._dirty = True
            return self.appended

    def cancel(self, ticket: int, records: Sequence[bytes]) -> bool:
        """Take back the records of append ``ticket`` (another destination's append of the
        same request failed: the request is refused) when they are still the last thing
        written and unread; True if done. Otherwise they stay (sent twice at worst)."""
        size = sum(map(len, records))
        with self._lock:
            seg = self._segments[-1]
            if ticket != self.appended or seg.size - size < seg.read_bytes or seg.size < size:
                return False
            with contextlib.suppress(OSError):
                os.truncate(seg.path, seg.size - size)
                seg.size -= size
                seg.records -= len(records)
                seg.samples -= sum(record_samples(r[HEADER.size :])[1] for r in records)
                return True
            return False

    def _roll(self) -> _Segment:
        """Start a new segment. Nothing here waits for the disk: the old segment is fsynced
        (and closed) by the next :meth:`sync`, with the directory. Raises OSError with
        nothing changed."""
        last = self._segments[-1]
        seg = _Segment(last.seq + 1, self._path(last.seq + 1))
        fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        if self._fd is not None:
            self._retired[last.seq] = self._fd
        self._fd = fd
        self._segments.append(seg)
        self._dir_dirty = self._dirty = True
        self._roll_next = False
        return seg

    def _forget(self, seg: _Segment) -> None:
        """A segment is removed: delete its file, close what still has it open."""
        seg.path.unlink(missing_ok=True)
        retired = self._retired.pop(seg.seq, None)
        if retired is not None:
            os.close(retired)
        if self._cursor.fd_seq == seg.seq and self._cursor.fd is not None:
            os.close(self._cursor.fd)
            self._cursor.fd, self._cursor.fd_seq = None, -1

    def sync(self) -> None:
        """fsync what was appended so far (appends up to the ticket read before it): rolled
        segments, the segment being written, the directory and the position file. Raises
        OSError (then nothing counts as synced, and new data goes to a fresh segment)."""
        with self._lock:
            ticket, dirty, dir_dirty = self.appended, self._dirty, self._dir_dirty
            self._dirty = self._dir_dirty = False
            retired, self._retired = self._retired, {}
            fds = [os.dup(fd) for fd in (self._fd, self._position_fd) if dirty and fd is not None]
        try:  # duplicates: a roll or close may close the originals meanwhile
            for fd in (*retired.values(), *fds):
                os.fsync(fd)
            if dir_dirty:
                _fsync_dir(self.directory)
        except OSError:
            with self._lock:
                self._dirty, self._dir_dirty, self._roll_next = True, True, True
                self._retired = {**retired, **self._retired}
            raise
        finally:
            for fd in fds:
                os.close(fd)
        for fd in retired.values():
            os.close(fd)
        self.synced = max(self.synced, ticket)

    @property
    def dirty(self) -> bool:
        """Whether something was appended since the last :meth:`sync`."""
        return self._dirty

    # -- reading -------------------------------------------------------------------------

    def read(self, max_bytes: int, max_samples: int | None = None) -> list[QueuedRecord]:
        """The next records in order, while they stay within ``max_bytes`` record bytes and
        ``max_samples`` samples (at least one record when any is unread). A corrupt record
        comes back marked ``corrupt`` (counted in :attr:`corrupt_records`): only itself when its
        length is sound, else the rest of its segment."""
        out: list[QueuedRecord] = []
        total = count = 0
        with self._lock:
            cur = self._cursor
            while total < max_bytes and (max_samples is None or count < max_samples):
                seg = self._segment_of_cursor()
                if seg is None:
                    break
                if cur.offset >= seg.size:
                    if seg is self._segments[-1]:
                        break
                    cur.seq, cur.offset = seg.seq + 1, 0
                    continue
                record = self._read_one(seg)
                out.append(record)
                if not record.corrupt:
                    total += len(record.rest)
                    count += record.samples
            if out:  # the read mark is on disk before anything read can be sent
                self._write_position()
        return out

    def _segment_of_cursor(self) -> _Segment | None:
        cur = self._cursor
        for seg in self._segments:
            if seg.seq >= cur.seq:
                if seg.seq > cur.seq:
                    cur.seq, cur.offset = seg.seq, 0
                return seg
        return None

    def _read_one(self, seg: _Segment) -> QueuedRecord:
        cur = self._cursor
        if cur.fd_seq != seg.seq:
            if cur.fd is not None:
                os.close(cur.fd)
            cur.fd, cur.fd_seq = os.open(seg.path, os.O_RDONLY), seg.seq
        assert cur.fd is not None
        header = os.pread(cur.fd, HEADER.size, cur.offset)
        length = HEADER.unpack(header)[0] if len(header) == HEADER.size else -1
        end = cur.offset + HEADER.size + length
        if length < 0 or length > MAX_RECORD_BYTES or end > seg.size:
            return self._skip_corrupt(seg)  # no next record to find: the rest of the segment
        rest = os.pread(cur.fd, length, cur.offset + HEADER.size)
        intact = check_record(header, rest)
        real = len(rest) >= META_SIZE and rest[:2] == bytes((VERSION, KIND_SAMPLES))
        samples = record_samples(rest)[1] if real else 0
        seg.read_records += 1
        seg.read_samples += samples
        seg.read_bytes = end
        cur.offset = end
        self._read_end = max(self._read_end, Position(seg.seq, end))
        if not intact:  # its length is sound: skip just this record
            cur.corrupt += 1
            cur.corrupt_samples += samples
            log.error("queue=%s segment=%d offset=%d samples=%d msg=%s", self.directory,
                      seg.seq, end - length - HEADER.size, samples,
                      '"corrupt record (checksum): skipped"')  # fmt: skip
            return QueuedRecord(b"", Position(seg.seq, end), samples, corrupt=True)
        return QueuedRecord(rest, Position(seg.seq, end), samples)

    def _skip_corrupt(self, seg: _Segment) -> QueuedRecord:
        cur = self._cursor
        cur.corrupt += 1
        skipped = max(0, seg.samples - seg.read_samples)  # from the headers counted at open
        cur.corrupt_samples += skipped
        log.error("queue=%s segment=%d offset=%d records=%d samples=%d msg=%s", self.directory,
                  seg.seq, cur.offset, seg.records - seg.read_records, skipped,
                  '"corrupt record: skipping the rest of the segment"')  # fmt: skip
        seg.read_records, seg.read_samples, seg.read_bytes = seg.records, seg.samples, seg.size
        cur.offset = seg.size
        self._read_end = max(self._read_end, Position(seg.seq, seg.size))
        if seg is self._segments[-1]:
            self._roll()  # new appends go to a fresh segment the reader can trust
        return QueuedRecord(b"", Position(seg.seq, seg.size), skipped, corrupt=True)

    @property
    def corrupt_samples(self) -> int:
        """Samples skipped with corrupt records while reading (as far as their headers tell)."""
        return self._cursor.corrupt_samples

    @property
    def corrupt_records(self) -> int:
        """Records found corrupt while reading (not counting a torn tail cut at open)."""
        return self._cursor.corrupt

    # -- committing and dropping ---------------------------------------------------------

    def commit(self, position: Position) -> None:
        """Everything before ``position`` is done: store it, remove finished segments."""
        with self._lock:
            if position <= self._position:
                return
            self._position = position
            self._write_position()
            while len(self._segments) > 1:
                head = self._segments[0]
                if head.seq > position.segment or (
                    head.seq == position.segment and position.offset < head.size
                ):
                    break
                self._segments.pop(0)
                self._forget(head)

    def drop_oldest(self, nbytes: int) -> Dropped:
        """Remove the oldest segments until ``nbytes`` more fit (never the segment being
        written once it is the only one)."""
        segments = records = samples = dropped_bytes = 0
        last = -1
        with self._lock:
            self._reclaim()
            while self.size_bytes + self._reserved + nbytes > self.max_bytes:
                if len(self._segments) == 1:
                    if not self._segments[0].size:
                        break
                    self._roll()
                head = self._segments.pop(0)
                self._forget(head)
                segments += 1
                records += head.records - head.read_records
                samples += head.samples - head.read_samples
                dropped_bytes += head.size - head.read_bytes
                last = head.seq
        return Dropped(segments, records, samples, dropped_bytes, last)

    # -- sizes ---------------------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        """Bytes of all segment files (sent records of the oldest segment included)."""
        return sum(seg.size for seg in self._segments)

    @property
    def unread_records(self) -> int:
        """Records not yet read for sending."""
        return sum(seg.records - seg.read_records for seg in self._segments)

    @property
    def unread_samples(self) -> int:
        """Samples in records not yet read for sending."""
        return sum(seg.samples - seg.read_samples for seg in self._segments)

    @property
    def unread_bytes(self) -> int:
        """Bytes of records not yet read for sending."""
        return sum(seg.size - seg.read_bytes for seg in self._segments)

    @property
    def segments(self) -> int:
        return len(self._segments)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
