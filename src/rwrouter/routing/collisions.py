"""Series that escaping makes equal (pure): the memory of which series claimed each escaped
label set at each destination (rwrouter's rules; the router's miss path asks it).

Two distinct output label sets of a destination that escape to the same one (``{__name__=
"a.b"}`` and ``{__name__="a_b"}`` under ``underscores``) would merge into one series there. The
first seen keeps the name; a later one is not sent to that destination (reason
``name_collision``). Rules:

* A *claim* (escaped labels -> the pre-escape labels that hold them, and the routing-cache key
  of a series that made it) is recorded only for series that escaping changed, and for an
  unchanged series that met a claim or was found first (below).
* A claim lasts while its series is active: while its cache key is in the routing cache (seen
  within about ``cache_max_age``). A series meeting the claim of a series no longer cached
  takes it over; so after both were forgotten, the first to come back is "first".
* An unchanged series is found first when its labels are themselves a cache key whose entry
  sends them unchanged to that destination (its input labels equal its output labels there:
  no rule changed them). An unchanged series whose rules did change its labels and that was
  seen before the escaped one is not remembered: both are sent (the memory holds only series
  that escaping changed).
* A series dropped for a collision (a *loser*) is cached like any outcome; at every rotation
  of the routing cache the router routes again each cached loser whose claimant is no longer
  cached (:meth:`Claims.recheck`), so a loser is sent again once the claimant stopped.

Bounds: ``max_claims`` claims (past it, claims of series no longer cached are forgotten, then
the oldest ones, down to half: a collision with a forgotten claim is not detected until the
series are routed again) and :data:`MAX_LOSERS` losers rechecked (more stay dropped until
their cache entry is forgotten).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["LABEL", "MAX_LOSERS", "SERIES", "Claims", "Collision", "CollisionLog", "Verdict"]

MAX_LOSERS = 10_000  # cached losers rechecked at each rotation of the routing cache
LABEL, SERIES = "label", "series"  # kinds of collision (rwrouter_name_collisions_total)
REPORTS_PER_MINUTE = 10  # collisions logged a minute, at most; the rest are counted
MAX_REPORTED = 10_000  # distinct collisions remembered as logged (then forgotten at once)
_IDENT = struct.Struct("<Q")
_MASK = (1 << 64) - 1

Alive = Callable[[bytes], bool]
"""Whether a routing-cache key is cached (its series seen within about cache_max_age)."""
Twin = Callable[[int, bytes], bool]
"""Whether ``labels`` are a cached key sent unchanged to destination ``route``."""


class Verdict(NamedTuple):
    """``kept``: send the series to the destination. ``claimant``: when not kept, the cache
    key of the series that holds its escaped labels. ``recorded``: a claim was recorded."""

    kept: bool
    claimant: bytes | None = None
    recorded: bool = False


_KEPT = Verdict(True)


def _hash(labels: bytes) -> int:
    """64 bits of Python's (SipHash) hash: claims are keyed and told apart by hashes, not by
    label bytes (a false match: about 1 in 10^7 at 10^6 claims, then a series is taken
    for its twin)."""
    return hash(labels) & _MASK


class Claims:
    """Claims per destination (index ``route``) and the losers to recheck. ``alive`` answers
    for the routing cache; ``max_claims``: the bound on claims over all destinations. A claim
    is hash(escaped labels) -> hash(pre-escape labels) (8 bytes) + the claimant's cache key:
    about 300 bytes for a label set of 150."""

    def __init__(self, *, routes: int, max_claims: int, alive: Alive) -> None:
        self._claims: list[dict[int, bytes]] = [{} for _ in range(routes)]
        self._count = 0
        self.max_claims = max(2, max_claims)
        self._alive = alive
        self._losers: dict[bytes, set[tuple[int, int]]] = {}  # key -> {(route, name hash)}

    def __len__(self) -> int:
        """Claims held, over all destinations."""
        return self._count

    def check(
        self, *, route: int, escaped: bytes, original: bytes | None, key: bytes, twin: Twin
    ) -> Verdict:
        """Whether the series with cache key ``key`` keeps its ``escaped`` output labels at
        destination ``route``; ``original``: its output labels before escaping, None when
        escaping changed nothing."""
        name = _hash(escaped)
        ident = name if original is None else _hash(original)
        claim = self._claims[route].get(name)
        if claim is None:
            if original is None:
                return _KEPT  # unchanged, unclaimed: nothing to remember
            if twin(route, escaped):  # an unchanged series with these very labels came first
                self._record(route, name, name, escaped)
                return self._lost(route, name, key, escaped, recorded=True)
            self._record(route, name, ident, key)
            return Verdict(True, None, True)
        held, claimant = _IDENT.unpack_from(claim)[0], claim[_IDENT.size :]
        if held == ident:
            if claimant != key:
                self._claims[route][name] = _IDENT.pack(ident) + key  # the same, another key
            return _KEPT
        if self._alive(claimant):
            return self._lost(route, name, key, claimant, recorded=False)
        self._record(route, name, ident, key)  # the claimant is gone: take the name over
        return Verdict(True, None, True)

    def _lost(
        self, route: int, name: int, key: bytes, claimant: bytes, *, recorded: bool
    ) -> Verdict:
        lost = self._losers.get(key)
        if lost is None and len(self._losers) < MAX_LOSERS:
            lost = self._losers[key] = set()
        if lost is not None:
            lost.add((route, name))
        return Verdict(False, claimant, recorded)

    def _record(self, route: int, name: int, ident: int, key: bytes) -> None:
        claims = self._claims[route]
        if name not in claims:
            if self._count >= self.max_claims:
                self._make_room()
            self._count += 1
        claims[name] = _IDENT.pack(ident) + key

    def _make_room(self) -> None:
        """Forget the claims of series no longer cached, then the oldest, down to half."""
        target = self.max_claims // 2
        for claims in self._claims:
            for name, claim in list(claims.items()):
                if not self._alive(claim[_IDENT.size :]):
                    del claims[name]
                    self._count -= 1
        for claims in self._claims:
            while self._count > target and claims:
                del claims[next(iter(claims))]
                self._count -= 1

    def recheck(self, route_again: Callable[[bytes], None]) -> None:
        """After a rotation of the routing cache: forget losers no longer cached, and call
        ``route_again(key)`` for each cached loser one of whose claimants is no longer cached
        (routing it again lets it take the name over)."""
        for key, lost in list(self._losers.items()):
            if not self._alive(key):
                del self._losers[key]
                continue
            for route, name in lost:
                claim = self._claims[route].get(name)
                if claim is None or not self._alive(claim[_IDENT.size :]):
                    del self._losers[key]
                    route_again(key)
                    break

    @property
    def losers(self) -> int:
        """Cached losers to recheck."""
        return len(self._losers)


@dataclass(frozen=True, slots=True)
class Collision:
    """One collision to log. ``kind``: :data:`LABEL` (two label names of one set; ``kept`` and
    ``dropped`` are label names, ``escaped`` the set sent) or :data:`SERIES` (``kept`` and
    ``dropped`` are the pre-escape label sets, ``escaped`` the one they share), as text."""

    destination: str
    kind: str
    escaped: str
    kept: str
    dropped: str


class CollisionLog:
    """What the shell records about collisions: counts per (destination, kind), and each
    distinct collision once to log, at most :data:`REPORTS_PER_MINUTE` a minute (``now``:
    seconds on a monotonic clock) — the others are counted as ``suppressed``."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.reports: list[Collision] = []
        self.suppressed = 0
        self._reported: set[Hashable] = set()
        self._window = (float("-inf"), 0)  # start, reports in it

    def add(
        self,
        *,
        destination: str,
        kind: str,
        key: Hashable,
        now: float,
        describe: Callable[[], Collision],
    ) -> None:
        """Count one collision of ``kind``; ``key`` tells distinct ones apart and
        ``describe()`` makes the report when it is to be logged."""
        self.counts[(destination, kind)] = self.counts.get((destination, kind), 0) + 1
        if key in self._reported:
            return
        if len(self._reported) >= MAX_REPORTED:
            self._reported.clear()
        self._reported.add(key)
        start, used = self._window
        if now - start >= 60.0:
            start, used = now, 0
        if used >= REPORTS_PER_MINUTE:
            self.suppressed += 1
            return
        self._window = (start, used + 1)
        self.reports.append(describe())

    def take(self) -> tuple[dict[tuple[str, str], int], list[Collision], int]:
        """The counts, reports and suppressed count since the last call (then reset)."""
        counts, reports, suppressed = self.counts, self.reports, self.suppressed
        self.counts, self.reports, self.suppressed = {}, [], 0
        return counts, reports, suppressed
