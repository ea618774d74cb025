"""The sending side of a destination: shard buffers, one sender per shard, and resharding.

The reader (:mod:`rwrouter.send.reader`) hands each series read from the disk queue to its
shard (:meth:`Shards.add`). Each shard sends batches of at most ``max_samples_per_send``
samples and ``max_request_bytes`` bytes, cut when full or when the oldest frame waited
``batch_send_deadline`` seconds (at once when stopping); refused parts are on disk in the
dead-letter store before the batch is reported done (``on_sent``).

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
from contextlib import suppress

from rwrouter.config import QueueConfig
from rwrouter.errors import DecodeError, InvariantError
from rwrouter.logs import q
from rwrouter.metrics import Metrics
from rwrouter.queue.records import Block
from rwrouter.send.batching import (
    Batch,
    Chunk,
    ShardBuffer,
    chunks_by_shard,
    desired_shards,
    reshard,
)
from rwrouter.send.delivery import DeadLetterSink, Deliverer

log = logging.getLogger("rwrouter.sending")

RESHARD_INTERVAL = 10.0  # seconds, as Prometheus's shardUpdateDuration


class Stopping:
    """A destination's stop, shared by its appends, reader and senders: ``closing`` once
    :meth:`~rwrouter.pipeline.destination.Destination.stop_sending` began; ``handover`` when
    it does not drain (a reload hands the queue to a successor)."""

    __slots__ = ("_event", "handover")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.handover = False

    @property
    def closing(self) -> bool:
        """Whether the stop began."""
        return self._event.is_set()

    def set(self, *, handover: bool) -> None:
        """Begin the stop (``handover``: without draining)."""
        self.handover = handover
        self._event.set()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less when the stop begins meanwhile."""
        await wait_event(self._event, seconds)


async def wait_event(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set or ``seconds`` have passed, whichever comes first.

    A cancellation is never lost, unlike with ``asyncio.wait_for(event.wait(), seconds)``
    before Python 3.12, which returns normally when its task is cancelled just as the event is
    set (CPython issue #86296). A stop sets the senders' events and, with no time left to
    drain, cancels them at once: a sender that lost that cancellation went on to send (and to
    retry a destination that is down for ever), and the stop never returned.
    """
    with suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


class Shards:
    """The shard buffers and senders of one destination (see the module docstring).

    Callbacks: ``on_sent(batch)`` once a batch taken from a buffer is done (delivered or
    refused for good, the refused part on disk); ``backlog()``: samples waiting to be sent
    (read ahead or still on disk), for resharding; ``resent(owner)``: whether a frame's owner
    may have gone out before a crash (such frames never share a batch with newer ones, and go
    out marked as resent: :meth:`~rwrouter.send.delivery.Deliverer.deliver`).
    """

    def __init__(
        self,
        *,
        name: str,
        queue_config: QueueConfig,
        deliverer: Deliverer,
        dead_letters: DeadLetterSink,
        metrics: Metrics,
        clock: Callable[[], float],
        stopping: Stopping,
        on_sent: Callable[[Batch], None],
        backlog: Callable[[], int],
        resent: Callable[[object], bool],
        reshard_interval: float = RESHARD_INTERVAL,
    ) -> None:
        self.name = name
        self._q = queue_config
        self._deliverer, self._dead_letters = deliverer, dead_letters
        self._metrics, self._clock, self._stopping = metrics, clock, stopping
        self._on_sent, self._backlog, self._resent = on_sent, backlog, resent
        self._reshard_interval = reshard_interval
        self.buffers = [ShardBuffer() for _ in range(queue_config.min_shards)]
        self._wake = [asyncio.Event() for _ in self.buffers]
        self.tasks: list[asyncio.Task[None]] = []  # one sender per shard
        self._reshard_task: asyncio.Task[None] | None = None
        self._pausing = False  # a resharding waits for the senders to return
        self._input_done = False  # stopping, and the reader will add nothing more
        self._stats = _IntervalStats()

    def __len__(self) -> int:
        """The number of shards (concurrent senders) now."""
        return len(self.buffers)

    def add(self, block: Block, owner: object) -> None:
        """Hand a record's series to their shards, in order, as one chunk per shard tagged
        with ``owner`` (given back in the :class:`~rwrouter.send.batching.Batch` of
        ``on_sent``)."""
        now = self._clock()
        buffers, wake = self.buffers, self._wake
        max_samples = self._q.max_samples_per_send
        whole = Chunk(block.decoded, block.index, block.samples, block.series, owner,
                      compressed=block.compressed, nbytes=block.nbytes,
                      flags=block.flags)  # fmt: skip
        try:
            parts = chunks_by_shard(whole, len(buffers))  # decompresses it with several shards
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

    def remove_if(self, dropped: Callable[[object], bool]) -> list[Batch]:
        """Remove the waiting frames (not those in flight) whose owner ``dropped`` says so;
        returns them, one non-empty batch per shard."""
        gone = (buf.remove_if(dropped) for buf in self.buffers)
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
        while not self._pausing and not stopping.handover:
            if not buf.chunks:
                if stopping.closing and self._input_done:
                    return
                wake.clear()
                await wake.wait()
                continue
            now = self._clock()
            deadline = 0.0 if stopping.closing else q_.batch_send_deadline
            if not buf.ready(max_samples=q_.max_samples_per_send, max_bytes=q_.max_request_bytes,
                             deadline=deadline, now=now):  # fmt: skip
                wake.clear()
                if buf.first_at is None:
                    raise InvariantError("a buffer holding chunks knows when the first came")
                await wait_event(wake, deadline - (now - buf.first_at))
                continue
            batch = buf.take(
                max_samples=q_.max_samples_per_send, max_bytes=q_.max_request_bytes,
                group=self._resent,
            )  # fmt: skip
            batch = self._without_undecodable(batch)
            if not batch.chunks:
                continue
            if await self._send(batch):
                self._on_sent(batch)
            else:
                buf.put_back(batch)
                await asyncio.sleep(1.0)

    async def _send(self, batch: Batch) -> bool:
        """Deliver one batch and put its refused part on disk; False when delivery failed
        unexpectedly (a bug, not an answer: the caller keeps the batch and tries again)."""
        started = self._clock()
        try:
            flagged = batch.start_timestamps  # RW 1.0 strips them: the frames are needed
            stored = self._deliverer.sends_stored(start_timestamps=flagged)
            compressed = batch.compressed if stored else None
            delivered = await self._deliverer.deliver_raw(
                batch.raw if compressed is None else b"", batch.samples, lambda: batch.items,
                compressed=compressed, resent=self._resent(batch.chunks[0].owner),
                start_timestamps=flagged,
            )  # fmt: skip
        except DecodeError as exc:  # a stored body that does not decompress: done, counted
            if len(batch.chunks) == 1:
                self._corrupt(batch.chunks, exc, sent=False)
                return True
            # Several records spliced: nothing was delivered (the refusal needed the bodies,
            # or the splice failed); count the undecodable ones and send the others.
            good = self._without_undecodable(batch, stored_too=True, sent=False)
            return not good.chunks or await self._send(good)
        except Exception:
            log.exception("destination=%s msg=%s", self.name,
                          q("sending a batch failed unexpectedly: retrying in 1s"))  # fmt: skip
            return False
        if delivered:
            self._metrics.sent_samples.labels(self.name).inc(delivered)
            self._stats.delivered(delivered, self._clock() - started)
        await self._dead_letters.flush()  # refused parts on disk before the queue moves on
        return True

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
        failing its checksum. ``sent``: tell the reader they are done (False: :meth:`_send`'s
        caller does)."""
        samples = sum(chunk.samples for chunk in chunks)
        log.error("destination=%s samples=%d msg=%s error=%s", self.name, samples,
                  q("undecodable stored series skipped"), q(error))  # fmt: skip
        self._metrics.queue_corrupt_records.labels(self.name).inc()
        self._metrics.dropped_samples.labels(self.name, "corrupt").inc(samples)
        if sent:
            nbytes = sum(chunk.nbytes for chunk in chunks)
            self._on_sent(Batch(chunks, samples, nbytes))

    async def _reshard_loop(self) -> None:
        """Every ``reshard_interval`` seconds, change the shard count if the load asks for it."""
        q_, stopping = self._q, self._stopping
        while not stopping.closing:
            await stopping.sleep(self._reshard_interval)
            stats, self._stats = self._stats, _IntervalStats()
            failures, self._deliverer.failures = self._deliverer.failures, 0
            if failures or stopping.closing:
                continue  # more senders do not help a failing destination
            wanted = desired_shards(
                current=len(self.buffers), min_shards=q_.min_shards, max_shards=q_.max_shards,
                samples_in=stats.samples_in, samples_out=stats.samples_out,
                send_seconds=stats.send_seconds, pending=self._backlog(),
                interval=self._reshard_interval,
            )  # fmt: skip
            if wanted != len(self.buffers):
                await self.reshard(wanted)

    async def reshard(self, shards: int) -> None:
        """Change to ``shards`` shards: let every sender finish its batch in flight, re-hash
        what waits (in order), restart the senders."""
        log.info("destination=%s msg=%s from=%d to=%d", self.name, '"resharding"',
                 len(self.buffers), shards)  # fmt: skip
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
