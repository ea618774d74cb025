"""Sharding and batching policies for a destination's queue (pure).

Per-series order (RW 1.0 spec: samples of a series in timestamp order; receivers reject
out-of-order samples): every series is assigned to one shard by a hash of its label set, as
Prometheus does, and a shard has at most one batch in flight, so two batches carrying the same
series are never sent at once.

Every chunk belongs to the queue record it was cut from (its :class:`Owner`): frames of a
record that may have gone out before a crash never share a batch with newer ones, and the
reader (:mod:`rwrouter.send.reader`) counts a record done once all its chunks are.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from rwrouter.errors import InvariantError
from rwrouter.queue.records import FLAG_START_TIMESTAMPS
from rwrouter.wire import compress, splice_compressed
from rwrouter.wire.index import INDEX, Frames, Item, split_shards

_set = object.__setattr__  # Chunk is immutable, as Frames


class Owner:
    """The queue record a chunk was cut from, as the reader tracks it until it is done
    (:class:`~rwrouter.send.reader.QueueReader` adds where it ends in the queue).

    ``recovered``: it was read before a crash and not done, so it may have gone out already
    (its frames are batched apart and sent marked as resent). ``dropped``: its segment was
    dropped (``on_full: drop_oldest``): its waiting chunks go too. ``remaining`` and
    ``samples_left``: its series and samples not yet done (delivered, refused for good or
    dropped); the reader counts them down. ``tenant``: the tenant its record stores
    (:data:`~rwrouter.queue.records.FLAG_TENANT`; None: none), sent in the destination's
    ``tenant_header``: chunks of different tenants never share a batch. ``group``: its
    record's batch group (:data:`~rwrouter.queue.records.FLAG_GROUP`: one replica of an HA
    pair; 0: none): chunks of different groups never share a batch either, so the first
    series of a request speaks for all of it at a receiver's HA tracker.
    """

    __slots__ = ("dropped", "group", "recovered", "remaining", "samples_left", "tenant")

    def __init__(
        self,
        *,
        recovered: bool = False,
        series: int = 0,
        samples: int = 0,
        tenant: str | None = None,
        group: int = 0,
    ) -> None:
        self.recovered = recovered
        self.group = group
        self.dropped = False
        self.remaining = series
        self.samples_left = samples
        self.tenant = tenant


class Chunk(Frames):
    """Consecutive framed series of one queue record bound for one shard: their
    :class:`~rwrouter.wire.index.Frames` (body, index, totals) and the record they were cut
    from (``owner``), to tell when they are done. The sending side moves chunks, never single
    frames: a record's series are walked only to split it by shard (in C when the accelerator
    is built).

    A whole record may come with its body still ``compressed`` (its snappy block, exactly a
    write request body; see :class:`~rwrouter.wire.index.Frames`): sent alone, it goes out as
    it is stored, without being decompressed and compressed again; the body is decompressed
    only if needed. ``flags``: its record's
    (:data:`~rwrouter.queue.records.FLAG_START_TIMESTAMPS`).
    """

    __slots__ = ("flags", "owner")

    flags: int
    owner: Owner

    def __init__(
        self,
        body: bytes | None,
        index: bytes,
        samples: int,
        series: int,
        owner: Owner,
        *,
        compressed: bytes | None = None,
        nbytes: int | None = None,
        flags: int = 0,
    ) -> None:
        super().__init__(body, index, samples, series, compressed=compressed, nbytes=nbytes)
        _set(self, "owner", owner)
        _set(self, "flags", flags)

    def _compared(self) -> tuple[object, ...]:
        """Same frames, totals and owner (however the body is held)."""
        return (*super()._compared(), self.owner)

    def split(self, *, max_samples: int, max_bytes: int) -> tuple[Chunk, Chunk | None]:
        """The longest head within ``max_samples`` samples and ``max_bytes`` bytes (at least
        one frame), and the rest (None when nothing is left)."""
        taken = size = frames = 0
        for length, count, _ in INDEX.iter_unpack(self.index):
            if frames and (taken + count > max_samples or size + length > max_bytes):
                break
            taken += count
            size += length
            frames += 1
        if frames == self.series:
            return self, None
        cut = frames * INDEX.size
        head = Chunk(
            self.body[:size], self.index[:cut], taken, frames, self.owner, flags=self.flags
        )
        rest = Chunk(
            self.body[size:],
            self.index[cut:],
            self.samples - taken,
            self.series - frames,
            self.owner,
            flags=self.flags,
        )
        return head, rest


@dataclass(frozen=True, slots=True)
class Batch:
    """What :meth:`ShardBuffer.take` cut: chunks in order, their total samples and bytes."""

    chunks: list[Chunk]
    samples: int
    nbytes: int

    @property
    def tenant(self) -> str | None:
        """The tenant of its chunks (:meth:`ShardBuffer.take` never mixes them), or None."""
        return self.chunks[0].owner.tenant if self.chunks else None

    @property
    def start_timestamps(self) -> bool:
        """Some chunk's record may carry start timestamps (:data:`FLAG_START_TIMESTAMPS`)."""
        return any(chunk.flags & FLAG_START_TIMESTAMPS for chunk in self.chunks)

    @property
    def stored(self) -> bool:
        """Some chunk is a whole stored record (held compressed): see :attr:`compressed`."""
        return any(chunk.compressed is not None for chunk in self.chunks)

    @property
    def compressed(self) -> bytes | None:
        """The batch as a compressed write request when some chunk is a whole stored record:
        the stored blocks as they are and the other chunks compressed alone, spliced into one
        block (:func:`~rwrouter.wire.splice_compressed`: no stored record is decompressed and
        compressed again). None when no chunk is stored (then :attr:`raw` is compressed in
        one go). Raises DecodeError when a stored block's header is unreadable."""
        if not self.stored:
            return None
        return splice_compressed(
            [c.compressed if c.compressed is not None else compress(c.body) for c in self.chunks]
        )

    @property
    def raw(self) -> bytes:
        """The batch as an uncompressed write request: its frames concatenated."""
        if len(self.chunks) == 1:
            return self.chunks[0].body
        return b"".join(chunk.body for chunk in self.chunks)

    @property
    def items(self) -> list[Item]:
        """Each (framed series, samples), in order (walks the frames: refusals only)."""
        return [item for chunk in self.chunks for item in chunk.items()]


@dataclass(slots=True)
class ShardBuffer:
    """Chunks waiting in one shard, in arrival order.

    ``samples``/``nbytes``: totals waiting; ``first_at``: when (seconds, any monotonic clock)
    the oldest waiting chunk arrived, or None when empty.
    """

    chunks: deque[Chunk] = field(default_factory=deque)
    samples: int = 0
    nbytes: int = 0
    first_at: float | None = None

    def add(self, chunk: Chunk, *, now: float) -> None:
        """Append a chunk that arrived at ``now``."""
        if not self.chunks:
            self.first_at = now
        self.chunks.append(chunk)
        self.samples += chunk.samples
        self.nbytes += chunk.nbytes

    def ready(self, *, max_samples: int, max_bytes: int, deadline: float, now: float) -> bool:
        """A batch should be cut: a full batch waits (``max_samples`` samples or ``max_bytes``
        bytes), or the oldest chunk waited ``deadline`` seconds."""
        if not self.chunks:
            return False
        if self.first_at is None:
            raise InvariantError("a buffer holding chunks knows when the first came")
        return (
            self.samples >= max_samples
            or self.nbytes >= max_bytes
            or now - self.first_at >= deadline
        )

    def take(self, *, max_samples: int, max_bytes: int) -> Batch:
        """Remove and return the next batch: whole chunks in order while the batch stays within
        ``max_samples`` samples and ``max_bytes`` bytes; a first chunk larger than that is cut
        (at least one frame goes). Chunks of recovered records (:attr:`Owner.recovered`) and
        the others never share a batch, nor chunks of different tenants (:attr:`Owner.tenant`)
        or batch groups (:attr:`Owner.group`)."""
        chunks = self.chunks
        out: list[Chunk] = []
        taken = size = 0
        first = chunks[0].owner if chunks else None
        while chunks:
            chunk = chunks[0]
            if (
                first is not None
                and out
                and (
                    chunk.owner.recovered != first.recovered
                    or chunk.owner.tenant != first.tenant
                    or chunk.owner.group != first.group
                )
            ):
                break
            if taken + chunk.samples > max_samples or size + chunk.nbytes > max_bytes:
                if out:
                    break
                head, rest = chunk.split(max_samples=max_samples, max_bytes=max_bytes)
                if rest is not None:
                    chunks[0] = rest
                    out.append(head)
                    taken, size = head.samples, head.nbytes
                    break
            chunks.popleft()
            out.append(chunk)
            taken += chunk.samples
            size += chunk.nbytes
        self.samples -= taken
        self.nbytes -= size
        if not chunks:  # chunks left behind keep their age: they go out no later
            self.first_at = None
        return Batch(out, taken, size)

    def remove_dropped(self) -> Batch:
        """Remove (and return, in order) the waiting chunks of dropped records
        (:attr:`Owner.dropped`); the others keep their order and age."""
        kept: deque[Chunk] = deque()
        gone: list[Chunk] = []
        for chunk in self.chunks:
            (gone if chunk.owner.dropped else kept).append(chunk)
        samples, nbytes = sum(c.samples for c in gone), sum(c.nbytes for c in gone)
        self.chunks = kept
        self.samples -= samples
        self.nbytes -= nbytes
        if not kept:
            self.first_at = None
        return Batch(gone, samples, nbytes)

    def put_back(self, batch: Batch, *, now: float = 0.0) -> None:
        """Return a batch taken by :meth:`take` to the front, in its order (it goes next)."""
        for chunk in reversed(batch.chunks):
            self.chunks.appendleft(chunk)
        self.samples += batch.samples
        self.nbytes += batch.nbytes
        if self.first_at is None:
            self.first_at = now


def chunks_by_shard(chunk: Chunk, shards: int) -> list[Chunk | None]:
    """A chunk's frames as one chunk per shard (None for a shard that gets none), each in
    order, owned by the same owner: a frame goes to its shard hash modulo ``shards``
    (:func:`rwrouter.routing.shard_hash`, as Prometheus shards series; what
    :func:`~rwrouter.wire.index.split_shards` applies). With one shard, the chunk itself."""
    if shards == 1:
        return [chunk]
    return [
        Chunk(b, x, n, k, chunk.owner, flags=chunk.flags) if k else None
        for b, x, n, k in split_shards(chunk.body, chunk.index, shards)
    ]


def reshard(old: list[ShardBuffer], shards: int) -> list[ShardBuffer]:
    """Move every waiting chunk into ``shards`` new buffers by its frames' shard hashes
    (modulo ``shards``, as :func:`chunks_by_shard`).

    Per-series order holds: all frames of a series sit in one old buffer, and they are moved in
    their order. A chunk keeps the arrival time of the oldest chunk of its old buffer.
    """
    new = [ShardBuffer() for _ in range(shards)]
    for buf in old:
        arrived = buf.first_at if buf.first_at is not None else 0.0
        for chunk in buf.chunks:
            for target, part in zip(new, chunks_by_shard(chunk, shards), strict=True):
                if part is None:
                    continue
                target.add(part, now=arrived)
                first = target.first_at if target.first_at is not None else arrived
                target.first_at = min(arrived, first)
    return new


def desired_shards(
    *,
    current: int,
    min_shards: int,
    max_shards: int,
    samples_in: int,
    samples_out: int,
    send_seconds: float,
    pending: int,
    interval: float,
) -> int:
    """How many shards a destination should run, from what happened over the last ``interval``
    seconds (Prometheus ``calculateDesiredShards``, simplified).

    ``samples_in``: samples enqueued; ``samples_out``/``send_seconds``: samples delivered and the
    time their successful sends took; ``pending``: samples waiting now. The shards needed are
    ``time per sample x (incoming rate + 5% of the backlog per second)``; changes within 30% of
    ``current`` are ignored (no flapping), and without deliveries nothing changes (a failing
    destination is not helped by more senders).
    """
    if samples_out <= 0 or interval <= 0:
        return current
    time_per_sample = send_seconds / samples_out
    needed = time_per_sample * (samples_in / interval + 0.05 * pending)
    if current * 0.7 <= needed <= current * 1.3:
        return current
    return max(min_shards, min(max_shards, math.ceil(needed)))
