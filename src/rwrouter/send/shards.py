"""The sending side of a destination: shard buffers, one sender per shard, and resharding.

The reader (:mod:`rwrouter.send.reader`) owns a destination's shards: it hands each series
read from the disk queue to its shard (:meth:`Shards.add`) and is told when a batch is done
(``on_done``). Each shard sends batches of at most ``max_samples_per_send`` samples (or
``burst_samples`` if paced and less) and ``max_request_bytes`` bytes, cut when full or when
the oldest frame waited ``batch_send_deadline`` seconds (at once when stopping); refused
parts are on disk in the dead-letter store before the batch is reported done.

A bug in the send path (an exception that is not an answer: the deliverer turns every answer,
network error and credential failure into a result) would fail the same way every time:
it is logged once, with its traceback, and every sender of the destination stops
(:attr:`Shards.failed`; see :meth:`Shards._fail`) instead of retrying it for ever.

Per-series order: a series always goes to the same shard (its shard hash) and a shard has one
batch in flight at a time, retried until it succeeds or is refused, so a later sample of a
series never overtakes an earlier one (RW 1.0 spec). Shards are dynamic between ``min_shards``
and ``max_shards`` as in Prometheus (:func:`~rwrouter.send.batching.desired_shards`, every
``reshard_interval`` seconds): to change their number, every sender finishes its batch in
flight and the waiting frames are re-hashed in order (:func:`~rwrouter.send.batching.reshard`).
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
from rwrouter.queue.records import Record
from rwrouter.reasons import DropReason
from rwrouter.send.batching import (
    Batch,
    Chunk,
    Owner,
    ShardBuffer,
    chunks_by_shard,
    desired_shards,
    reshard,
)
from rwrouter.send.delivery import Deliverer
from rwrouter.send.refusals import DeadLetterSink
from rwrouter.send.stopping import HandedOver, Stopping, wait_event

log = logging.getLogger("rwrouter.sending")

RESHARD_INTERVAL = 10.0  # seconds, as Prometheus's shardUpdateDuration


class Shards:
    """The shard buffers and senders of one destination (see the module docstring), built
    by the reader that feeds them (:class:`~rwrouter.send.reader.QueueReader`).

    The reader's hooks: ``on_done(batch)`` once chunks it added are done (delivered, refused
    for good with the refused part on disk, or skipped as corrupt); ``backlog()``: samples
    waiting to be sent (read ahead or still on disk), for resharding. Frames of recovered
    records (:attr:`~rwrouter.send.batching.Owner.recovered`) go out marked as resent
    (:meth:`~rwrouter.send.delivery.Deliverer.deliver_raw`). ``metrics``: the send metrics
    (samples sent or dropped, the shard count, a stop on a bug); ``queue_metrics``: stored
    series that do not decompress count as corrupt records.
    """

    def __init__(
        self,
        *,
        name: str,
        queue_config: QueueConfig,
        deliverer: Deliverer,
        dead_letters: DeadLetterSink,
        metrics: SendMetrics,
        queue_metrics: QueueMetrics,
        clock: Callable[[], float],
        stopping: Stopping,
        on_done: Callable[[Batch], None],
        backlog: Callable[[], int],
        reshard_interval: float = RESHARD_INTERVAL,
    ) -> None:
        self.name = name
        self._q = queue_config
        self._deliverer, self._dead_letters = deliverer, dead_letters
        self._metrics, self._queue_metrics = metrics, queue_metrics
        self._clock, self._stopping = clock, stopping
        self._on_done, self._backlog = on_done, backlog
        self._reshard_interval = reshard_interval
        self.buffers = [ShardBuffer() for _ in range(queue_config.min_shards)]
        self._wake = [asyncio.Event() for _ in self.buffers]
        self.tasks: list[asyncio.Task[None]] = []  # one sender per shard
        self._reshard_task: asyncio.Task[None] | None = None
        self._pausing = False  # a resharding waits for the senders to return
        self._input_done = False  # stopping, and the reader will add nothing more
        self.failed = False  # the senders stopped on a bug (see _fail)
        self._stats = _IntervalStats()

    def __len__(self) -> int:
        """The number of shards (concurrent senders) now."""
        return len(self.buffers)

    def add(self, record: Record, owner: Owner) -> None:
        """Hand a record's series to their shards, in order, as one chunk per shard owned by
        ``owner`` (given back in the :class:`~rwrouter.send.batching.Batch` of
        ``on_done``)."""
        now = self._clock()
        buffers, wake = self.buffers, self._wake
        max_samples = self._q.batch_samples
        whole = Chunk(
            record.decoded,
            record.index,
            record.samples,
            record.series,
            owner,
            compressed=record.compressed,
            nbytes=record.nbytes,
            flags=record.flags,
        )
        try:
            if record.shards == len(buffers) > 1:  # cut for these shards: whole to its own
                parts: list[Chunk | None] = [None] * len(buffers)
                parts[record.first_hash % len(buffers)] = whole
            else:
                parts = chunks_by_shard(whole, len(buffers))  # decompresses it to split it
        except DecodeError as exc:
            self._corrupt([whole], exc)
            return
        for i, chunk in enumerate(parts):
            if chunk is None:
                continue
            buf = buffers[i]
            if not buf.chunks or buf.samples + chunk.samples >= max_samples:
                wake[i].set()
            buf.add(chunk, now=now)

    def remove_dropped(self) -> list[Batch]:
        """Remove the waiting frames (not those in flight) of dropped records
        (:attr:`~rwrouter.send.batching.Owner.dropped`); returns them, one non-empty batch
        per shard."""
        gone = (buf.remove_dropped() for buf in self.buffers)
        return [batch for batch in gone if batch.chunks]

    def demand(self, samples: int) -> None:
        """Note ``samples`` offered to the destination (appended, or refused for want of
        room), for the next resharding decision."""
        self._stats.samples_in += samples

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start one sender per shard (and set the ``rwrouter_shards`` gauge)."""
        self.tasks = [asyncio.create_task(self._send_loop(i)) for i in range(len(self.buffers))]
        self._metrics.shards.labels(self.name).set(len(self.buffers))

    def start_resharding(self) -> None:
        """Start the loop that changes the shard count every ``reshard_interval`` seconds."""
        self._reshard_task = asyncio.create_task(self._reshard_loop())

    async def stop_resharding(self, timeout: float) -> None:
        """Once the stop began: let a resharding under way complete within ``timeout``
        seconds, else cancel it (a sender stuck retrying holds it up)."""
        if self._reshard_task is not None:
            await asyncio.wait([self._reshard_task], timeout=timeout)
            self._reshard_task.cancel()
            await asyncio.gather(self._reshard_task, return_exceptions=True)

    def wake(self) -> None:
        """Wake every sender (to notice the stop, or frames to send)."""
        for event in self._wake:
            event.set()

    def input_done(self) -> None:
        """The reader, stopping, adds nothing more: senders return once their buffer is
        empty."""
        self._input_done = True
        self.wake()

    # -- senders and resharding ------------------------------------------------------------

    async def _send_loop(self, i: int) -> None:
        buf, wake = self.buffers[i], self._wake[i]
        q_, stopping = self._q, self._stopping
        while not self._pausing and not stopping.handover and not self.failed:
            if not buf.chunks:
                if stopping.closing and self._input_done:
                    return
                wake.clear()
                await wake.wait()
                continue
            now = self._clock()
            deadline = 0.0 if stopping.closing else q_.batch_send_deadline
            if not buf.ready(
                max_samples=q_.batch_samples,
                max_bytes=q_.max_request_bytes,
                deadline=deadline,
                now=now,
            ):
                wake.clear()
                if buf.first_at is None:
                    raise InvariantError("a buffer holding chunks knows when the first came")
                await wait_event(wake, deadline - (now - buf.first_at))
                continue
            batch = buf.take(max_samples=q_.batch_samples, max_bytes=q_.max_request_bytes)
            batch = self._without_undecodable(batch)
            if not batch.chunks:
                continue
            if await self._send(batch):
                self._on_done(batch)
            else:  # a bug (_fail), or a handover: the batch stays not done, on disk
                buf.put_back(batch)
                return

    async def _send(self, batch: Batch) -> bool:
        """Deliver one batch and put its refused part on disk; False when delivery failed on a
        bug (not an answer: :meth:`_fail`) or stopped retrying at a handover (a reload replaced
        the destination): the caller keeps the batch, not done."""
        started = self._clock()
        try:
            flagged = batch.start_timestamps  # RW 1.0 strips them: the frames are needed
            stored = self._deliverer.sends_stored(start_timestamps=flagged)
            compressed = batch.compressed if stored else None
            # a sample age limit walks the frames of every batch, stored ones too
            need_raw = compressed is None or self._deliverer.ages
            delivered = await self._deliverer.deliver_raw(
                batch.raw if need_raw else b"",
                batch.samples,
                lambda: batch.items,
                compressed=compressed,
                resent=batch.chunks[0].owner.recovered,
                start_timestamps=flagged,
                tenant=batch.tenant,
            )
        except HandedOver:  # retrying at a handover: not done, the successor sends it
            return False
        except DecodeError as exc:  # a stored body that does not decompress: done, counted
            if len(batch.chunks) == 1:
                self._corrupt(batch.chunks, exc, sent=False)
                return True
            # Several records spliced: nothing was delivered (the refusal needed the bodies,
            # or the splice failed); count the undecodable ones and send the others.
            good = self._without_undecodable(batch, stored_too=True, sent=False)
            return not good.chunks or await self._send(good)
        except Exception:  # a bug: sending it again would fail the same way
            self._fail()
            return False
        if delivered:
            self._metrics.sent_samples.labels(self.name).inc(delivered)
            self._stats.delivered(delivered, self._clock() - started)
        await self._dead_letters.flush()  # refused parts on disk before the queue moves on
        return True

    def _fail(self) -> None:
        """Called in the ``except`` of a bug in the send path: log it once with its
        traceback, set :attr:`failed` and ``rwrouter_destination_failed`` to 1, and wake every
        sender so that it stops (a batch in flight elsewhere completes first); resharding
        stops too. Nothing acknowledged is lost: batches not done stay in the disk queue
        (appends go on, up to ``max_disk_bytes``, then ``on_full`` applies). The operator
        reloads (``SIGHUP``, ``POST /-/reload``: a failed destination is replaced, even with
        an unchanged entry, and its successor sends the queue) or restarts rwrouter."""
        if self.failed:
            return
        self.failed = True
        log.exception(
            kv(
                destination=self.name,
                msg=(
                    "sending failed on a bug: this destination stopped sending, its queue stays "
                    "on disk until a reload or a restart"
                ),
            )
        )
        self._metrics.destination_failed.labels(self.name).set(1)
        self.wake()

    def _without_undecodable(
        self, batch: Batch, *, stored_too: bool = False, sent: bool = True
    ) -> Batch:
        """The batch without its chunks whose stored body does not decompress (counted as
        corrupt; ``sent``: and done, else the caller's batch completes them); stored records
        are sent as stored, not decompressed here, unless ``stored_too`` (re-hashing or a
        refusal needs every body)."""
        if batch.stored and not stored_too:
            return batch
        good: list[Chunk] = []
        for chunk in batch.chunks:
            try:
                chunk.body  # noqa: B018  (decompressed here, once)
                good.append(chunk)
            except DecodeError as exc:
                self._corrupt([chunk], exc, sent=sent)
        if len(good) == len(batch.chunks):
            return batch
        return Batch(good, sum(c.samples for c in good), sum(c.nbytes for c in good))

    def _corrupt(self, chunks: list[Chunk], error: DecodeError, *, sent: bool = True) -> None:
        """Stored series whose body does not decompress (the record passed its checksum, so
        it was damaged before it was written): counted as ``corrupt`` and done, like a record
        failing its checksum. ``sent``: tell the reader they are done (``on_done``; False:
        :meth:`_send`'s caller does)."""
        samples = sum(chunk.samples for chunk in chunks)
        log.error(
            kv(
                destination=self.name,
                samples=samples,
                msg="undecodable stored series skipped",
                error=error,
            )
        )
        self._queue_metrics.corrupt_records.labels(self.name).inc()
        self._metrics.dropped_samples.labels(self.name, DropReason.CORRUPT).inc(samples)
        if sent:
            nbytes = sum(chunk.nbytes for chunk in chunks)
            self._on_done(Batch(chunks, samples, nbytes))

    async def _reshard_loop(self) -> None:
        """Every ``reshard_interval`` seconds, change the shard count if the load asks for it."""
        q_, stopping = self._q, self._stopping
        while not stopping.closing and not self.failed:
            await stopping.sleep(self._reshard_interval)
            stats, self._stats = self._stats, _IntervalStats()
            failures = self._deliverer.take_failures()
            if failures or stopping.closing or self.failed:
                continue  # more senders do not help a failing destination
            wanted = desired_shards(
                current=len(self.buffers),
                min_shards=q_.min_shards,
                max_shards=q_.max_shards,
                samples_in=stats.samples_in,
                samples_out=stats.samples_out,
                send_seconds=stats.send_seconds,
                pending=self._backlog(),
                interval=self._reshard_interval,
            )
            if wanted != len(self.buffers):
                await self.reshard(wanted)

    async def reshard(self, shards: int) -> None:
        """Change to ``shards`` shards: let every sender finish its batch in flight, re-hash
        what waits (in order), restart the senders."""
        log.info(
            kv(
                destination=self.name,
                msg="resharding",
                **{"from": len(self.buffers)},
                to=shards,
            )
        )
        self._pausing = True
        self.wake()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        # Even when stop() came meanwhile, restart the senders: they drain what waits.
        for buf in self.buffers:  # re-hashing needs the bodies: a stored one may not decompress
            waiting = Batch(list(buf.chunks), buf.samples, buf.nbytes)
            kept = self._without_undecodable(waiting, stored_too=True)
            if len(kept.chunks) != len(buf.chunks):
                buf.chunks = deque(kept.chunks)
                buf.samples, buf.nbytes = kept.samples, kept.nbytes
        self.buffers = reshard(self.buffers, shards)  # no await from here: the reader waits
        self._wake = [asyncio.Event() for _ in self.buffers]
        self.wake()
        self._pausing = False
        self.start()


class _IntervalStats:
    """What happened since the last resharding decision: samples offered and delivered, and
    seconds spent sending."""

    __slots__ = ("samples_in", "samples_out", "send_seconds")

    def __init__(self) -> None:
        self.samples_in = self.samples_out = 0
        self.send_seconds = 0.0

    def delivered(self, samples: int, seconds: float) -> None:
        self.samples_out += samples
        self.send_seconds += seconds
