"""One destination: a durable queue on disk, read ahead into shards, a sender per shard.

Flow: the receive side appends a request's share (records, :mod:`rwrouter.sending.records`) to
the destination's :class:`~rwrouter.sending.diskqueue.DiskQueue` and answers 204 once that is
written (``storage.fsync: interval``) or fsynced (``always``). A reader reads records in order,
as long as the in-memory read-ahead has room (``capacity x max_shards`` samples and
``max_memory_bytes``), and hands each series to its shard. Each shard sends batches of at most
``max_samples_per_send`` samples and ``max_request_bytes`` bytes. A record is done when all its
series are delivered or refused for good (refused ones go to the dead-letter store); the queue
position advances over done records in order, so a crash re-sends only records not yet done.

Per-series order: a series always goes to the same shard (its shard hash) and a shard has one
batch in flight at a time, retried until it succeeds or is refused, so a later sample of a
series never overtakes an earlier one (RW 1.0 spec). Shards are dynamic between ``min_shards``
and ``max_shards`` as in Prometheus (:func:`~rwrouter.sending.batching.desired_shards`): to
change their number, every sender finishes its batch in flight and the waiting frames are
re-hashed in order (:func:`~rwrouter.sending.batching.reshard`).

Metadata entries are kept in memory only (Prometheus sends all metadata again every minute).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine
from contextlib import suppress
from pathlib import Path
from typing import Any

from rwrouter.auth.schemes import Authenticator
from rwrouter.auth.sigv4 import REMOTE_WRITE_HEADERS
from rwrouter.config import DestinationConfig, StorageConfig
from rwrouter.errors import DecodeError, StorageError
from rwrouter.logs import q
from rwrouter.metrics import Metrics
from rwrouter.sending.batching import ShardBuffer, desired_shards, reshard, shard_of
from rwrouter.sending.deadletter import DeadLetters
from rwrouter.sending.delivery import Deliverer
from rwrouter.sending.diskqueue import DiskQueue, Position
from rwrouter.sending.metadata import MetadataQueue
from rwrouter.sending.records import Block, EncodedShare, decode_record
from rwrouter.sending.rejected import RejectedStore, rejected_dir, safe_dirname
from rwrouter.sending.retry import RetryPolicy
from rwrouter.sending.transport import Transport

log = logging.getLogger("rwrouter.sending")

RESHARD_INTERVAL = 10.0  # seconds, as Prometheus's shardUpdateDuration
READ_CHUNK_BYTES = 4 * 1024 * 1024  # record bytes read from disk at a time


def queue_dir(storage_path: str, destination: str) -> Path:
    """``<storage.path>/queue/<destination>`` (the name made safe for a file system)."""
    return Path(storage_path) / "queue" / safe_dirname(destination)


class _Record:
    """A record read for sending: where it ends in the queue, its series not yet done, and
    whether it may have been sent before a crash (``recovered``)."""

    __slots__ = ("dropped", "end", "received_ms", "recovered", "remaining", "samples_left")

    def __init__(
        self, end: Position, received_ms: int, remaining: int, recovered: bool, samples: int = 0
    ) -> None:
        self.end, self.received_ms, self.remaining = end, received_ms, remaining
        self.recovered = recovered
        self.samples_left = samples  # samples not yet done
        self.dropped = False  # its segment was dropped (on_full: drop_oldest)


def _recovered(owner: object) -> bool:
    return isinstance(owner, _Record) and owner.recovered


class Destination:
    """A remote_write destination's durable queue and senders (see the module docstring).

    Admission (event loop): :meth:`fits`, :meth:`has_room`, :meth:`make_room`, :meth:`reserve`,
    then ``await`` :meth:`append`. Clocks, randomness and sleep are injectable for tests.
    """

    def __init__(
        self,
        *,
        config: DestinationConfig,
        storage: StorageConfig,
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
        q_ = config.queue_config
        self.capacity = q_.capacity * q_.max_shards
        self.capacity_bytes = q_.max_memory_bytes
        self.storage = storage
        self.queue = DiskQueue(queue_dir(storage.path, self.name), max_bytes=q_.max_disk_bytes)
        self.rejected = RejectedStore(
            rejected_dir(storage.path, self.name), max_bytes=storage.rejected_max_bytes
        )
        self._transport = transport
        self.auth = auth
        self._metrics = metrics
        self._clock, self._wall = clock, wall_clock
        self._dead_letters = DeadLetters(name=self.name, store=self.rejected, metrics=metrics)
        self._deliverer = Deliverer(
            name=config.name,
            transport=transport,
            auth=auth,
            policy=RetryPolicy(
                min_backoff=q_.min_backoff,
                max_backoff=q_.max_backoff,
                retry_on_http_429=q_.retry_on_http_429,
                max_retry_duration=q_.max_retry_duration,
                max_retry_duration_on_http_429=q_.max_retry_duration_on_http_429,
            ),
            base_headers={**dict(config.headers), **REMOTE_WRITE_HEADERS},
            metrics=metrics,
            clock=clock,
            wall_clock=wall_clock,
            rand=rand,
            sleep=sleep,
            on_rejected=self._dead_letters,
        )
        self._shards = [ShardBuffer() for _ in range(q_.min_shards)]
        self._wake = [asyncio.Event() for _ in self._shards]
        self._read_wake = asyncio.Event()
        self._records: deque[_Record] = deque()  # read and not yet done, in queue order
        self._metadata = MetadataQueue(
            name=self.name,
            batch_size=config.metadata_config.max_samples_per_send,
            max_bytes=q_.max_memory_bytes,
            metrics=metrics,
        )
        self._shard_tasks: list[asyncio.Task[None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._sync_lock = asyncio.Lock()
        self._closing = False
        self._handover = False  # stop without draining: the queue stays for a successor
        self._reader_done = False
        self._closed = asyncio.Event()  # set with _closing: ends the resharding loop
        self._reshard_task: asyncio.Task[None] | None = None
        self._pausing = False
        self._reshard_interval = reshard_interval
        self._stats = _IntervalStats()
        self._resend_until = Position(0, 0)  # records up to here may have gone out before
        self.pending = 0  # samples read ahead into memory (waiting or in flight)
        self.pending_bytes = 0  # their frame bytes
        self._stopped = False

    def _register_metrics(self) -> None:
        """Point this destination's gauges at this object (at start: a reload that fails
        leaves the running destination's gauges alone)."""
        m, name, q_ = self._metrics, self.name, self.config.queue_config
        m.queue_capacity.labels(name).set(self.capacity)
        m.queue_capacity_bytes.labels(name).set(self.capacity_bytes)
        m.queue_disk_capacity_bytes.labels(name).set(q_.max_disk_bytes)
        m.shards.labels(name).set(len(self._shards))
        m.watch(m.queue_samples, lambda: self.pending, name)
        m.watch(m.queue_bytes, lambda: self.pending_bytes + self._metadata.nbytes, name)
        m.watch(m.queue_disk_bytes, lambda: self.queue.size_bytes, name)
        m.watch(m.queue_blocks, lambda: self.queue.unread_records + len(self._records), name)
        m.watch(m.queue_oldest_age, self.oldest_unsent_age, name)
        m.watch(m.rejected_bytes, lambda: self.rejected.size_bytes, name)
        m.watch(m.rejected_entries, lambda: len(self.rejected), name)
        m.credentials_expiry.sources[name] = self.auth.expiry

    # -- admission (event loop) -----------------------------------------------------------

    @property
    def on_full(self) -> str:
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
        for record in self._records:
            if record.end.segment > dropped.last_segment:
                break
            record.dropped = True
        if dropped.last_segment >= 0:  # waiting frames of those records go too, counted
            for buf in self._shards:
                gone = buf.remove_if(lambda owner: isinstance(owner, _Record) and owner.dropped)
                if gone.items:
                    self._metrics.dropped_samples.labels(self.name, "drop_oldest").inc(
                        gone.samples
                    )
                    self.pending -= gone.samples
                    self.pending_bytes -= gone.nbytes
                    self._done(gone.owners, gone.items)
        if dropped.samples:
            self._metrics.dropped_samples.labels(self.name, "drop_oldest").inc(dropped.samples)
        if dropped.segments:
            log.warning("destination=%s msg=%s segments=%d records=%d samples=%d", self.name,
                        q("disk queue full: dropped the oldest data (on_full: drop_oldest)"),
                        dropped.segments, dropped.records, dropped.samples)  # fmt: skip

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
        ticket = await asyncio.to_thread(
            self.queue.append, share.records, share.samples, reserved=share.nbytes
        )
        self._stats.samples_in += share.total_samples
        self._read_wake.set()
        if self.storage.fsync == "always":
            async with self._sync_lock:  # group commit: one fsync covers every append before
                if self.queue.synced < ticket:
                    await asyncio.to_thread(self.queue.sync)
        return ticket

    async def cancel(self, ticket: int, share: EncodedShare) -> None:
        """Take back an append of a request refused after all (best effort: see
        :meth:`DiskQueue.cancel`)."""
        await asyncio.to_thread(self.queue.cancel, ticket, share.records)

    def enqueue_metadata(self, metadata: list[bytes]) -> None:
        """Queue metadata entries in memory (:mod:`rwrouter.sending.metadata`)."""
        if metadata and self.config.metadata_config.send:
            self._metadata.add(metadata)

    def refused(self, samples: int) -> None:
        """Note samples refused (503) for want of room: demand all the same, for resharding."""
        self._stats.samples_in += samples

    def oldest_unsent_age(self) -> float:
        """Seconds since the oldest record read for sending and not yet done was received."""
        if not self._records:
            return 0.0
        return max(0.0, self._wall() - self._records[0].received_ms / 1000)

    @property
    def shards(self) -> int:
        """The number of shards (concurrent senders) now."""
        return len(self._shards)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Open (recover) the disk queue, then start the reader, senders, metadata sender,
        resharding and the fsync timer. Raises OSError when the queue cannot be opened."""
        recovery = await asyncio.to_thread(self.queue.open)
        self._resend_until = recovery.resend_until
        self._register_metrics()
        if recovery.torn_records:
            lost = "unknown" if recovery.torn_samples is None else recovery.torn_samples
            self._metrics.queue_corrupt_records.labels(self.name).inc(recovery.torn_records)
            if recovery.torn_samples:
                self._metrics.dropped_samples.labels(self.name, "corrupt").inc(
                    recovery.torn_samples
                )
            log.error("destination=%s msg=%s bytes=%d records=%d samples=%s", self.name,
                      q("torn record at the end of the disk queue cut off"),
                      recovery.torn_bytes, recovery.torn_records, lost)  # fmt: skip
        if recovery.unsent_records:
            log.info("destination=%s msg=%s records=%d bytes=%d", self.name,
                     q("unsent data on disk: sending it first"), recovery.unsent_records,
                     recovery.unsent_bytes)  # fmt: skip
        await self._transport.start()
        self._start_shards()
        self._tasks = [
            asyncio.create_task(self._read_loop()),
            asyncio.create_task(self._metadata.run(self._deliverer)),
        ]
        if self.storage.fsync == "interval":
            self._tasks.append(asyncio.create_task(self._fsync_loop()))
        self._reshard_task = asyncio.create_task(self._reshard_loop())

    def _start_shards(self) -> None:
        self._shard_tasks = [
            asyncio.create_task(self._shard_loop(i)) for i in range(len(self._shards))
        ]
        self._metrics.shards.labels(self.name).set(len(self._shards))

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
        self._handover = not drain
        self._closing = True
        self._closed.set()
        deadline = self._clock() + timeout
        if self._reshard_task is not None:  # a resharding under way completes first...
            await asyncio.wait([self._reshard_task], timeout=timeout)
            self._reshard_task.cancel()  # ...unless a sender is stuck retrying: then stop it
            await asyncio.gather(self._reshard_task, return_exceptions=True)
        self._metadata.close()
        for event in (*self._wake, self._read_wake):
            event.set()
        tasks = [*self._shard_tasks, *self._tasks]
        remaining = max(0.0, deadline - self._clock())
        _, running = await asyncio.wait(tasks, timeout=remaining) if tasks else ((), set())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await self._dead_letters.flush()
        await self._transport.close()

    async def close(self) -> int:
        """The second half of :meth:`stop`: close the disk queue (appends now fail with
        StorageError); returns the number of records left on disk."""
        lost = sum(r.samples_left for r in self._records if r.dropped and r.remaining > 0)
        if lost:  # in flight from a dropped segment, not confirmed: gone with the process
            self._metrics.dropped_samples.labels(self.name, "drop_oldest").inc(lost)
        left = self.queue.unread_records + sum(not r.dropped for r in self._records)
        self._stopped = True
        try:
            await asyncio.to_thread(self.queue.close)
        except OSError as exc:
            log.error("destination=%s msg=%s error=%s", self.name,
                      q("closing the disk queue failed"), q(exc))  # fmt: skip
        if left and not self._handover:
            log.warning("destination=%s records_left=%d msg=%s", self.name, left,
                        q("not drained before the shutdown timeout: kept on disk"))  # fmt: skip
        return left

    # -- reading the disk queue ------------------------------------------------------------

    def _room(self) -> int:
        """Record bytes the reader may read now (0: the read-ahead is full)."""
        if self.pending >= self.capacity or self.pending_bytes >= self.capacity_bytes:
            return 0
        return min(READ_CHUNK_BYTES, self.capacity_bytes - self.pending_bytes)

    async def _read_loop(self) -> None:
        while not self._handover:
            room = self._room()
            if not room or not self.queue.unread_records:
                if self._closing and not self.queue.unread_records:
                    self._reader_done = True
                    for event in self._wake:
                        event.set()
                    return
                self._read_wake.clear()
                await self._read_wake.wait()
                continue
            try:
                batch = await asyncio.to_thread(self._read_blocks, room)
            except OSError as exc:  # e.g. too many open files: try again, never give up
                log.error("destination=%s msg=%s error=%s", self.name,
                          q("reading the disk queue failed: retrying in 1s"), q(exc))  # fmt: skip
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._closed.wait(), 1.0)
                continue
            for block, end, samples in batch:
                self._dispatch(block, end, samples)

    def _read_blocks(self, room: int) -> list[tuple[Block | None, Position, int]]:
        """Read and decode the next records (worker thread): (block, end, samples); block
        None for an undecodable one."""
        out: list[tuple[Block | None, Position, int]] = []
        for record in self.queue.read(room, max_samples=max(1, self.capacity - self.pending)):
            if record.corrupt:  # skipped by the queue (checksum): done, counted
                out.append((None, record.end, record.samples))
                continue
            try:
                out.append((decode_record(record.rest), record.end, record.samples))
            except DecodeError as exc:
                log.error("destination=%s msg=%s error=%s", self.name,
                          q("undecodable queue record skipped"), q(exc))  # fmt: skip
                out.append((None, record.end, record.samples))
        return out

    def _dispatch(self, block: Block | None, end: Position, samples: int) -> None:
        """Hand a record's series to their shards (in order); the record waits to be done."""
        if block is None:
            self._metrics.queue_corrupt_records.labels(self.name).inc()
            self._metrics.dropped_samples.labels(self.name, "corrupt").inc(samples)
            self._records.append(_Record(end, 0, 0, False))
            self._advance()
            return
        record = _Record(end, block.received_ms, len(block.frames), end <= self._resend_until,
                         block.samples)  # fmt: skip
        self._records.append(record)
        now = self._clock()
        shards, wake = self._shards, self._wake
        n = len(shards)
        q_ = self.config.queue_config
        for frame, count, hashed in zip(block.frames, block.counts, block.hashes, strict=True):
            i = shard_of(hashed, n)
            buf = shards[i]
            if not buf.frames or buf.samples + count >= q_.max_samples_per_send:
                wake[i].set()
            buf.add(frame, count, now=now, hashed=hashed, owner=record)
        self.pending += block.samples
        self.pending_bytes += block.nbytes

    def _done(self, owners: list[object], items: list[tuple[bytes, int]]) -> None:
        """Series (``items``) of these records are done (delivered, refused for good, or
        dropped)."""
        for owner, (_, count) in zip(owners, items, strict=True):
            assert isinstance(owner, _Record)
            owner.remaining -= 1
            owner.samples_left -= count
        self._advance()

    def _advance(self) -> None:
        """Commit the queue position over records done, in order."""
        end = None
        records = self._records
        while records and records[0].remaining <= 0:
            end = records.popleft().end
        if end is not None:
            try:
                self.queue.commit(end)
            except OSError as exc:  # the position is not stored: those records go out again
                log.error("destination=%s msg=%s error=%s", self.name,
                          q("storing the queue position failed"), q(exc))  # fmt: skip

    # -- sending ---------------------------------------------------------------------------

    async def _shard_loop(self, i: int) -> None:
        buf, wake = self._shards[i], self._wake[i]
        q_ = self.config.queue_config
        while not self._pausing and not self._handover:
            if not buf.frames:
                if self._closing and self._reader_done:
                    return
                wake.clear()
                await wake.wait()
                continue
            now = self._clock()
            deadline = 0.0 if self._closing else q_.batch_send_deadline
            if not buf.ready(max_samples=q_.max_samples_per_send, max_bytes=q_.max_request_bytes,
                             deadline=deadline, now=now):  # fmt: skip
                wake.clear()
                assert buf.first_at is not None
                with suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), deadline - (now - buf.first_at))
                continue
            batch = buf.take(
                max_samples=q_.max_samples_per_send, max_bytes=q_.max_request_bytes,
                group=_recovered,
            )  # fmt: skip
            started = self._clock()
            try:
                delivered = await self._deliverer.deliver(
                    batch.items, "samples", resent=_recovered(batch.owners[0])
                )
            except Exception:  # a bug, not an answer: keep the batch, try again in a second
                log.exception("destination=%s msg=%s", self.name,
                              q("sending a batch failed unexpectedly: retrying in 1s"))  # fmt: skip
                buf.put_back(batch)
                await asyncio.sleep(1.0)
                continue
            if delivered:
                self._metrics.sent_samples.labels(self.name).inc(delivered)
                self._stats.delivered(delivered, self._clock() - started)
            await self._dead_letters.flush()  # refused parts on disk before the queue moves on
            self.pending -= batch.samples
            self.pending_bytes -= batch.nbytes
            self._done(batch.owners, batch.items)
            self._read_wake.set()

    async def _fsync_loop(self) -> None:
        """``storage.fsync: interval``: fsync what was appended every ``fsync_interval``."""
        while not (self._closing and self._reader_done):
            with suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), self.storage.fsync_interval)
            if self.queue.dirty:
                try:
                    await asyncio.to_thread(self.queue.sync)
                except OSError as exc:  # retried at the next tick; new data in a new segment
                    log.error("destination=%s msg=%s error=%s", self.name,
                              q("fsync of the disk queue failed"), q(exc))  # fmt: skip
            if self._closing:
                return

    async def _reshard_loop(self) -> None:
        """Every ``reshard_interval`` seconds, change the shard count if the load asks for it."""
        q_ = self.config.queue_config
        while not self._closing:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), self._reshard_interval)
            stats, self._stats = self._stats, _IntervalStats()
            failures, self._deliverer.failures = self._deliverer.failures, 0
            if failures or self._closing:
                continue  # more senders do not help a failing destination
            backlog = self.pending + self.queue.unread_samples
            wanted = desired_shards(
                current=len(self._shards), min_shards=q_.min_shards, max_shards=q_.max_shards,
                samples_in=stats.samples_in, samples_out=stats.samples_out,
                send_seconds=stats.send_seconds, pending=backlog,
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
        self._shards = reshard(self._shards, shards)  # no await from here: the reader waits
        self._wake = [asyncio.Event() for _ in self._shards]
        for event in self._wake:
            event.set()
        self._pausing = False
        self._start_shards()


class _IntervalStats:
    """What happened since the last resharding decision."""

    __slots__ = ("samples_in", "samples_out", "send_seconds")

    def __init__(self) -> None:
        self.samples_in = self.samples_out = 0
        self.send_seconds = 0.0

    def delivered(self, samples: int, seconds: float) -> None:
        self.samples_out += samples
        self.send_seconds += seconds
