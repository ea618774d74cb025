"""The fan-out service: routes each decoded write request and appends it to every
destination's durable queue.

Admission is all-or-nothing: when a destination with ``on_full: backpressure`` that would
receive part of a request has no room on disk, nothing of the request is kept anywhere and the
receive side answers 503 (the sender retries the whole request from its WAL), so a full queue
never loses acknowledged data and never duplicates part of a request. A destination with
``on_full: drop_oldest`` makes room by dropping its oldest queued data (counted) instead.
The request is acknowledged only once every share is durable (``storage.fsync``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from rwrouter.audit.live import Audit
from rwrouter.config import Config
from rwrouter.config.model import OnFull
from rwrouter.errors import StorageError, TooLargeError
from rwrouter.logs import kv
from rwrouter.metrics import AuditMetrics, CacheMetrics, Metrics, SendMetrics
from rwrouter.metrics.names import MetricNameShares
from rwrouter.pipeline.appends import append_all, storage_error
from rwrouter.pipeline.build import build_destination
from rwrouter.pipeline.destination import Destination
from rwrouter.pipeline.ha import ElectionTable, apply_ha, ha_state
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE, Written
from rwrouter.queue.records import FLAG_START_TIMESTAMPS, EncodedShare, encode_share
from rwrouter.reasons import DropReason
from rwrouter.routing import RoutedRequest, Router, budget_states, build_router
from rwrouter.routing.build import StoreOf
from rwrouter.routing.ha import share_group
from rwrouter.routing.tenants import DEFAULT_MAX_TENANTS, Tenants
from rwrouter.wire import decompress

log = logging.getLogger("rwrouter.fanout")


@dataclass(frozen=True, slots=True)
class Accepted:
    """What happened to one request: ``full`` names the destinations without room (then
    nothing was enqueued); ``series``/``samples`` count what was received. ``written``: for
    an RW 2.0 request, what it carried (the counts of its Written headers), else None."""

    full: tuple[str, ...]
    series: int
    samples: int
    metadata: int
    written: Written | None = None


@dataclass(frozen=True, slots=True)
class Decoded:
    """A request decoded and routed, with each destination's share encoded as queue records
    (in config order). ``written``: for an RW 2.0 request, the samples, histograms and
    exemplars it carried (all accepted once enqueued, even those the rules drop), else
    None. ``tenant``: the request's (None: none)."""

    routed: RoutedRequest
    shares: list[EncodedShare]
    generation: int = 0
    written: Written | None = None
    tenant: str | None = None


class Stale(Exception):
    """The configuration was reloaded while the request was being decoded: decode it again."""


class FanOut:
    """The router's core service: a :class:`Router` (with its tenants' routers:
    :class:`~rwrouter.routing.tenants.Tenants`) and its destinations.

    A reload (:mod:`rwrouter.pipeline.reload`) swaps both between requests: it pauses new
    appends (:meth:`paused`), waits for those in progress, swaps, and bumps ``generation``; a
    request decoded under an older generation is decoded again (:class:`Stale`).
    """

    def __init__(
        self,
        *,
        router: Router,
        destinations: list[Destination],
        cache_metrics: CacheMetrics,
        send_metrics: SendMetrics,
        audit_metrics: AuditMetrics,
        audit: Audit | None = None,
        max_tenants: int = DEFAULT_MAX_TENANTS,
        elections: ElectionTable | None = None,
        stores: StoreOf | None = None,
    ) -> None:
        """``router``: its routes are ``destinations`` (in order) followed by the shadow
        destinations (counted by ``audit``, never sent). The fan-out counts the routing
        cache (``cache_metrics``), what admission and the rules dropped (``send_metrics``),
        and is the source of the audit's and the name shares' families (``audit_metrics``).
        ``max_tenants``: routers for tenants at most (``relabel_cache.max_tenants``).
        ``elections``: ``ha_dedup``'s (:mod:`rwrouter.pipeline.ha`; None: a new one).
        ``stores``: where the series budgets are shared (the workers'
        :class:`~rwrouter.pipeline.budgets.BudgetTables`; None: in this process), for the
        routers of reloads."""
        self.stores = stores
        self.elections = elections if elections is not None else ElectionTable()
        self.elections.metrics = send_metrics
        tenants = Tenants(router, max_tenants=max_tenants)
        self._state = (0, tenants, destinations)  # swapped whole: decode threads read it
        self._send_metrics, self._cache_metrics = send_metrics, cache_metrics
        self._hits = self._misses = 0
        self._active = 0  # accepts in progress
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()  # cleared while a reload swaps destinations
        self._open.set()
        cache_metrics.watch(
            entries=lambda: len(self.tenants),
            nbytes=lambda: self.tenants.cached_bytes,
            hit_ratio=lambda: self.tenants.hit_ratio,
        )
        self.names = MetricNameShares()
        audit_metrics.name_shares.source = self.names.top
        self.audit = audit or Audit(Config(remote_write=()), now=time.monotonic())
        audit_metrics.totals.source = lambda: self.audit.totals(time.monotonic())
        audit_metrics.budgets.source = lambda: budget_states(self.router, time.monotonic())
        send_metrics.ha.source = lambda: ha_state(self.router.routes, self.elections)

    @property
    def generation(self) -> int:
        """Bumped by every :meth:`swap`."""
        return self._state[0]

    @property
    def tenants(self) -> Tenants:
        """The routers: for requests without a tenant and per tenant."""
        return self._state[1]

    @property
    def router(self) -> Router:
        """The router of requests without a tenant."""
        return self._state[1].router

    @property
    def destinations(self) -> list[Destination]:
        """The destinations, in config order."""
        return self._state[2]

    @property
    def failed(self) -> list[str]:
        """The names of the destinations whose senders stopped on a bug
        (:attr:`Destination.failed`), in config order."""
        return [dest.name for dest in self.destinations if dest.failed]

    def swap(self, router: Router, destinations: list[Destination], config: Config) -> None:
        """Install a new router and destination list (inside :meth:`paused`) of ``config``
        (the audit follows it)."""
        self._count_cache()
        tenants = Tenants(router, max_tenants=config.relabel_cache.max_tenants)
        self._state = (self.generation + 1, tenants, destinations)
        self.audit.configure(config, now=time.monotonic())
        self.names.forget([dest.name for dest in destinations])
        self._hits = self._misses = 0

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """Hold new appends back and wait for those in progress; resume on exit."""
        self._open.clear()
        try:
            await self._idle.wait()
            yield
        finally:
            self._open.set()

    def decode(
        self,
        body: bytes,
        *,
        max_decoded_bytes: int,
        message: str = RW1_MESSAGE,
        tenant: str | None = None,
    ) -> Decoded:
        """Decompress, parse and route one request body carrying ``message``
        (:data:`~rwrouter.protocol.RW1_MESSAGE` or :data:`~rwrouter.protocol.RW2_MESSAGE`: an
        RW 2.0 request is routed as its RW1 form, :mod:`rwrouter.wire.rw2_in`), and
        encode each destination's share as queue records (``FLAG_START_TIMESTAMPS`` when the
        request carried start timestamps; cut by shard for the destination's shards now:
        :func:`~rwrouter.queue.records.encode_share`). ``tenant``: the request's
        (:func:`rwrouter.config.tenant.request_tenant`), whose router routes it
        (:meth:`~rwrouter.routing.tenants.Tenants.for_tenant`) and which the records of a
        destination with a ``tenant_header`` store (``FLAG_TENANT``). CPU-bound and independent of
        the queues: the server runs it in a worker thread, so the event loop stays responsive.

        Raises DecodeError / TooLargeError (see :func:`rwrouter.wire.decompress` and
        :func:`rwrouter.wire.rw2_in.to_rw1_py`: ``max_decoded_bytes`` bounds an RW 2.0
        request's RW1 form too).
        """
        generation, tenants, destinations = self._state  # one read: consistent with each other
        router = tenants.for_tenant(tenant)
        data = decompress(body, max_decoded_bytes=max_decoded_bytes)
        now = time.monotonic()
        rw2 = message == RW2_MESSAGE  # its RW1 form bounded too
        routed = router.route(data, now=now, rw2=rw2, max_bytes=max_decoded_bytes)
        if router.ha_dedup:  # HA pairs: only the elected replica's share goes on
            apply_ha(routed, data, rw2=rw2, routes=router.routes, table=self.elections, now=now)
        written, flags = routed.written, FLAG_START_TIMESTAMPS if routed.start_timestamps else 0
        sent = routed.shares[: len(destinations)]  # then the shadow destinations' shares
        if self.names.due(now):  # one request a second: names for the status page
            self.names.observe([dest.name for dest in destinations], sent)
        received_ms = int(time.time() * 1000)
        shares = [
            encode_share(
                share,
                received_ms=received_ms,
                max_body_bytes=dest.max_request_bytes,
                flags=flags,
                tenant=tenant if dest.config.tenant_header else None,
                shards=dest.shard_count,
                group=share_group(share),
            )
            for share, dest in zip(sent, destinations, strict=True)
        ]
        return Decoded(routed, shares, generation, written, tenant)

    async def accept(self, decoded: Decoded) -> Accepted:
        """Append a decoded request to every destination's disk queue, or to none if one with
        ``on_full: backpressure`` has no room (all or nothing). Returns once the shares are
        durable (``storage.fsync``).

        Raises TooLargeError when a destination's share holds a series larger than its
        ``max_request_bytes``, or is larger than its whole disk queue (it could never be
        accepted: 413, not 503 forever; nothing of the request is kept for any
        destination); StorageError when a queue could not be written (the request is not
        acknowledged); Stale after a reload (decode again).
        """
        await self._open.wait()
        if decoded.generation != self.generation:
            raise Stale
        self._active += 1
        self._idle.clear()
        try:
            return await self._accept(decoded)
        finally:
            self._active -= 1
            if not self._active:
                self._idle.set()

    async def _accept(self, decoded: Decoded) -> Accepted:
        self._count_cache()
        routed = decoded.routed
        pairs = list(zip(self.destinations, decoded.shares, strict=True))
        for dest, share in pairs:
            if share.too_large:  # it could never be sent: refused whole, as the next one
                raise TooLargeError(
                    f"a series of {share.too_large_bytes} bytes is over destination "
                    f"{dest.name}'s max_request_bytes of {dest.max_request_bytes} bytes"
                )
            if share.nbytes and not dest.fits(share.nbytes):
                raise TooLargeError(
                    f"request carries {share.total_samples} samples ({share.nbytes} bytes) for "
                    f"destination {dest.name}, more than its whole disk queue holds"
                )
        m = self._send_metrics
        counts = (routed.series_in, routed.samples_in, routed.metadata_in)
        full = tuple(
            dest.name
            for dest, share in pairs
            if share.nbytes
            and dest.on_full == OnFull.BACKPRESSURE
            and not dest.has_room(share.nbytes)
        )
        if full:
            for dest, share in pairs:
                if dest.name in full:
                    samples = share.total_samples
                    m.dropped_samples.labels(dest.name, DropReason.QUEUE_FULL).inc(samples)
                    dest.note_full(samples)
            return Accepted(full, *counts, written=decoded.written)
        writes = [(dest, share) for dest, share in pairs if share.nbytes]
        reserved: list[tuple[Destination, EncodedShare]] = []
        try:
            for dest, share in writes:
                if not dest.has_room(share.nbytes):
                    dest.make_room(share.nbytes)
                dest.reserve(share.nbytes)
                reserved.append((dest, share))
        except OSError as exc:  # making room failed: give back what was reserved
            for dest, share in reserved:
                dest.release(share.nbytes)
            raise storage_error(exc) from exc
        results = await append_all(writes)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            for (dest, share), result in zip(writes, results, strict=True):
                if isinstance(result, int):  # written: take it back if still possible
                    with contextlib.suppress(OSError):
                        await dest.cancel(result, share)
            error = failed[0]
            if not isinstance(error, OSError | StorageError):
                raise error
            raise storage_error(error) from error
        if self.audit.audited:  # accepted: count the audited destinations' shares (shadow too)
            names = [route.name for route in self.router.routes]
            self.audit.observe(list(zip(names, routed.shares, strict=True)), time.monotonic())
        self._accepted(decoded)
        return Accepted((), *counts, written=decoded.written)

    def _accepted(self, decoded: Decoded) -> None:
        """After an accepted request: each destination's metadata, and what was dropped on
        the way counted (the rules' drops, invalid metadata)."""
        routed, m = decoded.routed, self._send_metrics
        for i, dest in enumerate(self.destinations):
            dest.enqueue_metadata(routed.metadata[i], tenant=decoded.tenant)
        sending = len(self.destinations)
        for (i, reason), samples in routed.dropped.items():
            if i < sending:  # not the shadow destinations': they send nothing
                m.dropped_samples.labels(self.destinations[i].name, reason).inc(samples)
        if routed.metadata_invalid:
            for dest in self.destinations:
                m.dropped_metadata.labels(dest.name, DropReason.INVALID).inc(
                    routed.metadata_invalid
                )

    def _count_cache(self) -> None:
        router, m = self.tenants, self._cache_metrics
        if router.hits != self._hits:
            m.lookups.labels("hit").inc(router.hits - self._hits)
            self._hits = router.hits
        if router.misses != self._misses:
            m.lookups.labels("miss").inc(router.misses - self._misses)
            self._misses = router.misses
        counts: dict[tuple[str, str], int] = {}
        reports, suppressed = [], 0
        for one in router.routers:
            its_counts, its_reports, its_suppressed = one.take_collisions()
            for key, count in its_counts.items():
                counts[key] = counts.get(key, 0) + count
            reports += its_reports
            suppressed += its_suppressed
        for (name, kind), count in counts.items():
            m.name_collisions.labels(name, kind).inc(count)
        for c in reports:
            log.warning(
                kv(
                    destination=c.destination,
                    kind=c.kind,
                    escaped=c.escaped,
                    kept=c.kept,
                    dropped=c.dropped,
                    msg="names collide after escaping: the later one is not sent",
                )
            )
        if suppressed:
            log.warning(
                kv(
                    collisions=suppressed,
                    msg="more name collisions this minute, not logged",
                )
            )

    async def start(self) -> None:
        """Start every destination's senders."""
        for dest in self.destinations:
            await dest.start()

    async def stop(self, *, timeout: float) -> None:
        """Drain every destination, all at once, for up to ``timeout`` seconds; then stop."""
        await asyncio.gather(*(dest.stop(timeout=timeout) for dest in self.destinations))


async def build_fanout(
    config: Config,
    metrics: Metrics,
    *,
    elections: ElectionTable | None = None,
    stores: StoreOf | None = None,
) -> FanOut:
    """Build the router and one :class:`Destination` per ``remote_write`` entry;
    ``elections``: the HA election table (None: one in memory); ``stores``: the series
    budgets' shared tables (None: each budget in memory).

    Raises ConfigError / CredentialsError when a destination's auth cannot be set up.
    """
    destinations = [
        await build_destination(dest, i, storage=config.storage, metrics=metrics)
        for i, dest in enumerate(config.remote_write)
        if not dest.shadow
    ]
    return FanOut(
        router=build_router(config, stores=stores),
        destinations=destinations,
        cache_metrics=metrics.cache,
        send_metrics=metrics.send,
        audit_metrics=metrics.audit,
        audit=Audit(config, now=time.monotonic()),
        max_tenants=config.relabel_cache.max_tenants,
        elections=elections,
        stores=stores,
    )
