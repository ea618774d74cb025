"""The audit of a running router: counts the routed series of every audited destination
(``shadow: true`` or ``audit: true``) as requests are decoded, and reports them
(:mod:`rwrouter.audit`: active series and samples/s per metric name, workspace limit, cost).

Only requests the router accepted (204) are counted: a refused request (503, 413, ...) is sent
again by Prometheus and counted then. Counting walks each audited share once more in Python
(about a microsecond per series, on the event loop when the request is accepted): cheap for a
shadow destination holding the critical families, noticeable for one that would take
everything — which is what an audit is for, and why it is opt-in.
"""

from __future__ import annotations

import array
import base64
import dataclasses
import logging
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from rwrouter.audit import ActiveSeries, NameCount, Snapshot, build_report, merge, with_keys
from rwrouter.audit.capture import CaptureReader
from rwrouter.config import AuditConfig, Config, DestinationConfig
from rwrouter.errors import RwrouterError
from rwrouter.logs import kv
from rwrouter.wire import decompress
from rwrouter.wire.index import Frames

__all__ = ["Audit", "OfflineAudit", "audit_capture", "snapshots_from_json", "snapshots_to_json"]

log = logging.getLogger("rwrouter.audit")


class Audit:
    """Per audited destination an :class:`~rwrouter.audit.ActiveSeries`; safe to use from the
    decode threads and the event loop. Times: seconds, monotonic clock."""

    def __init__(self, config: Config, *, now: float) -> None:
        self._lock = threading.Lock()
        self.settings = config.audit
        self.audited: dict[str, bool] = {}  # audited destination name -> is it a shadow
        self._entries: dict[str, DestinationConfig] = {}
        self._global = config.relabel_configs
        self._counts: dict[str, ActiveSeries] = {}
        self.configure(config, now=now)

    def configure(self, config: Config, *, now: float) -> None:
        """Follow a (re)loaded configuration: a destination whose ``remote_write`` entry is
        unchanged, under unchanged counting settings (``audit`` ``window``, ``max_series``,
        ``rate_window``) and global ``relabel_configs``, keeps its counts; others start afresh
        (their counts would describe other rules). Prices, currency and the series limit
        only change the report."""
        audited = [d for d in config.remote_write if d.audited]
        with self._lock:
            same = (_counting(config.audit), config.relabel_configs) == (
                _counting(self.settings),
                self._global,
            )
            self._global = config.relabel_configs
            old = {
                d.name: self._counts[d.name]
                for d in audited
                if same and self._entries.get(d.name) == d
            }
            self.settings = config.audit
            self.audited = {d.name: d.shadow for d in audited}
            self._entries = {d.name: d for d in audited}
            restarted = [d.name for d in audited if d.name not in old and d.name in self._counts]
            self._counts = {
                d.name: old[d.name] if d.name in old else self._new(config.audit, now)
                for d in audited
            }
        if restarted:
            why = "audit counts start afresh (rules or counting settings changed)"
            log.info(kv(destinations=",".join(restarted), msg=why))

    @staticmethod
    def _new(settings: AuditConfig, now: float) -> ActiveSeries:
        return ActiveSeries(
            window=settings.window,
            max_series=settings.max_series,
            rate_window=settings.rate_window,
            now=now,
        )

    @property
    def names(self) -> list[str]:
        """The audited destinations, in config order."""
        return list(self.audited)

    def observe(self, shares: Sequence[tuple[str, Frames]], now: float) -> None:
        """Count each (destination name, its routed share) of one request; names not audited
        (any more: a reload) are skipped."""
        with self._lock:
            for name, share in shares:
                counts = self._counts.get(name)
                if counts is not None and share.series:
                    counts.observe(share.body, share.index, now)

    def snapshots(self, now: float, *, keys: bool = False) -> dict[str, Snapshot]:
        """Per audited destination (config order) its counts at ``now``; ``keys``: with the
        series' hashes, built outside the lock from a quick copy (counting goes on)."""
        with self._lock:  # quick copies only: counting waits for this lock
            states = {name: counts.counts(now) for name, counts in self._counts.items()}
            copies = (
                {name: counts.copy_keys(now) for name, counts in self._counts.items()}
                if keys
                else {}
            )
        snaps = {name: state.snapshot() for name, state in states.items()}
        return {
            name: with_keys(snap, *copies[name]) if keys else snap for name, snap in snaps.items()
        }

    def report(self, now: float, *, top: int | None, by: str = "series") -> dict[str, Any]:
        """:func:`rwrouter.audit.build_report` of this process's counts (``top`` names per
        destination ranked ``by``)."""
        return build_report(
            self.snapshots(now), audit=self.settings, shadow=self.audited, top=top, by=by
        )

    def merged_report(
        self,
        parts: Sequence[Mapping[str, Snapshot]],
        *,
        top: int | None,
        by: str = "series",
        workers: int,
        expected: int,
    ) -> dict[str, Any]:
        """The report of several workers' snapshots (taken with keys; ``workers`` of
        ``expected`` answered): each destination's series counted once however many workers
        saw it."""
        names = [n for n in self.audited if any(n in part for part in parts)]
        merged = {name: merge(part[name] for part in parts if name in part) for name in names}
        return build_report(
            merged,
            audit=self.settings,
            shadow=self.audited,
            top=top,
            by=by,
            workers=workers,
            workers_expected=expected,
        )

    def totals(self, now: float) -> tuple[dict[str, tuple[int, int]], int]:
        """Per audited destination (its active series at ``now``, samples counted since the
        start), and ``audit.series_limit``: for /metrics."""
        with self._lock:
            totals = {name: (c.total(now), c.samples) for name, c in self._counts.items()}
            return totals, self.settings.series_limit


def _counting(settings: AuditConfig) -> tuple[float, int, float]:
    """The settings the counts depend on."""
    return settings.window, settings.max_series, settings.rate_window


def snapshots_to_json(snapshots: Mapping[str, Snapshot]) -> dict[str, Any]:
    """Snapshots taken with keys as JSON (a worker's answer to its peers): keys as base64 of
    little-endian u32."""
    return {
        name: {
            "observed": snap.observed,
            "capped": snap.capped,
            "names": {
                metric: [
                    c.active_series,
                    c.samples_per_second,
                    base64.b64encode(_le(c.keys)).decode(),
                ]
                for metric, c in snap.names.items()
            },
        }
        for name, snap in snapshots.items()
    }


def snapshots_from_json(data: Mapping[str, Any]) -> dict[str, Snapshot]:
    """The inverse of :func:`snapshots_to_json`. Raises ValueError / KeyError / TypeError for
    another shape."""
    out = {}
    for name, snap in data.items():
        names = {}
        for metric, (active, rate, encoded) in snap["names"].items():
            keys = array.array("I")
            keys.frombytes(base64.b64decode(encoded, validate=True))
            names[metric] = NameCount(int(active), float(rate), _little_endian(keys))
        out[name] = Snapshot(names, float(snap["observed"]), bool(snap["capped"]))
    return out


def _le(keys: array.array[int] | None) -> bytes:
    if keys is None:
        raise ValueError("snapshots must be taken with keys=True")
    return _little_endian(keys).tobytes()


def _little_endian(keys: array.array[int]) -> array.array[int]:
    """``keys`` in little-endian order (the wire order) from native, or back: a swapped copy
    on a big-endian machine, ``keys`` itself elsewhere."""
    if sys.byteorder == "little":
        return keys
    swapped = array.array("I", keys)
    swapped.byteswap()
    return swapped


@dataclass(slots=True)
class OfflineAudit:
    """The audit of a capture file under a configuration (:func:`audit_capture`): the
    ``report``, the ``requests`` counted, the records ``skipped`` (not a valid write request),
    and the reader (``corrupt`` records, a ``torn`` end)."""

    report: dict[str, Any]
    requests: int
    skipped: int
    reader: CaptureReader


def audit_capture(config: Config, stream: BinaryIO, *, top: int | None) -> OfflineAudit:
    """Route every request of a capture file (:mod:`rwrouter.audit.capture`) through
    ``config``'s rules, as ``rwrouter run`` would at the time it was received, and count
    **every** destination (nothing is sent offline; ``shadow`` is reported as configured).
    The report's time is the latest receive time in the file. Raises CaptureError for a file
    that is not a capture."""
    from rwrouter.routing import build_router

    every = dataclasses.replace(
        config, remote_write=tuple(dataclasses.replace(d, audit=True) for d in config.remote_write)
    )
    router = build_router(every)
    names = [route.name for route in router.routes]
    reader = CaptureReader(stream)
    audit: Audit | None = None
    requests = skipped = 0
    now = 0.0
    for received_ms, body in reader.records():
        at = received_ms / 1000
        now = max(now, at) if audit is not None else at
        if audit is None:
            audit = Audit(every, now=now)
        try:
            routed = router.route(
                decompress(body, max_decoded_bytes=config.server.max_decoded_bytes), now=at
            )
        except RwrouterError:  # DecodeError, TooLargeError: the receiver would refuse it too
            skipped += 1
            continue
        audit.observe(list(zip(names, routed.shares, strict=True)), at)
        requests += 1
    if audit is None:
        audit = Audit(every, now=now)
    return OfflineAudit(audit.report(now, top=top), requests, skipped, reader)
