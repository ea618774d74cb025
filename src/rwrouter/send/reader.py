"""The reading side of a destination's disk queue: records read ahead into memory, handed to the
shards, and the queue position moved over what is done.

The reader owns the destination's shards (:class:`~rwrouter.send.shards.Shards`) and the
completion bookkeeping. It reads records in order, as long as the in-memory read-ahead has room
(``capacity``: the config's ``capacity`` samples per running shard, at least two batches of
``max_samples_per_send`` each, as Prometheus bounds a queue per shard; and ``capacity_bytes``:
its ``max_memory_bytes``), and hands each series to its shard; the shards tell it when a batch
is done (``on_done``). A record is done when all its series are delivered, refused for good
(refused ones go to the dead-letter store) or dropped; the queue position advances over done
records in order, so a crash re-sends only records not yet done. Records read before a crash and
not done (:attr:`~rwrouter.queue.diskqueue.Recovery.resend_until`) may have gone out already:
their frames are sent apart from newer ones (:attr:`~rwrouter.send.batching.Owner.recovered`).

A record failing its checksum or undecodable is done at once (counted as ``corrupt``). With
``on_full: drop_oldest``, records of the dropped segments already in memory are dropped too
(:meth:`QueueReader.drop`), except the frames in flight.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from rwrouter.config import QueueConfig
from rwrouter.errors import DecodeError, InvariantError
from rwrouter.logs import kv
from rwrouter.metrics import QueueMetrics, SendMetrics
from rwrouter.queue.diskqueue import DiskQueue, Dropped, Position
from rwrouter.queue.records import Record, decode_record, record_shards
from rwrouter.reasons import DropReason
from rwrouter.send.batching import Batch, Owner
from rwrouter.send.delivery import Deliverer
from rwrouter.send.refusals import DeadLetterSink
from rwrouter.send.shards import RESHARD_INTERVAL, Shards
from rwrouter.send.stopping import Stopping

log = logging.getLogger("rwrouter.sending")

READ_CHUNK_BYTES = 4 * 1024 * 1024  # record bytes read from disk at a time
INLINE_READ_BYTES = 512 * 1024  # at most this much is read on the event loop (else a thread)


class _Tracked(Owner):
    """A record read for sending, tracked until it is done (its chunks'
    :class:`~rwrouter.send.batching.Owner`), with where it ends in the queue (``end``) and
    when it was received (``received_ms``, milliseconds since epoch)."""

    __slots__ = ("end", "received_ms")

    def __init__(
        self,
        end: Position,
        received_ms: int,
        *,
        series: int = 0,
        samples: int = 0,
        recovered: bool = False,
        tenant: str | None = None,
        group: int = 0,
    ) -> None:
        super().__init__(
            recovered=recovered, series=series, samples=samples, tenant=tenant, group=group
        )
        self.end, self.received_ms = end, received_ms


class QueueReader:
    """Reads one destination's disk queue into its shards, which it builds and owns (see the
    module docstring).

    ``queue_config`` bounds the read-ahead and configures the shards; ``deliverer``,
    ``dead_letters``, ``clock`` (monotonic seconds) and ``reshard_interval`` (seconds) are
    the shards'; so are ``metrics`` (the destination's send metrics: the samples dropped as
    ``corrupt`` or ``drop_oldest``) and ``queue_metrics`` (the corrupt records).
    ``pending``/``pending_bytes``: samples and frame bytes read ahead into memory (waiting in
    a shard or in flight), bounded by ``capacity`` samples and ``capacity_bytes`` bytes.
    ``done``: stopping, and nothing is left to read.
    """

    def __init__(
        self,
        *,
        name: str,
        queue: DiskQueue,
        queue_config: QueueConfig,
        deliverer: Deliverer,
        dead_letters: DeadLetterSink,
        metrics: SendMetrics,
        queue_metrics: QueueMetrics,
        clock: Callable[[], float],
        stopping: Stopping,
        reshard_interval: float = RESHARD_INTERVAL,
    ) -> None:
        self.name, self.queue = name, queue
        self._per_shard = max(queue_config.capacity, 2 * queue_config.max_samples_per_send)
        self.capacity_bytes = queue_config.max_memory_bytes
        self._metrics, self._queue_metrics, self.stopping = metrics, queue_metrics, stopping
        self.shards = Shards(
            name=name,
            queue_config=queue_config,
            deliverer=deliverer,
            dead_letters=dead_letters,
            metrics=metrics,
            queue_metrics=queue_metrics,
            clock=clock,
            stopping=stopping,
            on_done=self._sent,
            backlog=self.backlog,
            reshard_interval=reshard_interval,
        )
        self._records: deque[_Tracked] = deque()  # read and not yet done, in queue order
        self._wake = asyncio.Event()
        self._resend_until = Position(0, 0)  # records up to here may have gone out before
        self.pending = 0
        self.pending_bytes = 0
        self.done = False

    async def open(self) -> None:
        """Open (recover) the disk queue; count and log a torn tail that was cut off, and log
        the unsent records found. Raises OSError when the queue cannot be opened."""
        recovery = await asyncio.to_thread(self.queue.open)
        self._resend_until = recovery.resend_until
        if recovery.torn_records:
            lost = "unknown" if recovery.torn_samples is None else recovery.torn_samples
            self._queue_metrics.corrupt_records.labels(self.name).inc(recovery.torn_records)
            if recovery.torn_samples:
                self._metrics.dropped_samples.labels(self.name, DropReason.CORRUPT).inc(
                    recovery.torn_samples
                )
            log.error(
                kv(
                    destination=self.name,
                    msg="torn record at the end of the disk queue cut off",
                    bytes=recovery.torn_bytes,
                    records=recovery.torn_records,
                    samples=lost,
                )
            )
        if recovery.unsent_records:
            log.info(
                kv(
                    destination=self.name,
                    msg="unsent data on disk: sending it first",
                    records=recovery.unsent_records,
                    bytes=recovery.unsent_bytes,
                )
            )

    # -- what the destination asks -------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Samples the read-ahead may hold now: its share per running shard (the module
        docstring); it follows resharding."""
        return self._per_shard * len(self.shards)

    def backlog(self) -> int:
        """Samples waiting to be sent: read ahead, or still unread on disk (the shards'
        resharding asks)."""
        return self.pending + self.queue.unread_samples

    @property
    def in_memory(self) -> int:
        """Records read and not yet done."""
        return len(self._records)

    @property
    def oldest_received_ms(self) -> int | None:
        """When (milliseconds since epoch) the oldest record read and not yet done was
        received; None when there is none."""
        return self._records[0].received_ms if self._records else None

    def records_left(self) -> int:
        """Records not done that stay on disk: unread, or read and not dropped."""
        return self.queue.unread_records + sum(not r.dropped for r in self._records)

    def dropped_in_flight(self) -> int:
        """Samples of records of dropped segments not yet done (in flight when dropped): at
        a stop they are gone with the process."""
        return sum(r.samples_left for r in self._records if r.dropped and r.remaining > 0)

    def wake(self) -> None:
        """Wake the reader: something was appended, room was made, or the stop began."""
        self._wake.set()

    # -- reading ---------------------------------------------------------------------------

    def _room(self) -> int:
        """Record bytes the reader may read now (0: the read-ahead is full)."""
        if self.pending >= self.capacity or self.pending_bytes >= self.capacity_bytes:
            return 0
        return min(READ_CHUNK_BYTES, self.capacity_bytes - self.pending_bytes)

    async def run(self) -> None:
        """Read records into the shards while there is room, until a handover, or until the
        stop began and nothing is left to read or the shards stopped on a bug (then
        :attr:`done`, and the shards are told). Read errors are logged and retried every
        second."""
        stopping = self.stopping
        while not stopping.handover:
            if stopping.closing and (not self.queue.unread_records or self.shards.failed):
                self.done = True
                self.shards.input_done()
                return
            room = self._room()
            if not room or not self.queue.unread_records:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                # A small read from the page cache is quicker than a hand-off to a thread: done
                # here when the queue is free; larger reads (catching up) go to a thread.
                read = self._read_records(min(room, INLINE_READ_BYTES), blocking=False)
                if read is None:
                    read = await asyncio.to_thread(self._read_records, room)
                if read is None:
                    raise InvariantError("a blocking read always reads")
            except OSError as exc:  # e.g. too many open files: try again, never give up
                log.error(
                    kv(
                        destination=self.name,
                        msg="reading the disk queue failed: retrying in 1s",
                        error=exc,
                    )
                )
                await stopping.sleep(1.0)
                continue
            for record, end, samples in read:
                self._dispatch(record, end, samples)

    def _read_records(
        self, room: int, *, blocking: bool = True
    ) -> list[tuple[Record | None, Position, int]] | None:
        """Read and decode the next records: (record, end, samples); record None for an
        undecodable one. With ``blocking`` false, None when the queue is busy."""
        out: list[tuple[Record | None, Position, int]] = []
        queued = self.queue.read(
            room, max_samples=max(1, self.capacity - self.pending), blocking=blocking
        )
        if queued is None:
            return None
        for raw in queued:
            if raw.corrupt:  # skipped by the queue (checksum): done, counted
                out.append((None, raw.end, raw.samples))
                continue
            try:
                # A record that goes to one shard whole goes out as stored: no need to
                # decompress it (one shard, or a record cut for as many shards as run now).
                shards = len(self.shards)
                split = shards > 1 and record_shards(raw.rest) != shards
                record = decode_record(raw.rest, decompress_body=split)
                out.append((record, raw.end, raw.samples))
            except DecodeError as exc:
                log.error(
                    kv(
                        destination=self.name,
                        msg="undecodable queue record skipped",
                        error=exc,
                    )
                )
                out.append((None, raw.end, raw.samples))
        return out

    def _dispatch(self, record: Record | None, end: Position, samples: int) -> None:
        """Hand a record's series to their shards (in order); the record waits to be done."""
        if record is None:
            self._queue_metrics.corrupt_records.labels(self.name).inc()
            self._metrics.dropped_samples.labels(self.name, DropReason.CORRUPT).inc(samples)
            self._records.append(_Tracked(end, 0))
            self._advance()
            return
        tracked = _Tracked(
            end,
            record.received_ms,
            series=record.series,
            samples=record.samples,
            recovered=end <= self._resend_until,
            tenant=record.tenant,
            group=record.group,
        )
        self._records.append(tracked)
        self.shards.add(record, tracked)
        self.pending += record.samples
        self.pending_bytes += record.nbytes

    # -- completion: what is done, what the queue may forget --------------------------------

    def _sent(self, batch: Batch) -> None:
        """The shards' ``on_done``: a batch is done (delivered, refused for good, or skipped as
        corrupt): its records move on, and the read-ahead has room again."""
        self._done(batch)
        self._wake.set()

    def drop(self, dropped: Dropped) -> None:
        """``drop_oldest`` removed segments (up to ``dropped.last_segment``): records read
        from them are dropped too, their waiting frames counted as ``drop_oldest``; frames in
        flight are not (once their file is gone, a crash would lose them uncounted)."""
        for record in self._records:
            if record.end.segment > dropped.last_segment:
                break
            record.dropped = True
        if dropped.last_segment < 0:
            return
        for gone in self.shards.remove_dropped():
            self._metrics.dropped_samples.labels(self.name, DropReason.DROP_OLDEST).inc(
                gone.samples
            )
            self._done(gone)

    def _done(self, batch: Batch) -> None:
        """The series of ``batch`` (chunks of records) are done (delivered, refused for good,
        corrupt or dropped): out of the read-ahead, counted down in their records, and the
        queue position moved over the records now done."""
        self.pending -= batch.samples
        self.pending_bytes -= batch.nbytes
        for chunk in batch.chunks:
            owner = chunk.owner
            owner.remaining -= chunk.series
            owner.samples_left -= chunk.samples
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
                log.error(
                    kv(
                        destination=self.name,
                        msg="storing the queue position failed",
                        error=exc,
                    )
                )
