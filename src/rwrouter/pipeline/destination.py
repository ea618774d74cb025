"""One destination: a durable queue on disk, read ahead into shards, a sender per shard.

Flow: the receive side appends a request's share (records, :mod:`rwrouter.queue.records`) to the
destination's :class:`~rwrouter.queue.diskqueue.DiskQueue` and answers 204 once that is written
(``storage.fsync: interval``) or fsynced (``always``). A reader (:mod:`rwrouter.send.reader`)
reads records in order into the in-memory read-ahead (``capacity`` samples per running shard and
``max_memory_bytes``) and hands each series to its shard; each shard sends batches, one in
flight at a time (:mod:`rwrouter.send.shards`, which also changes the number of shards). A
record is done when all its series are delivered or refused for good (refused ones go to the
dead-letter store); the queue position advances over done records in order, so a crash re-sends
only records not yet done.

A bug in the send path stops the destination's senders (:attr:`Destination.failed`: logged
once, ``rwrouter_destination_failed`` 1, ``/-/ready`` 503); its queue stays on disk until a
reload replaces the destination or a restart (:meth:`rwrouter.send.shards.Shards._fail`).

This module holds the write side and the lifecycle: admission and appends (with the fsync
policy), metrics registration, start and stop.

Metadata entries are kept in memory only (Prometheus sends all metadata again every minute).
An RW 1.0 destination sends them in metadata-only requests (:mod:`rwrouter.send.metadata`,
``metadata_config``); an RW 2.0 one (``protobuf_message: io.prometheus.write.v2.Request``)
keeps the latest per family in its metadata book (:mod:`rwrouter.send.metabook`) and sends
it inside each series, never alone (Prometheus: ``metadata_config.send`` is ignored with
RW 2.0). An RW 2.0 destination that turns out not to speak it (see
:mod:`rwrouter.send.delivery`) gets RW 1.0 from then on, metadata requests included (what
the book holds, once, then what comes), until :meth:`Destination.try_configured_protocol`
(a reload).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from rwrouter.auth.schemes import Authenticator
from rwrouter.config import DestinationConfig, StorageConfig
from rwrouter.config.model import Fsync, OnFull
from rwrouter.deadletter.writer import DeadLetters
from rwrouter.errors import InvariantError, StorageError
from rwrouter.logs import kv
from rwrouter.metrics import Metrics
from rwrouter.protocol import MESSAGES, RW1_MESSAGE, RW2_MESSAGE
from rwrouter.queue.records import EncodedShare
from rwrouter.reasons import DropReason
from rwrouter.send.delivery import Deliverer
from rwrouter.send.metadata import MetadataQueue
from rwrouter.send.pacer import Pacer
from rwrouter.send.reader import QueueReader

log = logging.getLogger("rwrouter.sending")


class Destination:
    """A remote_write destination's durable queue and senders (see the module docstring),
    from its parts (:func:`rwrouter.pipeline.build.make_destination` builds them): the
    ``reader`` (its disk queue, its shards and their stop), the ``deliverer`` (its HTTP
    client, opened and closed with it, and its metadata book), ``auth`` (its authenticator:
    the credentials' expiry is shown), the ``pacer`` (None: not paced; its settings are
    shown), the ``dead_letters`` writer (its store) and the ``metadata`` queue. The
    destination subscribes to the deliverer's protocol changes.

    Admission (event loop): :meth:`fits`, :meth:`has_room`, :meth:`make_room`, :meth:`reserve`,
    then ``await`` :meth:`append`. ``clock``: monotonic seconds (the stop's deadline);
    ``wall_clock``: unix seconds (the age of the oldest unsent record). ``metrics``: the
    destination's series are in several groups (queue, send, dead letters, credential
    expiry), shown at start; :meth:`~rwrouter.metrics.Metrics.forget_destination` removes them.
    """

    def __init__(
        self,
        *,
        config: DestinationConfig,
        storage: StorageConfig,
        reader: QueueReader,
        deliverer: Deliverer,
        auth: Authenticator,
        pacer: Pacer | None,
        dead_letters: DeadLetters,
        metadata: MetadataQueue,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config, self.name, self.storage = config, config.name, storage
        self.queue, self.dead_letter_store = reader.queue, dead_letters.store
        self.capacity_bytes = reader.capacity_bytes
        self.auth, self.book, self._pacer = auth, deliverer.book, pacer
        self._reader, self._shards, self._stopping = reader, reader.shards, reader.stopping
        self._deliverer, self._dead_letters, self._metadata = deliverer, dead_letters, metadata
        self._metrics, self._send_metrics = metrics, metrics.send
        self._clock, self._wall = clock, wall_clock
        deliverer.on_protocol = self._protocol_changed
        self._tasks: list[asyncio.Task[None]] = []  # reader, metadata sender, fsync timer
        self._sync_lock = asyncio.Lock()
        self._started = self._stopped = False

    @property
    def capacity(self) -> int:
        """Samples the read-ahead may hold now (per running shard: it follows resharding)."""
        return self._reader.capacity

    @property
    def pending(self) -> int:
        """Samples read ahead into memory (waiting in a shard or in flight)."""
        return self._reader.pending

    @property
    def pending_bytes(self) -> int:
        """The frame bytes of :attr:`pending`."""
        return self._reader.pending_bytes

    def _register_metrics(self) -> None:
        """Point this destination's gauges at this object (at start: a reload that fails
        leaves the running destination's gauges alone)."""
        m, name, q_ = self._metrics, self.name, self.config.queue_config
        queue, send, rejected = m.queue, m.send, m.deadletter
        m.watch(queue.capacity_samples, lambda: self.capacity, name)
        queue.capacity_bytes.labels(name).set(self.capacity_bytes)
        queue.disk_capacity_bytes.labels(name).set(q_.max_disk_bytes)
        send.shards.labels(name).set(len(self._shards))
        send.destination_failed.labels(name).set(0)
        if self._pacer is not None:
            self._pacer.show()
        else:
            send.forget_pacing(name)
        m.watch(queue.samples, lambda: self.pending, name)
        m.watch(queue.memory_bytes, lambda: self.pending_bytes + self._metadata.nbytes, name)
        m.watch(queue.disk_bytes, lambda: self.queue.size_bytes, name)
        m.watch(queue.blocks, lambda: self.queue.unread_records + self._reader.in_memory, name)
        m.watch(queue.unsent_samples, lambda: self.queue.unread_samples + self.pending, name)
        m.watch(queue.oldest_age, self.oldest_unsent_age, name)
        m.watch(rejected.store_bytes, lambda: self.dead_letter_store.size_bytes, name)
        m.watch(rejected.store_entries, lambda: len(self.dead_letter_store), name)
        m.process.credentials_expiry.sources[name] = self.auth.expiry
        self._show_protocol()

    @property
    def protocol(self) -> str:
        """The protobuf message samples go out in now (the configured one, or RW 1.0 after
        a fallback)."""
        return self._deliverer.message

    def _show_protocol(self) -> None:
        """``rwrouter_destination_protocol``: 1 for the message in use; for an RW 2.0
        destination also 0 for the other one."""
        gauge = self._send_metrics.destination_protocol
        for message in MESSAGES:
            if message == self.protocol:
                gauge.labels(self.name, message).set(1)
            elif self.config.protobuf_message == RW2_MESSAGE:
                gauge.labels(self.name, message).set(0)
            else:  # an RW 1.0 destination (perhaps RW 2.0 before a reload): one series
                with contextlib.suppress(KeyError):
                    gauge.remove(self.name, message)

    def _protocol_changed(self, message: str) -> None:
        """The deliverer fell back to ``message`` (RW 1.0): metadata requests from now on,
        starting with what the book holds (not with a ``tenant_header``: the book does not
        know its entries' tenants; the senders send theirs again within a minute). (A
        destination being replaced leaves the gauge to its successor.)"""
        if self._started and not self._stopping.closing:
            self._show_protocol()
        resend = self.config.metadata_config.send and self.config.tenant_header is None
        if self.book is not None and message == RW1_MESSAGE and resend:
            self._metadata.add(self.book.entries())

    def try_configured_protocol(self) -> None:
        """A reload: an RW 2.0 destination that fell back to RW 1.0 tries RW 2.0 again."""
        if self.protocol != self.config.protobuf_message:
            log.info(
                kv(
                    destination=self.name,
                    protobuf_message=self.config.protobuf_message,
                    msg="configuration reloaded: trying remote write 2.0 again",
                )
            )
            self._deliverer.use(self.config.protobuf_message)
            if self._started:
                self._show_protocol()

    # -- admission (event loop) -----------------------------------------------------------

    @property
    def on_full(self) -> OnFull:
        """``backpressure`` or ``drop_oldest`` (``queue_config.on_full``)."""
        return self.config.queue_config.on_full

    @property
    def max_request_bytes(self) -> int:
        """Uncompressed body bound of the requests sent (``queue_config.max_request_bytes``)."""
        return self.config.queue_config.max_request_bytes

    def fits(self, nbytes: int) -> bool:
        """Whether a share of ``nbytes`` record bytes could ever fit the disk queue."""
        return nbytes <= self.config.queue_config.max_disk_bytes

    def has_room(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more record bytes fit in the disk queue now."""
        return self.queue.has_room(nbytes)

    def make_room(self, nbytes: int) -> None:
        """``drop_oldest``: drop the oldest segments until ``nbytes`` fit (counted). Records
        of those segments already read into memory are dropped too, unless in flight: once
        their file is gone, a crash would lose them uncounted."""
        dropped = self.queue.drop_oldest(nbytes)
        self._reader.drop(dropped)  # waiting frames of those records go too, counted
        if dropped.samples:
            self._send_metrics.dropped_samples.labels(self.name, DropReason.DROP_OLDEST).inc(
                dropped.samples
            )
        if dropped.segments:
            log.warning(
                kv(
                    destination=self.name,
                    msg="disk queue full: dropped the oldest data (on_full: drop_oldest)",
                    segments=dropped.segments,
                    records=dropped.records,
                    samples=dropped.samples,
                )
            )

    def reserve(self, nbytes: int) -> None:
        """Hold room for a share admitted and about to be appended."""
        self.queue.reserve(nbytes)

    def release(self, nbytes: int) -> None:
        """Give back a reservation that will not be appended."""
        self.queue.release(nbytes)

    async def append(self, share: EncodedShare) -> int:
        """Append a reserved share to the disk queue; returns once it is durable by the
        ``storage.fsync`` policy, with the append's ticket (for :meth:`cancel`). Raises
        OSError (StorageError once stopped); the reservation is released either way."""
        if self._stopped:
            self.queue.release(share.nbytes)
            raise StorageError(f"destination {self.name} is stopped")
        # A write to the page cache is quicker than a hand-off to a thread: done here when the
        # queue is free, else (a read holds it) in a thread.
        ticket = self.queue.append(
            share.records, share.samples, reserved=share.nbytes, blocking=False
        )
        if ticket is None:
            ticket = await asyncio.to_thread(
                self.queue.append, share.records, share.samples, reserved=share.nbytes
            )
        if ticket is None:
            raise InvariantError("a blocking append always appends")
        self._shards.demand(share.total_samples)
        self._reader.wake()
        if self.storage.fsync == Fsync.ALWAYS:
            async with self._sync_lock:  # group commit: one fsync covers every append before
                if self.queue.synced < ticket:
                    await asyncio.to_thread(self.queue.sync)
        return ticket

    async def cancel(self, ticket: int, share: EncodedShare) -> None:
        """Take back an append of a request refused after all (best effort: see
        :meth:`DiskQueue.cancel`)."""
        await asyncio.to_thread(self.queue.cancel, ticket, share.records)

    def enqueue_metadata(self, metadata: list[bytes], *, tenant: str | None = None) -> None:
        """Framed metadata entries routed here (from a request of ``tenant``, kept with them
        when this destination has a ``tenant_header``): queued for metadata requests (RW 1.0,
        :mod:`rwrouter.send.metadata`), recorded in the book (RW 2.0; see the module
        docstring; one book for all tenants)."""
        if not metadata:
            return
        if self.book is not None:
            evicted = self.book.update(metadata)
            if evicted:
                self._send_metrics.dropped_metadata.labels(self.name, DropReason.BOOK_FULL).inc(
                    evicted
                )
            if self.protocol != RW1_MESSAGE:
                return
        if self.config.metadata_config.send:
            self._metadata.add(metadata, tenant if self.config.tenant_header else None)

    def note_full(self, samples: int) -> None:
        """Note samples of a request answered 503 for want of room here (``on_full:
        backpressure``): demand all the same, for resharding."""
        self._shards.demand(samples)

    def oldest_unsent_age(self) -> float:
        """Seconds since the oldest record read for sending and not yet done was received."""
        received_ms = self._reader.oldest_received_ms
        if received_ms is None:
            return 0.0
        return max(0.0, self._wall() - received_ms / 1000)

    @property
    def failed(self) -> bool:
        """Whether the senders stopped on a bug (see the module docstring): nothing is sent
        until a reload (which replaces this destination) or a restart; appends go on."""
        return self._shards.failed

    @property
    def shard_count(self) -> int:
        """The number of shards (concurrent senders) now."""
        return len(self._shards)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Open (recover) the disk queue, then start the reader, senders, metadata sender,
        resharding and the fsync timer. Raises OSError when the queue cannot be opened."""
        await self._reader.open()
        self._started = True
        self._register_metrics()
        await self._deliverer.start()
        self._shards.start()
        self._tasks = [
            asyncio.create_task(self._reader.run()),
            asyncio.create_task(self._metadata.run(self._deliverer)),
        ]
        if self.storage.fsync == Fsync.INTERVAL:
            self._tasks.append(asyncio.create_task(self._fsync_loop()))
        self._shards.start_resharding()

    async def stop(self, *, timeout: float, drain: bool = True) -> int:
        """Keep sending for up to ``timeout`` seconds (until the disk queue is empty), then
        stop; what is not done stays on disk for the next start. With ``drain=False`` (a
        reload hands the queue to a new :class:`Destination`), only the batches in flight
        finish (within ``timeout``). Returns the number of records left."""
        await self.stop_sending(timeout=timeout, drain=drain)
        return await self.close()

    async def stop_sending(self, *, timeout: float, drain: bool = True) -> None:
        """The first half of :meth:`stop`: the senders stop; appends still work (what is
        appended meanwhile stays on disk for the successor)."""
        self._stopping.set(handover=not drain)
        deadline = self._clock() + timeout
        await self._shards.stop_resharding(timeout)  # a resharding under way completes first
        self._metadata.close()
        self._shards.wake()
        self._reader.wake()
        tasks = [*self._shards.tasks, *self._tasks]
        remaining = max(0.0, deadline - self._clock())
        _, running = await asyncio.wait(tasks, timeout=remaining) if tasks else ((), set())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await self._dead_letters.flush()
        await self._deliverer.close()

    async def close(self) -> int:
        """The second half of :meth:`stop`: close the disk queue (appends now fail with
        StorageError); returns the number of records left on disk."""
        lost = self._reader.dropped_in_flight()
        if lost:  # in flight from a dropped segment, not confirmed: gone with the process
            self._send_metrics.dropped_samples.labels(self.name, DropReason.DROP_OLDEST).inc(lost)
        left = self._reader.records_left()
        self._stopped = True
        try:
            await asyncio.to_thread(self.queue.close)
        except OSError as exc:
            log.error(kv(destination=self.name, msg="closing the disk queue failed", error=exc))
        if left and not self._stopping.handover:
            log.warning(
                kv(
                    destination=self.name,
                    records_left=left,
                    msg="not drained before the shutdown timeout: kept on disk",
                )
            )
        return left

    async def _fsync_loop(self) -> None:
        """``storage.fsync: interval``: fsync what was appended every ``fsync_interval``."""
        stopping = self._stopping
        while not (stopping.closing and self._reader.done):
            await stopping.sleep(self.storage.fsync_interval)
            if self.queue.dirty:
                try:
                    await asyncio.to_thread(self.queue.sync)
                except OSError as exc:  # retried at the next tick; new data in a new segment
                    log.error(
                        kv(
                            destination=self.name,
                            msg="fsync of the disk queue failed",
                            error=exc,
                        )
                    )
            if stopping.closing:
                return
