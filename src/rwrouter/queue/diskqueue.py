"""A destination's durable queue: append-only segment files of queue records
(:mod:`rwrouter.queue.records`) and the position before which everything is done.

Files (:mod:`rwrouter.queue.segments`): segment files of records (a new one starts when the
current one would pass ``segment_bytes``), a ``lock`` (two processes never share a queue), and
a ``position`` file: the committed position (every record before it was delivered, refused
for good, or dropped) and the read mark (every record after it was never read for sending),
written in place on every commit and read (fsynced by :meth:`DiskQueue.sync`: a lost update
only means sending some records twice).

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
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rwrouter.errors import InvariantError, QueueInUseError
from rwrouter.queue.records import HEADER, record_samples
from rwrouter.queue.segments import (
    POSITION,
    SUFFIX,
    Cursor,
    Position,
    QueuedRecord,
    Segment,
    fsync_dir,
    recover_segments,
    segment_path,
    take_lock,
    write_all,
    write_position,
)

log = logging.getLogger("rwrouter.queue")

__all__ = [
    "POSITION",
    "SUFFIX",
    "DiskQueue",
    "Dropped",
    "Position",
    "QueueInUseError",
    "QueuedRecord",
    "Recovery",
    "segment_bytes_for",
]

MIN_SEGMENT_BYTES = 16 * 1024
MAX_SEGMENT_BYTES = 64 * 1024 * 1024


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


def segment_bytes_for(max_bytes: int) -> int:
    """Segment size for a queue bounded by ``max_bytes``: a sixteenth of it, within 16 KiB ..
    64 MiB (so ``drop_oldest`` drops at most about 1/16 of the queue at a time)."""
    return max(MIN_SEGMENT_BYTES, min(MAX_SEGMENT_BYTES, max_bytes // 16))


class DiskQueue:
    """The durable queue of one destination in ``directory`` (see the module docstring).

    ``max_bytes`` bounds the segment files' total size (:meth:`has_room`); ``segment_bytes``
    (default :func:`segment_bytes_for`) is where a new segment starts.
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, max_bytes: int, segment_bytes: int = 0
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or segment_bytes_for(max_bytes)
        self._lock = threading.Lock()
        self._segments: list[Segment] = []
        self._fd: int | None = None  # the last segment, opened for appending
        self._position = Position(0, 0)
        self._position_fd: int | None = None
        self._cursor = Cursor()
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
        self._lock_fd = take_lock(self.directory)
        self._segments, position, read_mark, reset, tail = recover_segments(self.directory)
        self._roll_next = tail.kept_corrupt  # new records go after the damage, not among it
        end = Position(self._segments[-1].seq, self._segments[-1].size)
        resend_until = end if read_mark is None else max(position, min(read_mark, end))
        self._position = position
        self._cursor = Cursor(position.segment, position.offset)
        self._read_end = resend_until  # what may have been read: kept until read again
        self._fd = os.open(self._segments[-1].path, os.O_WRONLY | os.O_APPEND)
        self._position_fd = os.open(self.directory / "position", os.O_RDWR | os.O_CREAT, 0o644)
        self._write_position()
        return Recovery(
            segments=len(self._segments),
            unsent_records=self.unread_records,
            unsent_bytes=sum(s.size for s in self._segments) - position.offset,
            torn_records=1 if tail.cut else 0,
            torn_bytes=tail.cut,
            torn_samples=tail.cut_samples,
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

    def _path(self, seq: int) -> Path:
        return segment_path(self.directory, seq)

    def _write_position(self) -> None:
        """Store the committed position and the read mark (under the lock)."""
        if self._position_fd is None:
            raise InvariantError("the position is written only while the queue is open")
        write_position(self._position_fd, self._position, max(self._position, self._read_end))

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

    def append(
        self,
        records: Sequence[bytes],
        samples: Sequence[int],
        *,
        reserved: int,
        blocking: bool = True,
    ) -> int | None:
        """Append complete records (with their sample counts) in order, in one write to one
        segment (a new one starts first when they would pass ``segment_bytes``); returns the
        append's ticket for :meth:`sync`. The data is in the OS page cache when this returns:
        it survives a crash of the process, and a power loss once synced. Raises OSError: then
        nothing of these records stays (the segment is cut back). With ``blocking`` false,
        returns None at once (nothing done) when the queue is busy (e.g. a read under way):
        the event loop may then append itself, else hand the append to a thread."""
        if not self._lock.acquire(blocking=blocking):
            return None
        with contextlib.ExitStack() as held:
            held.callback(self._lock.release)  # first: nothing below may leave the lock held
            self._reserved -= reserved  # released whatever happens next
            data = b"".join(records)
            if self._roll_next:
                self._reclaim()  # after a failed write (disk full?): drop what is done first
            seg = self._segments[-1]
            if (
                self._fd is None
                or self._roll_next
                or (seg.size and seg.size + len(data) > self.segment_bytes)
            ):
                seg = self._roll()
            if self._fd is None:
                raise InvariantError("a segment just rolled has no open file")
            try:
                write_all(self._fd, data)
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

    def _roll(self) -> Segment:
        """Start a new segment. Nothing here waits for the disk: the old segment is fsynced
        (and closed) by the next :meth:`sync`, with the directory. Raises OSError with
        nothing changed."""
        last = self._segments[-1]
        seg = Segment(last.seq + 1, self._path(last.seq + 1))
        fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        if self._fd is not None:
            self._retired[last.seq] = self._fd
        self._fd = fd
        self._segments.append(seg)
        self._dir_dirty = self._dirty = True
        self._roll_next = False
        return seg

    def _forget(self, seg: Segment) -> None:
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
                fsync_dir(self.directory)
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

    def read(
        self, max_bytes: int, max_samples: int | None = None, *, blocking: bool = True
    ) -> list[QueuedRecord] | None:
        """The next records in order, while they stay within ``max_bytes`` record bytes and
        ``max_samples`` samples (at least one record when any is unread). A corrupt record
        comes back marked ``corrupt`` (counted in :attr:`corrupt_records`): only itself when its
        length is sound, else the rest of its segment. With ``blocking`` false, None at once
        (nothing read) when the queue is busy."""
        out: list[QueuedRecord] = []
        total = count = 0
        if not self._lock.acquire(blocking=blocking):
            return None
        with contextlib.ExitStack() as held:
            held.callback(self._lock.release)
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

    def _segment_of_cursor(self) -> Segment | None:
        cur = self._cursor
        for seg in self._segments:
            if seg.seq >= cur.seq:
                if seg.seq > cur.seq:
                    cur.seq, cur.offset = seg.seq, 0
                return seg
        return None

    def _read_one(self, seg: Segment) -> QueuedRecord:
        record = self._cursor.read_one(seg, queue=self.directory)
        self._read_end = max(self._read_end, record.end)
        if record.corrupt and record.end.offset == seg.size and seg is self._segments[-1]:
            self._roll()  # new appends go to a fresh segment the reader can trust
        return record

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
