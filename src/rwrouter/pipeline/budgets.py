"""One series budget for all the workers of ``rwrouter run --workers N``: the table of a
budgeted destination's active series shared by the workers through a memory-mapped file in
the supervisor's private runtime directory (as the HA election table,
:mod:`rwrouter.pipeline.ha`). The policy is pure (:mod:`rwrouter.routing.budget`); this is its
shared storage (:class:`~rwrouter.routing.budget.SeriesStore`). A single process has none: its
budget is in its own memory, without a lock of this kind.

The file ``<runtime_dir>/budget-<digest>`` (the digest of the destination name, its
``series_window`` and the table's size, so that a reload that changes either opens another
table) holds a header and :attr:`SharedSeries.capacity` slots (a power of two, at least twice
:attr:`SharedSeries.max_keys` = ``series_limit`` + a quarter + 1,024: the slack for series
left the window that are not yet swept). A slot (:data:`SLOT`, 16 bytes) is a series key (u64,
0: free; the budget's: CRC-32 of the metric name << 32 | the shard hash of the output labels)
and its last-seen time (f64, ``time.monotonic()`` seconds: CLOCK_MONOTONIC, one clock for every
process of the host). Keys are found by linear probing from a multiplicative hash.

The count of active keys is exact without a sweep: the header keeps a ring of
``GENERATIONS`` + 1 (9) counters, one per time bucket of ``series_window / 8`` (the bucket
number and the keys last seen in it); a key seen again moves from its bucket's counter to the
current one, and a bucket older than the ring is forgotten as a whole. A key is active while
its bucket is one of the newest 9: up to ``series_window / 8`` longer than the window, as the
audit counts (:mod:`rwrouter.audit.active`). When the keys in the table (active or not) reach
:attr:`~SharedSeries.max_keys`, the table is rebuilt with its active keys only (a pass over
the table under the lock: rare, at most once per quarter of ``series_limit`` new series).

Every call is a read-modify-write under a ``threading.Lock`` (decode threads) and an exclusive
``flock`` on the file (the other workers). Memory: 16 bytes a slot, 2 to 4 slots per series of
the limit, mapped once, shared by the workers (about 64 MB for ``series_limit`` 1,000,000).
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import mmap
import os
import struct
import threading
from collections.abc import Iterable

from rwrouter.audit.active import GENERATIONS
from rwrouter.config import DestinationConfig

__all__ = ["SLOT", "BudgetTables", "SharedSeries", "budget_path", "table_bytes"]

SLOT = struct.Struct("<Qd")  # key (0: free), last seen (monotonic seconds)
_RING = GENERATIONS + 1  # buckets counted: a key seen up to window / 8 before it still counts
_HEADER = struct.Struct(f"<8sQdQ{2 * _RING}q")  # magic, capacity, span, keys, ring
_MAGIC = b"rwbudg01"
_HEADER_BYTES = 4096
_MIX = 0x9E3779B97F4A7C15  # Fibonacci hashing
_MASK64 = (1 << 64) - 1
_SLACK = 1024


def table_size(limit: int) -> tuple[int, int]:
    """(max keys, capacity in slots) of the table of a budget of ``limit`` series."""
    max_keys = limit + limit // 4 + _SLACK
    return max_keys, 1 << (2 * max_keys - 1).bit_length()


def table_bytes(limit: int) -> int:
    """Bytes of the file of a budget of ``limit`` series: a 4,096-byte header and 16 bytes a
    slot (67,112,960 for 1,000,000 series: 4,194,304 slots). The Helm chart counts it on the
    queue volume (deploy/helm's ``rwrouter.bounds``)."""
    return _HEADER_BYTES + table_size(limit)[1] * SLOT.size


def budget_path(runtime_dir: str, *, destination: str, window: float, limit: int) -> str:
    """The shared table's file of ``destination``'s budget (``window`` seconds, ``limit``
    series) in the supervisor's private runtime directory: one per name, window and size."""
    _, capacity = table_size(limit)
    text = f"{destination}\0{window!r}\0{capacity}".encode()
    return os.path.join(runtime_dir, f"budget-{hashlib.blake2b(text, digest_size=8).hexdigest()}")


class SharedSeries:
    """A budget's active series in the file ``path``, shared by the processes that map it
    (created with mode 0600 and sized by the first one); ``window``: seconds a series stays
    active; ``limit``: the budget's ``series_limit`` (sizes the table: :func:`table_size`).
    Raises ValueError for a ``window`` or ``limit`` that is not positive, OSError when the file
    cannot be opened or sized, or holds another table."""

    def __init__(self, path: str, *, window: float, limit: int) -> None:
        if window <= 0 or limit < 1:
            raise ValueError("series_window and series_limit must be positive")
        self.span = window / GENERATIONS
        self.max_keys, self.capacity = table_size(limit)
        self._shift = 64 - (self.capacity.bit_length() - 1)
        size = table_bytes(limit)
        self._lock = threading.Lock()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size == 0:  # the first process sizes it (zero: all free)
                    os.ftruncate(fd, size)
                    header = [_MAGIC, self.capacity, self.span, 0] + [-1, 0] * _RING
                    os.pwrite(fd, _HEADER.pack(*header), 0)
                elif os.fstat(fd).st_size != size:
                    raise OSError(f"{path}: a series table of another size")
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        self._slots = memoryview(self._map)[_HEADER_BYTES:]

    def close(self) -> None:
        """Unmap the table and close its file."""
        if self._fd is None:
            return
        self._slots.release()
        self._map.close()
        os.close(self._fd)
        self._fd = None

    def admit(self, key: int, now: float, limit: int) -> bool:
        """Whether the series ``key`` (u64, not 0) may be sent at ``now`` (monotonic seconds)
        within ``limit`` active series: True when it is active, or it is not and fewer than
        ``limit`` are (then it is active from now on); False otherwise (nothing changes)."""
        with self._locked():
            ring = self._ring()
            offset, seen = self._find(key)
            if seen is not None and self._live(seen, now):
                return True
            if self._active(ring, now) >= limit:
                return False
            if seen is None and self._keys() >= self.max_keys:
                self._rebuild(ring, now)
                if self._keys() >= self.max_keys:  # all active: the table is full
                    return False
                offset, seen = self._find(key)
            self._store(ring, offset, key, seen, now)
            self._save(ring)
            return True

    def refresh(self, keys: Iterable[int], now: float) -> None:
        """Mark the series ``keys`` (u64, not 0) as seen at ``now``: those sent (admitted
        before, or by another worker); a key not in the table is added, beyond the limit
        (it is being sent), while the table has room."""
        with self._locked():
            ring = self._ring()
            for key in keys:
                offset, seen = self._find(key)
                if seen is None and self._keys() >= self.max_keys:
                    self._rebuild(ring, now)
                    if self._keys() >= self.max_keys:
                        break
                    offset, seen = self._find(key)
                if seen is None or seen < now:
                    self._store(ring, offset, key, seen, now)
            self._save(ring)

    def active(self, now: float) -> int:
        """Series active at ``now`` (seen within the window, or up to a window / 8 longer)."""
        with self._locked():
            return self._active(self._ring(), now)

    def keys(self) -> int:
        """Keys in the table, active or not (swept when :attr:`max_keys` is reached)."""
        with self._locked():
            return self._keys()

    # Under the lock:

    def _locked(self) -> _Locked:
        if self._fd is None:
            raise ValueError("the series table is closed")
        return _Locked(self._lock, self._fd)

    def _keys(self) -> int:
        return int(struct.unpack_from("<Q", self._map, 24)[0])

    def _ring(self) -> list[int]:
        """The ring: bucket number and count, by position (bucket number % ring size)."""
        return list(_HEADER.unpack_from(self._map, 0)[4:])

    def _save(self, ring: list[int]) -> None:
        struct.pack_into(f"<{2 * _RING}q", self._map, 32, *ring)

    def _bucket(self, t: float) -> int:
        return math.floor(t / self.span)

    def _live(self, seen: float, now: float) -> bool:
        return self._bucket(now) - self._bucket(seen) < _RING

    def _active(self, ring: list[int], now: float) -> int:
        newest = self._bucket(now)
        return sum(ring[2 * p + 1] for p in range(_RING) if 0 <= newest - ring[2 * p] < _RING)

    def _count(self, ring: list[int], t: float, delta: int) -> None:
        """Count ``delta`` keys into the bucket of ``t`` (a bucket older than the ring's:
        forgotten already, nothing to count)."""
        number = self._bucket(t)
        p = 2 * (number % _RING)
        if ring[p] < number:
            ring[p], ring[p + 1] = number, 0
        if ring[p] == number:
            ring[p + 1] += delta

    def _store(
        self, ring: list[int], offset: int | None, key: int, seen: float | None, now: float
    ) -> None:
        """Set ``key``'s last seen to ``now`` at ``offset`` (its slot: ``seen`` its last seen
        there, or None for the free slot it is to take)."""
        if offset is None:  # cannot be: fewer keys than max_keys < capacity
            raise ValueError("the series table is full")
        if seen is None:
            struct.pack_into("<Q", self._map, 24, self._keys() + 1)
        elif self._live(seen, now):
            self._count(ring, seen, -1)
        self._count(ring, now, 1)
        SLOT.pack_into(self._slots, offset, key, now)

    def _home(self, key: int) -> int:
        return ((key * _MIX) & _MASK64) >> self._shift

    def _find(self, key: int) -> tuple[int | None, float | None]:
        """(offset of ``key``'s slot, its last seen) when it is in the table; else (offset of
        the free slot that ends its probe, None); (None, None) when the table is full."""
        i, slots, mask = self._home(key), self._slots, self.capacity - 1
        for _ in range(self.capacity):
            held, seen = SLOT.unpack_from(slots, i * SLOT.size)
            if held == key:
                return i * SLOT.size, seen
            if held == 0:
                return i * SLOT.size, None
            i = (i + 1) & mask
        return None, None

    def _rebuild(self, ring: list[int], now: float) -> None:
        """Keep the active keys only (reinserted: linear probing has no deletions)."""
        live = [
            (key, seen)
            for key, seen in SLOT.iter_unpack(self._slots)
            if key and self._live(seen, now)
        ]
        self._slots[:] = bytes(len(self._slots))
        mask = self.capacity - 1
        for key, seen in live:
            i = self._home(key)
            while SLOT.unpack_from(self._slots, i * SLOT.size)[0]:
                i = (i + 1) & mask
            SLOT.pack_into(self._slots, i * SLOT.size, key, seen)
        struct.pack_into("<Q", self._map, 24, len(live))


class BudgetTables:
    """The shared tables of the budgeted destinations of the workers' runtime directory
    ``runtime_dir``, one :class:`SharedSeries` per destination, window and size
    (:func:`budget_path`), opened once per process (a reload that keeps them gets the same
    object: :meth:`rwrouter.routing.BudgetedRouter.adopt`). Call it with a destination
    (``routing.build_router``'s ``stores``). Raises OSError as :class:`SharedSeries`."""

    def __init__(self, runtime_dir: str) -> None:
        self.runtime_dir = runtime_dir
        self._tables: dict[str, SharedSeries] = {}

    def __call__(self, dest: DestinationConfig) -> SharedSeries:
        if dest.series_limit is None:
            raise ValueError(f"destination {dest.name!r} has no series_limit")
        path = budget_path(
            self.runtime_dir,
            destination=dest.name,
            window=dest.series_window,
            limit=dest.series_limit,
        )
        table = self._tables.get(path)
        if table is None:
            table = SharedSeries(path, window=dest.series_window, limit=dest.series_limit)
            self._tables[path] = table
        return table

    def close(self) -> None:
        """Unmap every table."""
        for table in self._tables.values():
            table.close()
        self._tables.clear()


class _Locked:
    """The thread lock, then the file lock (released in the reverse order)."""

    def __init__(self, lock: threading.Lock, fd: int) -> None:
        self._lock, self._fd = lock, fd

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._lock.release()
