"""The routing cache's generations and bounds (pure): raw label bytes -> compact outcome
(:data:`Entry`), rwrouter's own policy.

The cache is bounded three ways: ``cache_size`` label sets, ``cache_bytes`` bytes of raw and
encoded labels, and ``cache_max_age`` seconds (a label set not seen for that long is forgotten:
series churn, e.g. restarted pods, cannot grow it). It keeps two generations: lookups try the
young one, then the old one (a hit there is copied to the young one). The old generation is
forgotten and the young one becomes old (a rotation) every ``cache_max_age / 2`` seconds,
whenever the label sets new since the last rotation (misses, not copies) reach half of
``cache_size`` or ``cache_bytes``, and whenever both generations together hold all of either:
the label sets seen most recently stay, and a stable set of up to ``cache_size / 2`` label sets
is always fully cached. An old generation whose every entry has been copied to the young one
is forgotten at once (the young one holds it all): a stable set of a little over half the
bound is then held once and looked up in one generation, instead of being copied from one
generation to the next every time it fills half the cache. Bounds are applied after each
request (a request may add its own series on top).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from typing import Protocol

from rwrouter.wire.accelerator import compiled

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CACHE_MAX_AGE",
    "DEFAULT_CACHE_SIZE",
    "HIT_RATIO_WINDOW",
    "Cache",
    "Entry",
    "Generations",
    "Slot",
    "entry_bytes",
    "keeps_at",
    "new_cache",
    "pack_entry",
    "slot_at",
    "unpack_entry",
]

Entry = bytes
"""A routing outcome, compact (one bytes object: nothing for the garbage collector to walk,
few cache lines to touch), per destination in config order (see :func:`pack_entry`):

* ``00``: not sent and not counted (a fallback destination whose series went elsewhere);
* ``01`` + hash (u32 LE): kept, output labels equal to the raw labels (the cache key);
* ``02`` + hash (u32 LE) + length (u32 LE) + labels: kept, with these encoded output labels;
* ``03`` + reason (u8): not sent, counted under ``reasons[reason]``.
"""

NOT_SENT, KEPT_SAME, KEPT, DROPPED = 0, 1, 2, 3
_U32 = struct.Struct("<I")
_U32X2 = struct.Struct("<II")

Slot = tuple[bytes, int] | int | None
"""One destination's part of an :data:`Entry`, unpacked (:func:`pack_entry`,
:func:`unpack_entry`): (encoded labels, shard hash) when kept, a reason index when dropped,
None when not sent."""


def pack_entry(key: bytes, slots: Sequence[Slot]) -> Entry:
    """The compact :data:`Entry` of a label set (``key``: its raw label bytes)."""
    out = bytearray()
    for slot in slots:
        if slot is None:
            out.append(NOT_SENT)
        elif isinstance(slot, int):
            out += bytes((DROPPED, slot))
        elif slot[0] == key:
            out.append(KEPT_SAME)
            out += _U32.pack(slot[1])
        else:
            out.append(KEPT)
            out += _U32X2.pack(slot[1], len(slot[0]))
            out += slot[0]
    return bytes(out)


def unpack_entry(key: bytes, entry: Entry) -> list[Slot]:
    """The slots of an :data:`Entry` (the inverse of :func:`pack_entry`)."""
    slots: list[Slot] = []
    pos = 0
    while pos < len(entry):
        kind = entry[pos]
        if kind == NOT_SENT:
            slots.append(None)
            pos += 1
        elif kind == DROPPED:
            slots.append(entry[pos + 1])
            pos += 2
        elif kind == KEPT_SAME:
            slots.append((key, _U32.unpack_from(entry, pos + 1)[0]))
            pos += 5
        else:
            hashed, length = _U32X2.unpack_from(entry, pos + 1)
            slots.append((entry[pos + 9 : pos + 9 + length], hashed))
            pos += 9 + length
    return slots


def slot_at(key: bytes, entry: Entry, i: int) -> Slot:
    """Destination ``i``'s slot of an :data:`Entry` (``unpack_entry(key, entry)[i]``, without
    unpacking the others). Raises IndexError when the entry has no slot ``i``."""
    pos = 0
    for _ in range(i):
        kind = entry[pos]
        pos += (
            1
            if kind == NOT_SENT
            else 2
            if kind == DROPPED
            else 5
            if kind == KEPT_SAME
            else 9 + _U32.unpack_from(entry, pos + 5)[0]
        )
    kind = entry[pos]
    if kind == NOT_SENT:
        return None
    if kind == DROPPED:
        return entry[pos + 1]
    if kind == KEPT_SAME:
        return (key, _U32.unpack_from(entry, pos + 1)[0])
    hashed, length = _U32X2.unpack_from(entry, pos + 1)
    return (entry[pos + 9 : pos + 9 + length], hashed)


def keeps_at(entry: Entry, mask: int) -> bool:
    """Whether ``entry`` keeps its series (a slot of kind ``01`` or ``02``) at a destination
    ``i`` whose bit ``1 << i`` is set in ``mask``. The compiled loop's ``entry_keeps``
    (wire/_scan.c) is the same test."""
    pos, i = 0, 0
    while pos < len(entry) and mask >> i:
        kind = entry[pos]
        if kind in (KEPT_SAME, KEPT) and mask >> i & 1:
            return True
        if kind == NOT_SENT:
            pos += 1
        elif kind == KEPT_SAME:
            pos += 5
        elif kind == DROPPED:
            pos += 2
        else:
            pos += 9 + _U32.unpack_from(entry, pos + 5)[0]
        i += 1
    return False


class Cache(Protocol):
    """A generation of the routing cache: raw label bytes -> :data:`Entry`. A dict, or the
    compiled ``LabelCache`` (looked up without copying the labels out of the request)."""

    def get(self, key: bytes, default: None = None, /) -> Entry | None: ...

    def __setitem__(self, key: bytes, value: Entry, /) -> None: ...

    def __len__(self) -> int: ...

    def items(self) -> Iterable[tuple[bytes, Entry]]: ...


MAX_PRESIZE = 1 << 24
"""Entries a new young generation reserves room for at most (it grows past them as needed)."""


def entry_bytes(key: bytes, entry: Entry) -> int:
    """Bytes a cache entry holds: its raw label key and its compact outcome."""
    return len(key) + len(entry)


def _dict_cache(expected: int = 0) -> Cache:
    cache: dict[bytes, Entry] = {}
    return cache


class CacheFactory(Protocol):
    """Makes a routing-cache generation with room for ``expected`` entries."""

    def __call__(self, expected: int = 0, /) -> Cache: ...


def _cache_type() -> CacheFactory:
    factory: CacheFactory | None = compiled("LabelCache")
    return factory or _dict_cache


new_cache = _cache_type()
"""``new_cache(expected=0)``: a new, empty routing-cache generation with room for ``expected``
entries (a dict ignores it): the compiled ``LabelCache`` when
:data:`rwrouter.wire.accelerator.ACCELERATED`, else a dict (both work with either loop)."""


# Defaults of the relabel_cache section (rwrouter.config.RelabelCacheConfig).
DEFAULT_CACHE_SIZE = 2_000_000  # label sets
DEFAULT_CACHE_BYTES = 1024 * 1024 * 1024  # raw label bytes and outcomes held by the cache
DEFAULT_CACHE_MAX_AGE = 600.0  # seconds: a label set not seen for this long is forgotten
HIT_RATIO_WINDOW = 60.0  # seconds over which Router.hit_ratio is computed


class Generations:
    """The two generations, their bounds and the hit counters (the module docstring); the
    router fills them (``_young``) and counts ``hits``/``misses``. :meth:`_rotated` is
    called after every rotation."""

    def __init__(self, *, cache_size: int, cache_bytes: int, cache_max_age: float) -> None:
        self.cache_size = cache_size
        self.cache_bytes = cache_bytes
        self.cache_max_age = cache_max_age
        self._young: Cache = new_cache()
        self._old: Cache = new_cache()
        self._young_bytes = self._old_bytes = 0
        self._overlap = self._overlap_bytes = 0  # in both generations (copied since rotation)
        self._copied = self._copied_bytes = 0  # young's entries copied from old (since rotation)
        self._rotated_at: float | None = None
        self.hits = 0
        self.misses = 0
        self._window: tuple[float, int, int] | None = None  # start, hits, misses at start
        self._ratio = math.nan

    def __len__(self) -> int:
        """Distinct label sets in the cache."""
        return len(self._young) + len(self._old) - self._overlap

    @property
    def cached_bytes(self) -> int:
        """Bytes of raw and encoded labels the cache holds (distinct entries)."""
        return self._young_bytes + self._old_bytes - self._overlap_bytes

    @property
    def hit_ratio(self) -> float:
        """Cache hits / lookups over the last :data:`HIT_RATIO_WINDOW` seconds completed (the
        current window until one completed); NaN before any lookup."""
        if math.isnan(self._ratio):
            lookups = self.hits + self.misses
            return self.hits / lookups if lookups else math.nan
        return self._ratio

    def maintain(self, now: float) -> None:
        """Apply the age bound and roll the hit-ratio window; ``now``: seconds on any monotonic
        clock. :meth:`route` calls it first."""
        if self._rotated_at is None:
            self._rotated_at = now
        elif (idle := now - self._rotated_at) >= self.cache_max_age / 2:
            self._rotate(now)
            if idle >= self.cache_max_age:
                self._rotate(now)  # no request for a whole max_age: nothing is recent
        if self._window is None:
            self._window = (now, self.hits, self.misses)
        elif now - self._window[0] >= HIT_RATIO_WINDOW:
            hits, misses = self.hits - self._window[1], self.misses - self._window[2]
            if hits + misses:
                self._ratio = hits / (hits + misses)
            self._window = (now, self.hits, self.misses)

    def _bound(self, now: float) -> None:
        """The size and byte bounds (the module docstring): an old generation copied in full
        is forgotten; the young one becomes old (the previous old one is forgotten) when the
        label sets new since the last rotation reach half of either bound, or both
        generations together reach it; an old one over the whole bound (one request larger
        than the cache) is forgotten at once."""
        if self._overlap and self._overlap >= len(self._old):
            self._forget_old()
        new, new_bytes = len(self._young) - self._copied, self._young_bytes - self._copied_bytes
        if (
            new >= self.cache_size / 2
            or new_bytes >= self.cache_bytes / 2
            or len(self._young) + len(self._old) >= self.cache_size
            or self._young_bytes + self._old_bytes >= self.cache_bytes
        ):
            self._rotate(now)
            if len(self._old) > self.cache_size or self._old_bytes > self.cache_bytes:
                self._forget_old()

    def _forget_old(self) -> None:
        self._old = new_cache()
        self._old_bytes = 0
        self._overlap = self._overlap_bytes = 0

    def _copied_from_old(self, entries: int, nbytes: int) -> None:
        """Count ``entries`` (of ``nbytes`` bytes) copied from old to young by one request."""
        self._overlap += entries
        self._overlap_bytes += nbytes
        self._copied += entries
        self._copied_bytes += nbytes

    def _rotate(self, now: float) -> None:
        self._forget_old()
        self._old, self._old_bytes = self._young, self._young_bytes
        # room from the start for as many as the last generation took (no growing by doubling)
        self._young, self._young_bytes = new_cache(min(len(self._old), MAX_PRESIZE)), 0
        self._copied = self._copied_bytes = 0
        self._rotated_at = now
        self._rotated()

    def _rotated(self) -> None:
        """Called after every rotation (the young generation is new and empty)."""

    def _cached(self, key: bytes) -> bool:
        """Whether a label set is in the cache (seen within about ``cache_max_age``)."""
        return self._young.get(key) is not None or self._old.get(key) is not None
