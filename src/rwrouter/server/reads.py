"""Cheap reads: the answers of ``GET /-/audit`` and ``GET /-/status`` built once, off the event
loop, kept for a short time and shared by the readers that ask meanwhile (issue 14: eight
concurrent ``GET /-/audit?top=0`` of 200,000 metric names took 750 MB and froze
``/-/healthy`` for 9.8 s, the JSON being built and serialized on the event loop).

- :class:`Answers` (time passed in): at most ``max_entries`` values, each fresh for ``ttl``
  seconds from the time its data was taken; the least recently used goes first.
- :class:`Reads`: :class:`Answers` plus single flight: a reader that finds no fresh value
  awaits the build already running for its key, if any, instead of starting another; a build
  that fails is not kept (every reader waiting for it gets its error); a reader that goes away
  does not cancel the build of the others.
- :func:`json_bytes`: ``json.dumps`` in slices, in a worker thread, so the event loop gets the
  GIL between slices (one ``json.dumps`` call holds it from start to end).
- :class:`AuditAnswers`: ``GET /-/audit``: one report of at most :data:`MAX_AUDIT_TOP` names
  per destination and sort order per ``audit.refresh``, and from it the answer bytes per
  (``top``, sort); :class:`StatusAnswers`: ``GET /-/status`` per :data:`STATUS_TTL`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from rwrouter.audit import SORT_KEYS
from rwrouter.audit.live import Audit
from rwrouter.metrics import status_snapshot

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MAX_AUDIT_TOP = 1000  # metric names per destination in GET /-/audit at most (top=0: this many)
DEFAULT_AUDIT_TOP = 100  # metric names per destination in GET /-/audit without ?top
STATUS_TTL = 1.0  # seconds a GET /-/status answer is served again: half the page's 2 s refresh
KEYS_TTL = 1.0  # seconds a worker's audit keys (--workers) are served to the other workers
MAX_ANSWERS = 8  # answers kept per cache: (endpoint, top, sort) combinations, the LRU goes
JSON_SLICE = 256  # list items or dict entries per json.dumps call (about 0.3 ms each)


class Answers(Generic[K, V]):
    """A bounded store of values that expire (pure: times are seconds passed in, from one
    clock). ``ttl`` >= 0 (0: nothing is kept), ``max_entries`` >= 1."""

    def __init__(self, *, ttl: float, max_entries: int) -> None:
        if ttl < 0 or max_entries < 1:
            raise ValueError(f"ttl must be >= 0 and max_entries >= 1, got {ttl}, {max_entries}")
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K, now: float) -> tuple[V, float] | None:
        """The value of ``key`` and the time its data was taken, while ``now`` is less than
        ``ttl`` after that time; None otherwise (an expired entry is forgotten)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        taken, value = entry
        if not taken <= now < taken + self.ttl:  # expired (or a clock gone backwards)
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value, taken

    def put(self, key: K, value: V, taken: float) -> None:
        """Keep ``value`` for ``key``, its data taken at ``taken``; forget the least recently
        used entries beyond ``max_entries``. Nothing is kept when ``ttl`` is 0."""
        if self.ttl == 0:
            return
        self._entries[key] = (taken, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


Build = Callable[[], Awaitable[tuple[V, float]]]  # -> the value and when its data was taken


class Reads(Generic[K, V]):
    """Values built once per key and ``ttl`` seconds, one build at a time per key (see the
    module docstring); on the event loop only. ``clock``: seconds (monotonic), the clock of
    the times the builds return."""

    def __init__(
        self,
        *,
        ttl: float,
        max_entries: int = MAX_ANSWERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.answers: Answers[K, V] = Answers(ttl=ttl, max_entries=max_entries)
        self.clock = clock
        self.builds = 0  # builds started (for the tests and the curious)
        self._flights: dict[K, asyncio.Future[tuple[V, float]]] = {}

    def set_ttl(self, ttl: float) -> None:
        """Follow a reloaded refresh period; kept values are dropped when it changes."""
        if ttl != self.answers.ttl:
            self.answers = Answers(ttl=ttl, max_entries=self.answers.max_entries)

    async def get(self, key: K, build: Build[V]) -> tuple[V, float]:
        """The value of ``key`` and when its data was taken: a fresh kept one, else the one
        being built for ``key``, else ``build()``'s (kept for ``ttl`` from its time). Raises
        what ``build`` raises."""
        kept = self.answers.get(key, self.clock())
        if kept is not None:
            return kept
        flight = self._flights.get(key)
        if flight is None:
            self.builds += 1
            flight = asyncio.ensure_future(build())
            self._flights[key] = flight
            flight.add_done_callback(lambda done: self._landed(key, done))
        # shield: a reader that goes away (cancelled) leaves the build to the others
        return await asyncio.shield(flight)

    def _landed(self, key: K, flight: asyncio.Future[tuple[V, float]]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if flight.cancelled() or flight.exception() is not None:
            return  # not kept; the exception is retrieved, every waiter got it
        value, taken = flight.result()
        self.answers.put(key, value, taken)


def json_bytes(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON (``allow_nan=False``: raises ValueError for NaN or
    infinity), the same text as ``json.dumps(value, separators=(",", ":"))``, serialized in
    slices of :data:`JSON_SLICE` items of every long list and dict so that another thread
    (the event loop) gets the GIL between them. Call it in a worker thread."""
    parts: list[str] = []
    _encode(value, parts)
    return "".join(parts).encode()


def _dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


_SCALARS = (str, int, float, bool, type(None))


def _flat(value: Any) -> bool:
    """A scalar, or a short list or dict of scalars: serialized with its neighbours."""
    if isinstance(value, _SCALARS):
        return True
    items = value.values() if isinstance(value, Mapping) else value
    return len(value) <= JSON_SLICE and all(isinstance(v, _SCALARS) for v in items)


def _encode(value: Any, parts: list[str]) -> None:
    """Append ``value``'s JSON text to ``parts``: flat slices in one ``json.dumps`` call each,
    the rest item by item. Mapping keys must be strings."""
    if isinstance(value, _SCALARS):
        parts.append(_dumps(value))
        return
    mapping = isinstance(value, Mapping)
    items = list(value.items()) if mapping else list(value)
    parts.append("{" if mapping else "[")
    for start in range(0, len(items), JSON_SLICE):
        chunk = items[start : start + JSON_SLICE]
        if start:
            parts.append(",")
        if all(_flat(v) for v in (chunk if not mapping else (v for _, v in chunk))):
            parts.append(_dumps(dict(chunk) if mapping else chunk)[1:-1])
            continue
        for i, item in enumerate(chunk):
            if i:
                parts.append(",")
            if mapping:
                parts.append(_dumps(item[0]) + ":")
                item = item[1]
            _encode(item, parts)
    parts.append("}" if mapping else "]")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditQuery:
    """What a ``GET /-/audit`` asks for: ``top`` names per destination (1 to
    :data:`MAX_AUDIT_TOP`), ranked ``by`` (:data:`rwrouter.audit.SORT_KEYS`); ``capped``: it
    asked for more, or for all."""

    top: int = DEFAULT_AUDIT_TOP
    by: str = "series"
    capped: bool = False


def audit_query(query: Mapping[str, str]) -> AuditQuery:
    """The :class:`AuditQuery` of ``?top=N`` (default :data:`DEFAULT_AUDIT_TOP`; 0: all,
    which is :data:`MAX_AUDIT_TOP`, as is anything over it) and ``&sort=series|samples``
    (default ``series``). Raises ValueError with a one-line reason (quoting at most 20
    characters of the value) for a ``top`` that is not a whole number from 0 to 999999999,
    or another ``sort``."""
    raw = query.get("top", str(DEFAULT_AUDIT_TOP))
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 9):
        raise ValueError(f"top must be a whole number from 0 to 999999999, got {_shown(raw)}")
    by = query.get("sort", "series")
    if by not in SORT_KEYS:
        raise ValueError(f"sort must be series or samples, got {_shown(by)}")
    asked = int(raw)
    capped = asked == 0 or asked > MAX_AUDIT_TOP
    return AuditQuery(top=MAX_AUDIT_TOP if capped else asked, by=by, capped=capped)


def _shown(value: str) -> str:
    return repr(value if len(value) <= 20 else value[:20] + "...")


AuditReport = Callable[[int, str], Awaitable[dict[str, Any]]]  # (top, sort) -> the report
Expose = Callable[[], Awaitable[tuple[bytes, str]]]  # the /metrics body and its content type


class AuditAnswers:
    """The answers of ``GET /-/audit`` (on the event loop only): per ``audit.refresh``
    seconds (read at each request: a reload may change it) at most one report per sort order
    and audit state (settings and audited destinations: a reload that changes them is seen at
    once), of :data:`MAX_AUDIT_TOP` names per destination, built by the app's report function
    (in a worker thread, or by gathering every worker's counts), and from it the answer bytes
    of each (``top``, sort, capped) (:data:`MAX_ANSWERS` kept), serialized in a worker thread.
    An answer expires with the report it was cut from."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.reports: Reads[Hashable, dict[str, Any]] = Reads(
            ttl=0, max_entries=2 * len(SORT_KEYS), clock=clock
        )
        self.answers: Reads[Hashable, bytes] = Reads(ttl=0, clock=clock)

    async def answer(
        self, *, report: AuditReport, audit: Audit, query: AuditQuery
    ) -> tuple[bytes, float]:
        """The JSON bytes of the report as ``query`` asks (:func:`audit_body`), and the
        clock's time its counts were taken. Raises what ``report`` raises."""
        top, by, capped = query.top, query.by, query.capped
        self.reports.set_ttl(audit.settings.refresh)
        self.answers.set_ttl(audit.settings.refresh)
        state = (audit.settings, tuple(audit.audited.items()))

        async def build_report() -> tuple[dict[str, Any], float]:
            taken = self.clock()
            return await report(MAX_AUDIT_TOP, by), taken

        async def build_answer() -> tuple[bytes, float]:
            full, taken = await self.reports.get((by, state), build_report)
            body = await asyncio.to_thread(audit_body, full, top=top, by=by, capped=capped)
            return body, taken

        return await self.answers.get((top, by, capped, state), build_answer)


def audit_body(report: Mapping[str, Any], *, top: int, by: str, capped: bool) -> bytes:
    """``report`` (:func:`rwrouter.audit.build_report`'s, ranked ``by``) with ``top`` names
    per destination, and ``top``, ``sort`` and ``top_capped``, as JSON bytes."""
    destinations = [{**d, "metrics": d["metrics"][:top]} for d in report["destinations"]]
    answer = {**report, "top": top, "sort": by, "top_capped": capped}
    answer["destinations"] = destinations
    return json_bytes(answer)


class StatusAnswers:
    """The answers of ``GET /-/status`` (on the event loop only): one per ``ttl`` seconds,
    read from the app's exposition (with ``--workers``: every worker's), parsed and
    serialized in a worker thread, with ``time`` (unix seconds) when it was taken."""

    def __init__(
        self, *, ttl: float = STATUS_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.reads: Reads[str, bytes] = Reads(ttl=ttl, max_entries=1, clock=clock)

    async def answer(self, expose: Expose) -> tuple[bytes, float]:
        """The JSON bytes and the clock's time they were taken. Raises what ``expose``
        raises, and ValueError for an exposition that is not one."""

        async def build() -> tuple[bytes, float]:
            taken = self.reads.clock()
            body, _ = await expose()
            return await asyncio.to_thread(status_body, body), taken

        return await self.reads.get("status", build)


def status_body(exposition: bytes) -> bytes:
    """:func:`rwrouter.metrics.status_snapshot` of ``exposition`` with ``time`` (unix
    seconds, now), as JSON bytes."""
    return json_bytes({**status_snapshot(exposition.decode()), "time": time.time()})
