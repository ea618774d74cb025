"""One destination: a bounded in-memory queue split into shards, a sender per shard, retries.

Per-series order: a series always goes to the same shard (hash of its label set) and a shard
has one batch in flight at a time, retried until it succeeds or is refused, so a later sample of
a series can never overtake an earlier one (RW 1.0 spec). A full queue is never a silent loss:
:meth:`Destination.has_room` lets the receive side answer 503 before anything is enqueued.

Shards are dynamic between ``min_shards`` and ``max_shards``, as in Prometheus: every
``reshard_interval`` seconds the needed number is computed from the send time per sample and the
incoming rate (:func:`~rwrouter.sending.batching.desired_shards`); to change it, every sender
finishes its batch in flight, the waiting frames are re-hashed into the new shards in order
(:func:`~rwrouter.sending.batching.reshard`), and new senders start.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine
from contextlib import suppress
from typing import Any

from rwrouter.auth.schemes import Authenticator
from rwrouter.auth.sigv4 import REMOTE_WRITE_HEADERS
from rwrouter.config import DestinationConfig
from rwrouter.metrics import Metrics
from rwrouter.routing import RoutedSeries
from rwrouter.sending.batching import ShardBuffer, desired_shards, reshard, shard_of
from rwrouter.sending.delivery import Deliverer
from rwrouter.sending.retry import RetryPolicy
from rwrouter.sending.transport import Transport

log = logging.getLogger("rwrouter.sending")

METADATA_QUEUE_LIMIT = 10_000  # entries; Prometheus resends all metadata every minute anyway
RESHARD_INTERVAL = 10.0  # seconds, as Prometheus's shardUpdateDuration


class Destination:
    """A remote_write destination's queue and senders.

    ``capacity`` (samples) = ``queue_config.capacity`` x ``max_shards`` (Prometheus's capacity
    is per shard). Clocks, randomness and sleep are injectable for tests.
    """

    def __init__(
        self,
        *,
        config: DestinationConfig,
        transport: Transport,
        auth: Authenticator,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], Coroutine[Any, Any, None]] = asyncio.sleep,
        reshard_interval: float = RESHARD_INTERVAL,
    ) -> None:
        self.config = config
        self.name = config.name
        q = config.queue_config
        self.capacity = q.capacity * q.max_shards
        self.capacity_bytes = q.max_memory_bytes
        self._transport = transport
        self.auth = auth
        self._metrics = metrics
        self._clock = clock
        self._deliverer = Deliverer(
            name=config.name,
            transport=transport,
            auth=auth,
            policy=RetryPolicy(
                min_backoff=q.min_backoff,
                max_backoff=q.max_backoff,
                retry_on_http_429=q.retry_on_http_429,
            ),
            base_headers={**dict(config.headers), **REMOTE_WRITE_HEADERS},
            metrics=metrics,
            clock=clock,
            wall_clock=wall_clock,
            rand=rand,
            sleep=sleep,
        )
        self._shards = [ShardBuffer() for _ in range(q.min_shards)]
        self._wake = [asyncio.Event() for _ in self._shards]
        self._metadata: deque[bytes] = deque()
        self._metadata_wake = asyncio.Event()
        self._shard_tasks: list[asyncio.Task[None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._closed = asyncio.Event()  # set with _closing: ends the resharding loop
        self._reshard_task: asyncio.Task[None] | None = None
        self._pausing = False
        self._reshard_interval = reshard_interval
        self._stats = _IntervalStats()
        self.pending = 0
        self.pending_bytes = 0
        self.abandoned = 0  # samples given up at shutdown (in flight or still queued)
        metrics.queue_capacity.labels(self.name).set(self.capacity)
        metrics.shards.labels(self.name).set(len(self._shards))
        metrics.watch(metrics.queue_samples, lambda: self.pending, self.name)
        metrics.watch(metrics.queue_bytes, lambda: self.pending_bytes, self.name)
        metrics.queue_capacity_bytes.labels(self.name).set(self.capacity_bytes)
        metrics.credentials_expiry.sources[self.name] = auth.expiry

    def fits(self, samples: int, nbytes: int) -> bool:
        """Whether a request's share of ``samples`` and ``nbytes`` could ever fit the queue."""
        return samples <= self.capacity and nbytes <= self.capacity_bytes

    def has_room(self, samples: int, nbytes: int) -> bool:
        """Whether ``samples`` more samples and ``nbytes`` more bytes fit in the queue now."""
        return (
            self.pending + samples <= self.capacity
            and self.pending_bytes + nbytes <= self.capacity_bytes
        )

    def enqueue(self, routed: RoutedSeries, metadata: list[bytes]) -> None:
        """Add routed series (and metadata entries) to the shards. Never blocks, never awaits."""
        now = self._clock()
        shards, wake = self._shards, self._wake
        n_shards = len(shards)
        batch_full = self.config.queue_config.max_samples_per_send
        for frame, key, count in zip(routed.frames, routed.keys, routed.counts, strict=True):
            i = shard_of(key, n_shards)
            buf = shards[i]
            if not buf.frames or buf.samples + count >= batch_full:
                wake[i].set()
            buf.add(frame, count, now=now, key=key)
        self.pending += routed.samples
        self.pending_bytes += routed.nbytes
        self._stats.samples_in += routed.samples
        if metadata and self.config.metadata_config.send:
            overflow = len(self._metadata) + len(metadata) - METADATA_QUEUE_LIMIT
            for _ in range(max(0, overflow)):
                self.pending_bytes -= len(self._metadata.popleft())
            if overflow > 0:
                self._metrics.dropped_metadata.labels(self.name, "queue_full").inc(overflow)
            self._metadata.extend(metadata)
            self.pending_bytes += self.metadata_bytes(metadata)
            self._metadata_wake.set()

    def metadata_bytes(self, metadata: list[bytes]) -> int:
        """The queue bytes these metadata entries would take (0 when metadata is not sent)."""
        return sum(map(len, metadata)) if self.config.metadata_config.send else 0

    def refused(self, samples: int) -> None:
        """Note samples refused (503) for want of room: they are demand all the same, and the
        resharding decision must see it."""
        self._stats.samples_in += samples

    @property
    def shards(self) -> int:
        """The number of shards (concurrent senders) now."""
        return len(self._shards)

    async def start(self) -> None:
        """Open the transport and start the senders: one per shard, metadata, resharding."""
        await self._transport.start()
        self._start_shards()
        self._tasks = [asyncio.create_task(self._metadata_loop())]
        self._reshard_task = asyncio.create_task(self._reshard_loop())

    def _start_shards(self) -> None:
        self._shard_tasks = [
            asyncio.create_task(self._shard_loop(i)) for i in range(len(self._shards))
        ]
        self._metrics.shards.labels(self.name).set(len(self._shards))

    async def stop(self, *, timeout: float) -> int:
        """Send what is queued for up to ``timeout`` seconds, then stop; returns the number of
        samples abandoned (counted as dropped, reason ``shutdown``)."""
        self._closing = True
        self._closed.set()
        deadline = self._clock() + timeout
        if self._reshard_task is not None:  # a resharding under way completes first...
            await asyncio.wait([self._reshard_task], timeout=timeout)
            self._reshard_task.cancel()  # ...unless a sender is stuck retrying: then stop it
            await asyncio.gather(self._reshard_task, return_exceptions=True)
        for event in (*self._wake, self._metadata_wake):
            event.set()
        tasks = [*self._shard_tasks, *self._tasks]
        if tasks:
            remaining = max(0.0, deadline - self._clock())
            _, running = await asyncio.wait(tasks, timeout=remaining)
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        await self._transport.close()
        if self.pending:
            self._metrics.dropped_samples.labels(self.name, "shutdown").inc(self.pending)
            self.abandoned += self.pending
        if self.abandoned:
            log.warning("destination=%s abandoned_samples=%d msg=%s", self.name, self.abandoned,
                        '"queue not drained before the shutdown timeout"')  # fmt: skip
        return self.abandoned

    async def _shard_loop(self, i: int) -> None:
        buf, wake = self._shards[i], self._wake[i]
        q = self.config.queue_config
        while not self._pausing:
            if not buf.frames:
                if self._closing:
                    return
                wake.clear()
                await wake.wait()
                continue
            now = self._clock()
            deadline = 0.0 if self._closing else q.batch_send_deadline
            if not buf.ready(max_samples=q.max_samples_per_send, deadline=deadline, now=now):
                wake.clear()
                assert buf.first_at is not None
                with suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), deadline - (now - buf.first_at))
                continue
            items, samples, keys_bytes = buf.take(max_samples=q.max_samples_per_send)
            started = self._clock()
            try:
                delivered = await self._deliverer.deliver(items, "samples")
                if delivered:
                    self._metrics.sent_samples.labels(self.name).inc(delivered)
                    self._stats.delivered(delivered, self._clock() - started)
            except asyncio.CancelledError:  # the drain timeout ended this batch in flight
                self._metrics.dropped_samples.labels(self.name, "shutdown").inc(samples)
                self.abandoned += samples
                raise
            finally:
                self.pending -= samples
                self.pending_bytes -= sum(len(frame) for frame, _ in items) + keys_bytes

    async def _reshard_loop(self) -> None:
        """Every ``reshard_interval`` seconds, change the shard count if the load asks for it."""
        q = self.config.queue_config
        while not self._closing:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), self._reshard_interval)
            stats, self._stats = self._stats, _IntervalStats()
            failures, self._deliverer.failures = self._deliverer.failures, 0
            if failures or self._closing:
                continue  # more senders do not help a failing destination
            wanted = desired_shards(
                current=len(self._shards), min_shards=q.min_shards, max_shards=q.max_shards,
                samples_in=stats.samples_in, samples_out=stats.samples_out,
                send_seconds=stats.send_seconds, pending=self.pending,
                interval=self._reshard_interval,
            )  # fmt: skip
            if wanted != len(self._shards):
                await self._reshard(wanted)

    async def _reshard(self, shards: int) -> None:
        """Let every sender finish its batch in flight, re-hash what waits, restart senders."""
        log.info("destination=%s msg=%s from=%d to=%d", self.name, '"resharding"',
                 len(self._shards), shards)  # fmt: skip
        self._pausing = True
        for event in self._wake:
            event.set()
        await asyncio.gather(*self._shard_tasks, return_exceptions=True)
        # Even when stop() came meanwhile, restart the senders: they drain what waits.
        self._shards = reshard(self._shards, shards)  # no await from here: enqueue waits
        self._wake = [asyncio.Event() for _ in self._shards]
        for event in self._wake:
            event.set()
        self._pausing = False
        self._start_shards()

    async def _metadata_loop(self) -> None:
        limit = self.config.metadata_config.max_samples_per_send
        while True:
            if not self._metadata:
                if self._closing:
                    return
                self._metadata_wake.clear()
                await self._metadata_wake.wait()
                continue
            batch = [(self._metadata.popleft(), 1) for _ in range(min(limit, len(self._metadata)))]
            try:
                delivered = await self._deliverer.deliver(batch, "metadata")
            finally:
                self.pending_bytes -= sum(len(entry) for entry, _ in batch)
            if delivered:
                self._metrics.sent_metadata.labels(self.name).inc(delivered)


class _IntervalStats:
    """What happened since the last resharding decision."""

    __slots__ = ("samples_in", "samples_out", "send_seconds")

    def __init__(self) -> None:
        self.samples_in = self.samples_out = 0
        self.send_seconds = 0.0

    def delivered(self, samples: int, seconds: float) -> None:
        self.samples_out += samples
        self.send_seconds += seconds
