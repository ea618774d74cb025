"""Active series and samples per metric name of one destination (pure; time passed in).

A series is *active* while it had a sample within the last ``window`` seconds (the managed
workspace's active-series quota counts 2 h). A series is identified by its metric name and the
shard hash of its output label set (crc32, :func:`rwrouter.routing.shard_hash`): two series of
the same name collide with probability about n²/2³³ (n = series of that name: 10,000 series
of one name lose about 0.01 of one), so counts are exact in practice and never high.

Series are remembered in ``GENERATIONS`` + 1 generations of ``window / GENERATIONS`` seconds
each (a series seen again moves to the newest one; the oldest is forgotten as a whole), so
every series seen within ``window`` is counted, and one last seen up to
``window / GENERATIONS`` earlier may still be. At most ``max_series`` series are remembered
(about 100 bytes each in CPython); series seen beyond that are not, and the counts are then
lower bounds (:attr:`Snapshot.capped`).

Samples (samples + exemplars + native histograms, as the index counts them) per name are
averaged over ``rate_window`` seconds, or since the first share counted when that is shorter
(the samples after it, over the time since it: a steady stream gives its exact rate, and a
single share none).
"""

from __future__ import annotations

import array
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rwrouter.wire.index import named_frames

__all__ = ["GENERATIONS", "ActiveSeries", "NameCount", "Snapshot", "merge"]

GENERATIONS = 8  # a series last seen up to window/8 before the window may still count
_HASH_BITS = 32
_HASH_MASK = (1 << _HASH_BITS) - 1


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


class ActiveSeries:
    """Counts one destination's routed series (:meth:`observe`) and reports them
    (:meth:`snapshot`). Times: seconds on one monotonic clock. Not thread-safe.

    Raises ValueError for a window, rate window or ``max_series`` that is not positive."""

    def __init__(self, *, window: float, max_series: int, rate_window: float, now: float) -> None:
        if window <= 0 or rate_window <= 0 or max_series < 1:
            raise ValueError("window, rate_window and max_series must be positive")
        self.window, self.max_series, self.rate_window = window, max_series, rate_window
        self._span = window / GENERATIONS
        self._generations: list[dict[int, int]] = [{}]  # key -> name id; newest last
        self._opened = now  # when the newest generation began
        self._started = now
        self._ids: dict[bytes, int] = {}  # raw name -> id
        self._names: list[str] = []  # id -> name
        self._active: list[int] = []  # id -> series held in the generations
        self._samples: list[int] = []  # id -> samples counted since the start
        self._held = 0  # keys in all generations
        self._capped_until = -1.0  # a series was not remembered: lower bounds until then
        self._marks: deque[tuple[float, list[int]]] = deque()  # the first at the first share

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
        return sum(self._samples)

    def observe(self, body: bytes, index: bytes, now: float) -> None:
        """Count the framed series of one routed share (``body`` + its
        :data:`~rwrouter.wire.index.INDEX`) seen at ``now``. Raises ValueError for an index
        that is not a whole number of entries."""
        self._advance(now)
        newest = self._generations[-1]
        older = self._generations[-2::-1]  # most recent first
        ids, active, samples_of = self._ids, self._active, self._samples
        for raw, samples, hashed in named_frames(body, index):
            nid = ids.get(raw)
            if nid is None:
                nid = self._add_name(raw)
            samples_of[nid] += samples
            key = nid << _HASH_BITS | hashed
            if key in newest:
                continue
            for generation in older:
                if generation.pop(key, None) is not None:
                    newest[key] = nid
                    break
            else:
                if self._held >= self.max_series:
                    self._capped_until = now + self.window
                    continue
                newest[key] = nid
                active[nid] += 1
                self._held += 1
        if not self._marks:  # rates count from after the first share (as a rate() needs two
            self._marks.append((now, list(samples_of)))  # points), not from an idle start

    def snapshot(self, now: float, *, keys: bool = False) -> Snapshot:
        """The counts at ``now`` (series older than the window are forgotten first);
        ``keys``: include each name's series hashes (for :func:`merge`)."""
        self._advance(now)
        mark_at, mark = self._marks[0] if self._marks else (now, [])
        seconds = now - mark_at
        hashes: list[array.array[int]] = []
        if keys:
            hashes = [array.array("I") for _ in self._names]
            for generation in self._generations:
                for key, nid in generation.items():
                    hashes[nid].append(key & _HASH_MASK)
            for values in hashes:
                values[:] = array.array("I", sorted(values))
        names = {}
        for nid, name in enumerate(self._names):
            before = mark[nid] if nid < len(mark) else 0
            rate = (self._samples[nid] - before) / seconds if seconds > 0 else 0.0
            if self._active[nid] or rate:
                names[name] = NameCount(self._active[nid], rate, hashes[nid] if keys else None)
        return Snapshot(names, now - self._started, now < self._capped_until)

    def _add_name(self, raw: bytes) -> int:
        nid = self._ids[raw] = len(self._names)
        self._names.append(raw.decode(errors="replace"))
        self._active.append(0)
        self._samples.append(0)
        return nid

    def _advance(self, now: float) -> None:
        """Open generations up to ``now`` (forgetting the oldest), and keep the rate marks:
        one every ``rate_window / 5``, the oldest within ``rate_window`` first."""
        for _ in range(GENERATIONS + 1):
            if now - self._opened < self._span:
                break
            self._opened += self._span
            self._generations.append({})
            if len(self._generations) > GENERATIONS + 1:
                for nid in self._generations.pop(0).values():
                    self._active[nid] -= 1
                    self._held -= 1
        else:  # idle for longer than the whole window: nothing is left
            self._opened = now
        if self._marks and now - self._marks[-1][0] >= self.rate_window / 5:
            self._marks.append((now, list(self._samples)))
        while len(self._marks) > 1 and now - self._marks[1][0] >= self.rate_window:
            self._marks.popleft()


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
