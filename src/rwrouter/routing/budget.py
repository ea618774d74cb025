"""The series budget of one destination (pure; time passed in): at most ``limit`` active
series, where a series is *active* while it had a sample within the last ``window`` seconds
(the managed workspace's active-series quota: "active = a sample in the last 2 h"), counted
as the audit counts them (:class:`~rwrouter.audit.active.ActiveSeries`: a series is its metric
name and the shard hash of its output labels, remembered in generations of ``window / 8``).

The policy, per series (rwrouter's own, config keys ``series_limit``, ``on_series_limit`` and
``series_window`` of a destination):

* a series the destination already has (active) is admitted: it keeps flowing;
* a new series is admitted while fewer than ``limit`` are active, and counts from then on;
* a new series beyond it is *over*: the router diverts it to the fallback destination or drops
  it (``on_series_limit``), and remembers it by metric name (:meth:`SeriesBudget.over_names`);
* series not seen for a window leave it, and room frees up: the router then decides the
  series it diverted again (:meth:`SeriesBudget.freed`).

With ``rwrouter run --workers N`` the workers hold one budget: each decides against a
:class:`SeriesStore` shared by them all (given by the I/O shell:
:class:`rwrouter.pipeline.budgets.SharedSeries`): a new series is admitted there, atomically
across the workers, while fewer than ``limit`` are active in it; the series each worker sends
are marked seen there every ``window / 16`` (those of its last two generations: a series may
count up to 3/8 of the window longer than the window, never shorter). Each worker still counts its
own series in its memory, so that a series it has is decided without the store.

Memory: one key per active series, at most ``limit`` of them (the audit's ~100 bytes each),
plus one raw label key per series over the budget (at most ``max(limit, 10,000)``; beyond,
they are neither listed nor counted) until room frees up.
"""

from __future__ import annotations

import math
import threading
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from rwrouter.audit.active import GENERATIONS, ActiveSeries
from rwrouter.config.budget import DEFAULT_SERIES_WINDOW, OnSeriesLimit

__all__ = [
    "DEFAULT_SERIES_WINDOW",
    "BudgetState",
    "OnSeriesLimit",
    "SeriesBudget",
    "SeriesStore",
    "series_key",
]

MIN_OVER_KEYS = 10_000  # series over the budget remembered at least (else up to the limit)
STORE_READ_SECONDS = 1.0  # the store's count is read at most this often for freed()


def series_key(name: bytes, hashed: int) -> int:
    """A series' key in a :class:`SeriesStore` (u64, never 0): the CRC-32 of its metric name
    ``name`` (raw bytes) << 32 | its shard hash ``hashed`` (u32)."""
    return zlib.crc32(name) << 32 | hashed or 1


class SeriesStore(Protocol):
    """The active series of a budget shared by several processes (times in seconds, one clock
    for them all; keys: :func:`series_key`)."""

    def admit(self, key: int, now: float, limit: int) -> bool:
        """True when ``key`` is active, or fewer than ``limit`` are (then it is, from now)."""
        ...

    def refresh(self, keys: Iterable[int], now: float) -> None:
        """Mark ``keys`` seen at ``now`` (added when absent)."""
        ...

    def active(self, now: float) -> int:
        """Active series at ``now``."""
        ...


class _Series(ActiveSeries):
    """A budget's :class:`ActiveSeries`: its generations advanced once per time (a budget asks
    about each new series of a request, at the request's time; again at the same time,
    advancing changes nothing)."""

    _advanced = math.nan  # the time advanced to last

    def _advance(self, now: float) -> None:
        if now != self._advanced:
            self._advanced = now
            super()._advance(now)


@dataclass(frozen=True, slots=True)
class BudgetState:
    """One destination's budget at one time: ``limit`` and ``active`` series, ``over``
    (series over the budget, by metric name: diverted or dropped, still cached), ``limited``
    (series decided over the budget since the start, a counter) and the ``action``."""

    limit: int
    active: int
    over: Mapping[str, int]
    limited: int
    action: OnSeriesLimit

    @property
    def used(self) -> float:
        """Active series / limit (0..1, more when series were admitted before a reload)."""
        return self.active / self.limit


class SeriesBudget:
    """The budget of one destination (module docstring). Thread-safe: decode threads route
    requests at once, and a series is admitted under one lock (never two at the last place).

    ``store``: the budget shared with other processes (None: this process's alone).
    Raises ValueError for a ``limit`` or ``window`` that is not positive."""

    def __init__(
        self,
        *,
        limit: int,
        window: float,
        action: OnSeriesLimit,
        now: float,
        store: SeriesStore | None = None,
    ) -> None:
        if limit < 1 or window <= 0:
            raise ValueError("series_limit and series_window must be positive")
        self.limit, self.window, self.action = limit, window, action
        self._series = _Series(window=window, max_series=limit, rate_window=window, now=now)
        self._lock = threading.Lock()
        self._over: dict[bytes, str] = {}  # raw label key (routing cache key) -> metric name
        self._over_names: dict[str, int] = {}
        self._max_over = max(limit, MIN_OVER_KEYS)  # beyond: not listed, nor counted
        self.limited = 0  # series decided over the budget (counter)
        self.store = store
        self._pushed = now  # when the series sent were last marked seen in the store
        self._push = 2  # the newest generations marked seen then
        self._read: tuple[float, int] = (-float("inf"), 0)  # the store's count, when read

    def decide(self, *, key: bytes, name: bytes, hashed: int, now: float) -> bool:
        """Whether the series of metric name ``name`` (raw bytes) and output shard hash
        ``hashed`` (u32), whose raw input labels are ``key``, may go to the destination at
        ``now`` (seconds): True when it is active already or there is room (then it counts
        as active from now); False when it is over the budget (remembered by name)."""
        with self._lock:
            series = self._series
            if series.holds(name, hashed, now):
                return True
            if self.store is not None:
                if self.store.admit(series_key(name, hashed), now, self.limit):
                    series.add(name, hashed, now)  # not remembered here at max_series: fine
                    return True
            elif series.total(now) < self.limit and series.add(name, hashed, now):
                return True
            if key not in self._over and len(self._over) < self._max_over:
                text = name.decode(errors="replace")
                self._over[key] = text
                self._over_names[text] = self._over_names.get(text, 0) + 1
                self.limited += 1
            return False

    def resize(self, *, limit: int, action: OnSeriesLimit) -> None:
        """Take a new ``limit`` and ``action`` (a reload), keeping the counts. Raises
        ValueError for a limit that is not positive."""
        if limit < 1:
            raise ValueError("series_limit must be positive")
        with self._lock:
            self.limit, self.action = limit, action
            self._series.max_series = limit
            self._max_over = max(limit, MIN_OVER_KEYS)

    def observe(self, body: bytes, index: bytes, now: float) -> None:
        """Count the framed series of one share sent to the destination (``body`` + its
        :data:`~rwrouter.wire.index.INDEX`) as seen at ``now``: they stay active."""
        with self._lock:
            self._series.observe(body, index, now)
            if self.store is not None and now - self._pushed >= self.window / 16:
                self._pushed = now
                recent = self._series.recent(now, self._push)
                self._push = 2
                self.store.refresh((series_key(n, h) for n, h in recent), now)

    def active(self, now: float) -> int:
        """Active series at ``now`` (all the processes' with a store)."""
        with self._lock:
            return self._total(now)

    def carry(self, old: SeriesBudget) -> None:
        """Take ``old``'s counts (a reload that gave the budget another store: a new size);
        all the series ``old`` has are marked seen in this one's store with the next share."""
        with self._lock, old._lock:
            self._series, self._over, self._over_names = old._series, old._over, old._over_names
            self._series.max_series = self.limit
            self.limited = old.limited
            self._pushed, self._push = -float("inf"), GENERATIONS + 1  # all, at the next share

    def _total(self, now: float) -> int:
        """Active series at ``now``: the store's (read at most every
        :data:`STORE_READ_SECONDS`), else this process's. Under the lock."""
        if self.store is None:
            return self._series.total(now)
        taken, count = self._read
        if not 0 <= now - taken < STORE_READ_SECONDS:
            count = self.store.active(now)
            self._read = (now, count)
        return count

    def freed(self, now: float) -> bool:
        """Whether series are over the budget while there is room again at ``now`` (series
        left the window): then they are forgotten here (the caller decides them again as
        they arrive) and True is returned."""
        with self._lock:
            if not self._over or self._total(now) >= self.limit:
                return False
            self._over.clear()
            self._over_names.clear()
            return True

    def state(self, now: float) -> BudgetState:
        """The :class:`BudgetState` at ``now``."""
        with self._lock:
            return BudgetState(
                self.limit,
                self._total(now),
                dict(self._over_names),
                self.limited,
                self.action,
            )
