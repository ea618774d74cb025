"""Active series and samples per metric name of one destination (pure; time passed in).

A series is *active* while it had a sample within the last ``window`` seconds (the managed
workspace's active-series quota counts 2 h). A series is identified by its metric name and the
shard hash of its output label set (crc32, :func:`rwrouter.routing.shard_hash`). Two series of
one name with the same crc32 count once, so counts are never high and rarely low: about
n²/2³³ of n random label sets, more for label sets that differ in a few characters only
(crc32 is linear): a review measured 0.2 % lost of 1 M ``pod-NNNNNNN``-style series of one
name, 0.01 % of 1 M random ones.

Series are remembered in ``GENERATIONS`` + 1 generations of ``window / GENERATIONS`` seconds
each (a series seen again moves to the newest one; the oldest is forgotten as a whole), so
every series seen within ``window`` is counted, and one last seen up to
``window / GENERATIONS`` earlier may still be; after no share for a whole window, "observed"
starts again. At most ``max_series`` series and names are remembered (about 100 bytes a
series, 300 bytes plus twice its length a name, in CPython); series seen beyond that are not
and the counts are then lower bounds (:attr:`Snapshot.capped`); names beyond it count their
samples under :data:`OTHER` (never series: they would be counted again under their own name).

Samples (samples + exemplars + native histograms, as the index counts them) per name are
counted in buckets of ``rate_window / RATE_BUCKETS`` seconds of receive time; the rate is the
samples received from the start of the bucket ``rate_window`` ago to now, over that time; when
the first share came later, like a PromQL ``rate()`` from a first point: the samples after the
first share, over the time since it (one share: no rate). Always over at least
``MIN_RATE_SECONDS`` (15 s, or one bucket when shorter), so a burst is not thousands a second.
Rates depend on when requests arrive, not on when anyone reads them; a steady stream reads
within one request's samples over the window of its rate (e.g. ±5 % at 15 s scrapes and the
default 5 m), and a sender catching up on a backlog reads high while the backlog is in the
window.
"""

from __future__ import annotations

import array
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rwrouter.audit.count import HASH_BITS, count_share

__all__ = [
    "GENERATIONS",
    "MIN_RATE_SECONDS",
    "OTHER",
    "RATE_BUCKETS",
    "ActiveSeries",
    "Counts",
    "NameCount",
    "Snapshot",
    "merge",
    "with_keys",
]

GENERATIONS = 8  # a series last seen up to window/8 before the window may still count
RATE_BUCKETS = 5  # rate_window in buckets of rate_window / 5
MIN_RATE_SECONDS = 15.0  # a rate is over at least this long (a usual scrape interval)
OTHER = "(other names: audit.max_series reached)"
_HASH_MASK = (1 << HASH_BITS) - 1


@dataclass(frozen=True, slots=True)
class NameCount:
    """One metric name at one destination: ``active_series``, ``samples_per_second`` and,
    when asked for (:meth:`ActiveSeries.snapshot` ``keys=True``), the series' hashes (u32,
    sorted) so that counts of several processes can be merged (:func:`merge`)."""

    active_series: int
    samples_per_second: float
    keys: array.array[int] | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One destination's counts at one time: per metric name (str; a name that is not valid
    UTF-8 shows with replacement characters), seconds ``observed`` (since the counting began;
    at most the window matters), and ``capped``: series were seen beyond ``max_series``, so
    counts are lower bounds."""

    names: Mapping[str, NameCount] = field(default_factory=dict)
    observed: float = 0.0
    capped: bool = False

    @property
    def active_series(self) -> int:
        return sum(n.active_series for n in self.names.values())

    @property
    def samples_per_second(self) -> float:
        return sum(n.samples_per_second for n in self.names.values())


@dataclass(frozen=True, slots=True)
class Counts:
    """A copy of an :class:`ActiveSeries`'s per-name state at one time (taken quickly, e.g.
    under a lock; :meth:`snapshot` does the per-name work): names by id (None: a free id),
    active series, samples counted and the counts the rate starts from, by id; the rate's
    ``seconds``; ``observed`` seconds; ``capped``."""

    names: list[str | None]
    active: list[int]
    counted: list[int]
    base: list[int] | None  # None: nothing received within the rate window
    seconds: float
    observed: float
    capped: bool

    def snapshot(self) -> Snapshot:
        """The :class:`Snapshot` of these counts."""
        names: dict[str, NameCount] = {}
        base = self.base
        for nid, name in enumerate(self.names):
            if name is None:
                continue
            rate = 0.0
            if base is not None:
                rate = (self.counted[nid] - (base[nid] if nid < len(base) else 0)) / self.seconds
            if self.active[nid] or rate:
                if name in names:  # two raw names shown alike (not valid UTF-8)
                    old = names[name]
                    names[name] = NameCount(
                        old.active_series + self.active[nid], old.samples_per_second + rate
                    )
                else:
                    names[name] = NameCount(self.active[nid], rate)
        return Snapshot(names, self.observed, self.capped)


class ActiveSeries:
    """Counts one destination's routed series (:meth:`observe`) and reports them
    (:meth:`snapshot`). Times: seconds on one clock (monotonic, or a capture's receive times).
    Not thread-safe. Memory is bounded by ``max_series``: at most that many series and metric
    names are remembered (samples of names beyond it count under :data:`OTHER`, whose series
    are not counted); the id of a name with neither series nor samples in the rate window is
    reused.

    Raises ValueError for a window, rate window or ``max_series`` that is not positive."""

    def __init__(self, *, window: float, max_series: int, rate_window: float, now: float) -> None:
        if window <= 0 or rate_window <= 0 or max_series < 1:
            raise ValueError("window, rate_window and max_series must be positive")
        self.window, self.max_series, self.rate_window = window, max_series, rate_window
        self._span = window / GENERATIONS
        self._generations: list[dict[int, int]] = [{}]  # key -> name id; newest last
        self._opened = now  # when the newest generation began
        self._first: float | None = None  # when the first share (since an idle window) came
        self._after_first: list[int] = []  # the counts just after that share
        self._ids: dict[bytes, int] = {}  # raw name -> id
        self._raw: list[bytes | None] = []  # id -> raw name (None: OTHER, or a free id)
        self._names: list[str | None] = []  # id -> name (None: a free id)
        self._free: list[int] = []  # ids to reuse
        self._other: int | None = None  # the id of OTHER, once names ran out
        self._active: list[int] = []  # id -> series held in the generations
        self._counted: list[int] = []  # id -> samples counted since the start
        self._held = 0  # keys in all generations
        self._samples = 0  # samples counted since the start
        self._capped_until = -math.inf  # a series was not remembered: lower bounds until then
        self._bucket_seconds = rate_window / RATE_BUCKETS
        # Per rate bucket that received a share: (its number, _counted before that share) —
        # the counts at the bucket's start, since nothing arrived between the two.
        self._marks: deque[tuple[int, list[int]]] = deque()

    def __len__(self) -> int:
        """Series remembered (all generations)."""
        return self._held

    def total(self, now: float) -> int:
        """Active series at ``now`` (all names)."""
        self._advance(now)
        return self._held

    @property
    def samples(self) -> int:
        """Samples counted since the start (all names)."""
        return self._samples

    def observe(self, body: bytes, index: bytes, now: float) -> None:
        """Count the framed series of one routed share (``body`` + its
        :data:`~rwrouter.wire.index.INDEX`) received at ``now``. Raises ValueError for an
        index that is not a whole number of entries."""
        self._advance(now)
        self._mark(now)
        counted, self._held, capped = count_share(
            body,
            index,
            self._ids,
            self._generations[-1],
            self._generations[-2::-1],  # most recent first
            self._counted,
            self._active,
            self._other,
            self._held,
            self.max_series,
            lambda raw: (self._add_name(raw, now), self._other),
        )
        if capped:
            self._capped_until = now + self.window
        self._samples += counted
        if self._first is None:
            self._first, self._after_first = now, list(self._counted)
        elif now < self._first:  # a capture may hold earlier times later
            self._first = now

    def holds(self, name: bytes, hashed: int, now: float) -> bool:
        """Whether the series of metric name ``name`` (raw bytes) and shard hash ``hashed``
        (u32) is active at ``now`` (counted within the window)."""
        self._advance(now)
        nid = self._ids.get(name)
        if nid is None:
            return False
        key = nid << HASH_BITS | hashed
        return any(key in generation for generation in self._generations)

    def add(self, name: bytes, hashed: int, now: float) -> bool:
        """Count the series of ``name`` and ``hashed`` as seen at ``now`` without samples (it
        is about to be sent: a series budget admitted it). False when it was not remembered
        (``max_series`` reached)."""
        self._advance(now)
        nid = self._ids.get(name)
        if nid is None:
            nid = self._add_name(name, now)
            if nid == self._other:
                return False
        key = nid << HASH_BITS | hashed
        newest = self._generations[-1]
        if key in newest:
            return True
        for generation in self._generations[:-1]:
            if generation.pop(key, None) is not None:
                newest[key] = nid
                return True
        if self._held >= self.max_series:
            self._capped_until = now + self.window
            return False
        newest[key] = nid
        self._active[nid] += 1
        self._held += 1
        return True

    def recent(self, now: float, generations: int = 2) -> list[tuple[bytes, int]]:
        """(raw name, shard hash) of the series of the newest ``generations`` at ``now``."""
        self._advance(now)
        gens, raw = self._generations[-generations:], self._raw
        pairs = ((raw[i], k & _HASH_MASK) for g in gens for k, i in g.items())
        return [(n, h) for n, h in pairs if n is not None]

    def counts(self, now: float) -> Counts:
        """A quick copy of the per-name state at ``now`` (series older than the window are
        forgotten first): :meth:`Counts.snapshot` does the rest, e.g. outside a lock."""
        self._advance(now)
        lowest = math.floor(now / self._bucket_seconds) - RATE_BUCKETS
        base = next((list(c) for number, c in self._marks if number >= lowest), None)
        start = lowest * self._bucket_seconds
        if self._first is not None and self._first >= start:
            # Like a rate() from the first point: the first share's samples are the base.
            start, base = self._first, list(self._after_first) if base is not None else None
        seconds = max(now - start, min(self._bucket_seconds, MIN_RATE_SECONDS))
        observed = 0.0 if self._first is None else max(0.0, now - self._first)
        return Counts(
            list(self._names),
            list(self._active),
            list(self._counted),
            base,
            seconds,
            observed,
            now < self._capped_until,
        )

    def snapshot(self, now: float, *, keys: bool = False) -> Snapshot:
        """The counts at ``now``; ``keys``: with each name's series hashes (for
        :func:`merge`; :meth:`copy_keys` + :func:`with_keys` build them outside a lock)."""
        snap = self.counts(now).snapshot()
        return with_keys(snap, *self.copy_keys(now)) if keys else snap

    def copy_keys(self, now: float) -> tuple[list[str | None], list[dict[int, int]]]:
        """The names (by id) and a copy of each generation (key -> name id) at ``now``: what
        :func:`with_keys` needs, copied quickly (no Python loop over the series)."""
        self._advance(now)
        return list(self._names), [dict(generation) for generation in self._generations]

    def _mark(self, now: float) -> None:
        """Remember the counts at the start of ``now``'s rate bucket, at its first share (a
        receive time earlier than the newest mark, as in a capture of concurrent requests,
        counts in the newest bucket)."""
        number = math.floor(now / self._bucket_seconds)
        if not self._marks or number > self._marks[-1][0]:
            self._marks.append((number, list(self._counted)))

    def _add_name(self, raw: bytes, now: float) -> int:
        live = len(self._names) - len(self._free)
        if live >= self.max_series + (self._other is not None):  # names are bounded too
            self._capped_until = now + self.window
            if self._other is None:
                self._other = self._new_id(OTHER, None)
            return self._other
        nid = self._ids[raw] = self._new_id(raw.decode(errors="replace"), raw)
        return nid

    def _new_id(self, name: str, raw: bytes | None) -> int:
        if self._free:
            nid = self._free.pop()
            self._names[nid], self._raw[nid] = name, raw
            self._counted[nid] = 0
            for _, counts in self._marks:  # its old samples are not the new name's
                if nid < len(counts):
                    counts[nid] = 0
            return nid
        self._names.append(name)
        self._raw.append(raw)
        self._active.append(0)
        self._counted.append(0)
        return len(self._names) - 1

    def _advance(self, now: float) -> None:
        """Open generations up to ``now``, forgetting the oldest; then free the ids of the
        names left with neither series nor samples in the rate window."""
        dropped = False
        for _ in range(GENERATIONS + 1):
            if now - self._opened < self._span:
                break
            self._opened += self._span
            self._generations.append({})
            if len(self._generations) > GENERATIONS + 1:
                dropped = True
                active = self._active
                for nid in self._generations.pop(0).values():
                    active[nid] -= 1
                self._held = sum(len(generation) for generation in self._generations)
        else:  # idle for longer than the whole window: nothing is left, observed starts again
            self._opened = now
            self._first = None
        oldest = math.floor(now / self._bucket_seconds) - RATE_BUCKETS
        while self._marks and self._marks[0][0] < oldest:
            self._marks.popleft()
        if dropped:
            self._free_ids()

    def _free_ids(self) -> None:
        """Free the ids of names with no series held and no samples since the rate window's
        start (their memory is reused: names stay bounded by ``max_series``)."""
        base = self._marks[0][1] if self._marks else self._counted
        free = set(self._free)
        for nid, name in enumerate(self._names):
            if (
                name is None
                or self._active[nid]
                or nid in free
                or self._counted[nid] > (base[nid] if nid < len(base) else 0)
            ):
                continue
            raw = self._raw[nid]
            if raw is not None:
                del self._ids[raw]
            if nid == self._other:
                self._other = None
            self._names[nid] = self._raw[nid] = None
            self._free.append(nid)


def with_keys(
    snap: Snapshot, names: list[str | None], generations: list[dict[int, int]]
) -> Snapshot:
    """``snap`` with each name's series hashes (sorted u32) from :meth:`ActiveSeries.copy_keys`
    taken at the same time."""
    hashes: list[array.array[int]] = [array.array("I") for _ in names]
    for generation in generations:
        for key, nid in generation.items():
            hashes[nid].append(key & _HASH_MASK)
    by_name: dict[str, array.array[int]] = {}
    for nid, name in enumerate(names):
        if name is not None:
            by_name.setdefault(name, array.array("I")).extend(hashes[nid])
    by_name = {name: array.array("I", sorted(keys)) for name, keys in by_name.items()}
    counts = {
        name: NameCount(c.active_series, c.samples_per_second, by_name.get(name, array.array("I")))
        for name, c in snap.names.items()
    }
    return Snapshot(counts, snap.observed, snap.capped)


def merge(snapshots: Iterable[Snapshot]) -> Snapshot:
    """One snapshot of the same destination counted by several processes (``rwrouter run
    --workers``): per name the union of their series (their ``keys``: a series seen by two
    workers counts once) and the sum of their samples per second. Raises ValueError when a
    snapshot lacks keys."""
    keys: dict[str, set[int]] = {}
    rates: dict[str, float] = {}
    observed, capped = 0.0, False
    for snap in snapshots:
        observed, capped = max(observed, snap.observed), capped or snap.capped
        for name, count in snap.names.items():
            if count.keys is None:
                raise ValueError("merging needs snapshots taken with keys=True")
            keys.setdefault(name, set()).update(count.keys)
            rates[name] = rates.get(name, 0.0) + count.samples_per_second
    names = {
        name: NameCount(len(keys[name]), rates[name], array.array("I", sorted(keys[name])))
        for name in keys
    }
    return Snapshot(names, observed, capped)
