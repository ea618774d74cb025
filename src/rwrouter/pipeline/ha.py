"""HA dedup at receive time: the election table shared by the workers of one rwrouter, and
its application to a routed request (the rule itself is pure: :mod:`rwrouter.routing.ha`).

The table is a memory map of :data:`MAX_CLUSTERS` fixed slots, one per (destination,
cluster), found by open addressing on a digest of both. A single process maps anonymous
memory; the workers of ``rwrouter run --workers N`` map the file ``<runtime_dir>/ha`` of the
supervisor's private runtime directory (as the connection board, :mod:`rwrouter.server.balance`),
so one election holds for all of them. Every decision is a read-modify-write of one slot
under a lock: a ``threading.Lock`` (requests are decoded in threads) and, on the file, an
exclusive ``flock`` (the other workers): two system calls a request of an HA pair, about
2 microseconds. Times are ``time.monotonic()`` seconds: CLOCK_MONOTONIC, the same clock in
every process of the host.

Slot (little-endian, :data:`SLOT`, 512 bytes): 16-byte digest of (destination, cluster) (all
zero: free), 16-byte digest of the elected replica, its last-seen and election times and the
failover timeout (f64 seconds), and the names of the destination, the cluster and the replica
(u16 lengths, then up to 64, 193 and 193 UTF-8 bytes, cut at a character: for logs and
:meth:`ElectionTable.leaders`, the status page's list).
A slot whose leader has been silent for longer than its timeout decides as a free one (the
next replica is elected either way), so it is reused when the table is full; when no slot is
free or stale, the request is taken without an election (``full``) and a warning is logged.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rwrouter.logs import kv
from rwrouter.metrics import SendMetrics
from rwrouter.metrics.ha import HaLeaders, HaSettings
from rwrouter.reasons import DropReason
from rwrouter.routing import RoutedRequest
from rwrouter.routing.ha import Leader, Verdict, elect, ha_labels
from rwrouter.routing.outcome import Route
from rwrouter.wire.first import first_series_labels
from rwrouter.wire.index import Frames

__all__ = [
    "MAX_CLUSTERS",
    "Decision",
    "Elected",
    "ElectionTable",
    "apply_ha",
    "elections_path",
    "ha_state",
]

log = logging.getLogger("rwrouter.ha")

MAX_CLUSTERS = 4096  # slots: (destination, cluster) pairs tracked at once (2 MiB mapped)
_DESTINATION_BYTES, _NAME_BYTES = 64, 193  # the longest names kept (the cluster's, replica's)
SLOT = struct.Struct(f"<16s16sdddHHH{_DESTINATION_BYTES}s{_NAME_BYTES}s{_NAME_BYTES}s")
_FREE = bytes(16)


def elections_path(runtime_dir: str) -> str:
    """The shared table's file in the supervisor's private runtime directory."""
    return os.path.join(runtime_dir, "ha")


@dataclass(frozen=True, slots=True)
class Decision:
    """:meth:`ElectionTable.decide`'s answer: the ``verdict``, the replica elected before
    (``previous``: on a failover, else None) and how long it had been silent (seconds), and
    ``full`` when no slot was left (then the verdict is ``unlabeled``: taken, no election)."""

    verdict: Verdict
    previous: str | None = None
    silent: float = 0.0
    full: bool = False


def _digest(*parts: str) -> bytes:
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Elected:
    """One (destination, cluster)'s elected replica in :meth:`ElectionTable.leaders`: the
    names (cut to the slot's room), and ``silent``: seconds since its last request."""

    destination: str
    cluster: str
    replica: str
    silent: float


def _cut(text: str, room: int) -> bytes:
    """``text`` as UTF-8, at most ``room`` bytes, cut at a character boundary."""
    return text.encode()[:room].decode("utf-8", "ignore").encode()


class ElectionTable:
    """The elected replica per (destination, cluster): in anonymous memory (``path`` None)
    or in the file ``path`` shared by the workers (created with mode 0600 when absent).
    Raises OSError when the file cannot be opened or sized."""

    def __init__(self, path: str | None = None, *, slots: int = MAX_CLUSTERS) -> None:
        self._slots, size = slots, slots * SLOT.size
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.metrics: SendMetrics | None = None  # where elections are counted (the fan-out's)
        if path is None:
            self._map = mmap.mmap(-1, size)
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size < size:  # the first worker sizes it (zero: all free)
                    os.ftruncate(fd, size)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def close(self) -> None:
        """Unmap the table (and close its file)."""
        self._map.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def decide(
        self, *, destination: str, cluster: str, replica: str, now: float, failover_timeout: float
    ) -> Decision:
        """Judge a request of ``replica`` of ``cluster`` for ``destination`` at ``now``
        (monotonic seconds) by :func:`~rwrouter.routing.ha.elect`, and record the outcome."""
        key, who = _digest(destination, cluster), _digest(replica).hex()
        names = (destination, cluster, replica)
        with self._lock:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                return self._decide(key, who, names, now, failover_timeout)
            finally:
                if self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def leaders(self, now: float) -> list[Elected]:
        """Every (destination, cluster) in the table with its elected replica, in slot order,
        ``now``: monotonic seconds (a leader silent for longer than its timeout is listed
        until another replica sends or its slot is reused). The table is copied under the
        locks (2 MiB: about a millisecond) and read outside them (about 2 ms empty, 10 ms with
        4,000 clusters), so a scrape holds up decisions for the copy only."""
        with self._lock:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_SH)
            try:
                table = self._map[:]
            finally:
                if self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
        found: list[Elected] = []
        for offset in range(0, len(table), SLOT.size):
            if table[offset : offset + 16] == _FREE:
                continue
            _, _, seen, _, _, nd, nc, nr, d, c, r = SLOT.unpack_from(table, offset)
            found.append(
                Elected(
                    d[:nd].decode("utf-8", "replace"),
                    c[:nc].decode("utf-8", "replace"),
                    r[:nr].decode("utf-8", "replace"),
                    max(0.0, now - seen),
                )
            )
        return found

    def _decide(
        self, key: bytes, who: str, names: tuple[str, str, str], now: float, failover_timeout: float
    ) -> Decision:
        slot, found = self._find(key, now)
        if slot is None:
            return Decision(Verdict.UNLABELED, full=True)
        leader, name = None, None
        if found:
            _, elected, seen, since, _, _, _, length, _, _, raw = SLOT.unpack_from(self._map, slot)
            leader = Leader(elected.hex(), seen, since)
            name = raw[:length].decode("utf-8", "replace")
        verdict, after = elect(leader, replica=who, now=now, failover_timeout=failover_timeout)
        if after is not leader:
            destination, cluster, replica = names
            texts = (
                _cut(destination, _DESTINATION_BYTES),
                _cut(cluster, _NAME_BYTES),
                _cut(replica, _NAME_BYTES),
            )
            SLOT.pack_into(
                self._map,
                slot,
                key,
                bytes.fromhex(after.replica),
                after.seen,
                after.elected,
                failover_timeout,
                *(len(text) for text in texts),
                *texts,
            )
        if verdict is Verdict.ELECTED and leader is not None:
            return Decision(verdict, previous=name, silent=now - leader.seen)
        return Decision(verdict)

    def _find(self, key: bytes, now: float) -> tuple[int | None, bool]:
        """(offset of ``key``'s slot, True) when it is in the table; else (offset of the first
        free or stale slot on its probe path, False), or (None, False) when there is none."""
        start = int.from_bytes(key[:8], "little") % self._slots
        spare = None
        for step in range(self._slots):
            offset = (start + step) % self._slots * SLOT.size
            held, _, seen, _, timeout = SLOT.unpack_from(self._map, offset)[:5]
            if held == key:
                return offset, True
            if held == _FREE:
                return (offset if spare is None else spare), False
            if spare is None and now - seen > timeout:
                spare = offset
        return spare, False


def ha_state(routes: Sequence[Route], table: ElectionTable) -> tuple[HaSettings, HaLeaders]:
    """The source of ``/metrics``' HA families (:class:`~rwrouter.metrics.ha.HaCollector`):
    the settings of ``routes`` with ``ha_dedup``, and the table's elected replicas of those
    destinations with the unix time (seconds) of their last request, read now."""
    settings = {
        route.name: (ha.cluster_label, ha.replica_label, ha.failover_timeout)
        for route in routes
        if (ha := route.ha_dedup) is not None
    }
    if not settings:
        return {}, ()
    stored = {_cut(name, _DESTINATION_BYTES).decode(): name for name in settings}
    wall, now = time.time(), time.monotonic()
    leaders = [
        (stored[e.destination], e.cluster, e.replica, wall - e.silent)
        for e in table.leaders(now)
        if e.destination in stored
    ]
    return settings, leaders


def apply_ha(
    routed: RoutedRequest,
    data: bytes,
    *,
    rw2: bool,
    routes: Sequence[Route],
    table: ElectionTable,
    now: float,
) -> None:
    """Apply each ``ha_dedup`` route's election to a routed request (``data``: its
    decompressed body, RW 2.0 with ``rw2``): a route whose replica is not elected gets an empty
    share, its samples counted in ``routed.dropped`` (``ha_replica``, counted once the request
    is accepted). Elections are counted (``table.metrics``:
    ``rwrouter_ha_leader_changes_total``) and logged.
    Raises DecodeError when the first series cannot be read (a routed request can)."""
    labels: dict[str, str] | None = None
    for i, route in enumerate(routes):
        ha = route.ha_dedup
        if ha is None:
            continue
        if labels is None:
            labels = first_series_labels(data, rw2=rw2)
        pair = ha_labels(labels, cluster_label=ha.cluster_label, replica_label=ha.replica_label)
        if pair is None:
            continue
        cluster, replica = pair
        decision = table.decide(
            destination=route.name,
            cluster=cluster,
            replica=replica,
            now=now,
            failover_timeout=ha.failover_timeout,
        )
        if decision.verdict is Verdict.ELECTED:
            _elected(route, cluster, replica, decision, table.metrics)
        elif decision.full:
            log.warning(
                kv(
                    msg="ha_dedup: election table full, request taken without an election",
                    destination=route.name,
                    cluster=cluster,
                    max_clusters=MAX_CLUSTERS,
                )
            )
        if not decision.verdict.taken:
            share = routed.shares[i]
            if share.samples:
                key = (i, DropReason.HA_REPLICA)
                routed.dropped[key] = routed.dropped.get(key, 0) + share.samples
            routed.shares[i] = Frames(b"", b"", 0, 0)


def _elected(
    route: Route, cluster: str, replica: str, decision: Decision, m: SendMetrics | None
) -> None:
    if m is not None and not route.shadow:
        m.ha_leader_changes.labels(route.name, cluster).inc()
    if decision.previous is None:
        log.info(
            kv(
                msg="ha_dedup: replica elected",
                destination=route.name,
                cluster=cluster,
                replica=replica,
            )
        )
        return
    log.warning(
        kv(
            msg="ha_dedup: failover: the elected replica was silent, another one elected",
            destination=route.name,
            cluster=cluster,
            replica=replica,
            previous=decision.previous,
            silent_seconds=round(decision.silent, 3),
        )
    )
