"""Delivery of one batch to one destination: encode, send, split, fall back.

Each request goes through the destination's :class:`~rwrouter.send.attempts.Attempts`
(signed, retried with backoff, credentials refreshed on 401/403, paced, stopped at a
handover); this module decides what the requests are:

- A content refusal (400, 409, 422) or a 413 (too large) of a batch of several series is split
  in halves, each sent on its own, so one invalid series (say an out-of-bounds timestamp from
  one sender) costs only itself and not the other senders' series batched with it. Receivers
  such as Prometheus roll back a whole request on the first bad sample. The split is bounded per
  batch (:data:`SPLIT_BUDGET` requests); what is still refused then is dropped, counted and
  logged. A single series refused with 413 is final (reason ``too_large``): it can never fit.
- A batch sent again after a crash (``resent``: it may have been delivered before) is never
  mixed with newer data. A destination refuses a whole request holding samples it already has
  as "out of order" (Prometheus TSDB; only an exact copy of a series' newest sample passes), so
  such a refusal is split until every series is isolated, and a single series refused as out
  of order is counted as already delivered (``samples_already_delivered``), not dropped:
  per-series order means its sample, or a newer one, reached the destination before.
- Every part refused for good is counted (``dropped_samples``/``dropped_metadata`` by
  :attr:`~rwrouter.send.refusals.Refusal.reason`), logged, and handed to the ``on_rejected``
  hook (the dead-letter store), once per part, with the batch's tenant (batches never mix
  tenants; it goes in the destination's ``tenant_header``): :mod:`rwrouter.send.drops`.
- Samples go out in :attr:`Deliverer.message` (``protobuf_message``), each part (a split
  half too) encoded for it by :mod:`rwrouter.send.encoding`; metadata requests are RW 1.0.
  An RW 2.0 destination that does not speak it (415, or a 2xx that wrote nothing) gets the
  same part again at once as RW 1.0, and RW 1.0 from then on (``on_protocol``) until
  :meth:`Deliverer.use` (a reload). What a 2xx's Written headers say was not written is
  counted (``dropped_samples``, ``not_written``) and logged at most once per batch and minute
  (:mod:`rwrouter.send.drops`).
- With a sample age limit (``queue_config.sample_age_limit``), every part goes without its
  samples too old at the wall clock's now, and is filtered and encoded again when a retry
  finds it holding some (:mod:`rwrouter.send.too_old`); a part left with none is done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from rwrouter.errors import InvariantError
from rwrouter.logs import kv
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE, Written
from rwrouter.reasons import DropReason, FallbackReason
from rwrouter.send.age import SampleAgeLimit
from rwrouter.send.attempts import Attempts
from rwrouter.send.drops import Drops
from rwrouter.send.encoding import (
    FALLBACK_MESSAGES,
    NotRW2,
    Request,
    encode_part,
    not_rw2,
    not_written,
)
from rwrouter.send.metabook import MetadataBook
from rwrouter.send.refusals import Item, Kind, Refusal, RejectHook, is_out_of_order
from rwrouter.send.too_old import Aged, TooOld
from rwrouter.wire.age import Recent

log = logging.getLogger("rwrouter.sending")

SPLITTABLE = frozenset((400, 409, 413, 422))  # refusals of the content, not of the request
SPLIT_BUDGET = 64  # extra requests one batch may cost to isolate its refused series


@dataclass(slots=True)
class _Delivery:
    """The delivery of one batch, shared by its parts (the halves of a split): when it
    started (clock seconds: the retry budget counts from it), the split budget left, whether
    it is sent again after a crash, and what was logged about it already."""

    started: float
    splits: int = SPLIT_BUDGET
    resent: bool = False
    split_logged: bool = False
    start_timestamps: bool = False  # some record of it is flagged FLAG_START_TIMESTAMPS
    not_written_logged: bool = False
    tenant: str | None = None  # sent in the tenant header (None: the configured headers')
    aged_at: float | None = None  # wall seconds when the part in flight holds too old samples
    attempt: int = 0  # the attempts of a part filtered again while retried (its backoff)


@dataclass(frozen=True, slots=True)
class _Part:
    """A part as it is sent: its frames (``raw``) carrying ``count`` samples, its (frame,
    samples) items on demand (``expand``: walked only when it is refused), and its stored
    snappy block (``compressed``: sent as it is, RW 1.0) or None."""

    raw: bytes
    count: int
    expand: Callable[[], list[Item]]
    compressed: bytes | None = None

    def recent(self, recent: Recent) -> _Part:
        """This part with only the frames a sample age limit left (``recent``)."""
        items = recent.items
        expand = self.expand if items is None else lambda: items
        return _Part(recent.body, recent.kept, expand)


class Deliverer:
    """Sends batches for one destination (see the module docstring) through ``attempts``,
    whose name, metrics and clocks it shares (``clock``: monotonic seconds, the retry budget;
    ``wall_clock``: unix seconds, the sample age limit).

    ``message``: the protobuf message samples go out in (``protobuf_message``); ``book``:
    the metadata of an RW 2.0 destination. ``on_rejected(items, kind, refusal, tenant)``:
    the dead-letter hook, called once for every part refused for good
    (:meth:`~rwrouter.send.drops.Drops.rejected`).
    ``on_protocol(message)``: called when the destination turned out not to speak RW 2.0
    (now RW 1.0); an attribute, which the
    :class:`~rwrouter.pipeline.destination.Destination` owning the deliverer sets.
    ``age``: the destination's sample age limit (``queue_config.sample_age_limit``; None or
    0: off; :class:`~rwrouter.send.too_old.TooOld` applies it).
    """

    def __init__(
        self,
        *,
        attempts: Attempts,
        message: str = RW1_MESSAGE,
        book: MetadataBook | None = None,
        age: SampleAgeLimit | None = None,
        on_rejected: RejectHook | None = None,
        on_protocol: Callable[[str], None] | None = None,
    ) -> None:
        self.name, self.metrics = attempts.name, attempts.metrics
        self._attempts, self._clock = attempts, attempts.clock
        self.message = message
        self.book = book
        self.too_old = (
            TooOld(
                name=self.name,
                limit=age,
                metrics=self.metrics,
                clock=attempts.clock,
                wall_clock=attempts.wall_clock,
            )
            if age is not None and age.active
            else None
        )
        self._drops = Drops(
            name=self.name, metrics=self.metrics, clock=attempts.clock, on_rejected=on_rejected
        )
        self.on_protocol = on_protocol

    async def start(self) -> None:
        """Open the destination's HTTP client (before the first batch)."""
        await self._attempts.start()

    async def close(self) -> None:
        """Close the destination's HTTP client (after the last batch)."""
        await self._attempts.close()

    def take_failures(self) -> int:
        """The attempts retried since the last call, for the resharding decision (a failing
        destination gets no more shards)."""
        return self._attempts.take_failures()

    def use(self, message: str) -> None:
        """Send samples in ``message`` from now on (a reload tries RW 2.0 again)."""
        self.message = message

    @property
    def ages(self) -> bool:
        """Whether samples too old are dropped (a sample age limit is set): then
        :meth:`deliver_raw` needs the frames (``raw``) of every batch, stored ones too."""
        return self.too_old is not None

    def sends_stored(self, *, start_timestamps: bool) -> bool:
        """Whether stored records go out as they are stored (RW 1.0, no start timestamps):
        then :meth:`deliver_raw` may be given their compressed blocks."""
        return self.message == RW1_MESSAGE and not start_timestamps

    async def deliver(
        self,
        items: list[Item],
        kind: Kind,
        *,
        resent: bool = False,
        start_timestamps: bool = False,
        tenant: str | None = None,
    ) -> int:
        """Deliver a batch of ``kind``; returns how many of its
        samples (metadata entries) were delivered. Refused parts are counted, logged and handed
        to ``on_rejected``. ``resent``: the batch may have been delivered before a crash (see
        the module docstring); it may be split down to single series. ``start_timestamps``:
        some of its frames may carry start timestamps (stripped for RW 1.0). ``tenant``: the
        tenant of all its series (sent in the ``tenant_header``), or None."""
        splits = 2 * len(items) if resent else SPLIT_BUDGET
        delivery = _Delivery(
            started=self._clock(),
            splits=splits,
            resent=resent,
            start_timestamps=start_timestamps,
            tenant=tenant,
        )
        return await self._deliver_part(items, kind, delivery)

    async def _deliver_part(self, items: list[Item], kind: Kind, delivery: _Delivery) -> int:
        part = _Part(b"".join(frame for frame, _ in items), sum(n for _, n in items), lambda: items)
        part, result = await self._send_part(part, kind, delivery)
        if not isinstance(result, Refusal):
            return result
        return await self._refused_part(part.expand(), kind, delivery, result, part.count)

    async def deliver_raw(
        self,
        raw: bytes,
        count: int,
        expand: Callable[[], list[Item]],
        *,
        kind: Kind = Kind.SAMPLES,
        resent: bool = False,
        compressed: bytes | None = None,
        start_timestamps: bool = False,
        tenant: str | None = None,
    ) -> int:
        """:meth:`deliver` for a batch given as its frames already concatenated (``raw``) with
        ``count`` samples: the usual case costs no walk over its series; ``expand()`` gives
        the (frame, samples) items only when the batch is refused and must be split. With
        ``compressed`` (the batch already snappy-compressed, only when :meth:`sends_stored`),
        that is sent as RW 1.0 unless some of its samples are too old (:attr:`ages`: then
        ``raw`` must be given too)."""
        delivery = _Delivery(
            started=self._clock(),
            splits=SPLIT_BUDGET,
            resent=resent,
            start_timestamps=start_timestamps,
            tenant=tenant,
        )
        if self.too_old is not None and count and not raw:
            raise InvariantError("a sample age limit needs the frames of a stored batch")
        part = _Part(raw, count, expand, compressed)
        part, result = await self._send_part(part, kind, delivery)
        if not isinstance(result, Refusal):
            return result
        items = part.expand()
        if resent:
            delivery.splits = 2 * len(items)
        return await self._refused_part(items, kind, delivery, result, part.count)

    async def _send_part(
        self, part: _Part, kind: Kind, delivery: _Delivery
    ) -> tuple[_Part, int | Refusal]:
        """Send ``part`` with retries (:meth:`_send_whole`): the part as last sent and the
        samples delivered, or the final refusal. With a sample age limit (samples only), its
        samples too old now go first, and again whenever a retry finds it aged; a part left
        with none is done (0 delivered)."""
        too_old = self.too_old if kind == Kind.SAMPLES else None
        while True:
            if too_old is not None:
                recent = too_old.recent(part.raw)
                delivery.aged_at = too_old.aged_at(recent)
                if recent.dropped:
                    part = part.recent(recent)
                    if not part.count:
                        return part, 0
            result = await self._send_whole(part, kind, delivery)
            if not isinstance(result, Aged):
                return part, result
            delivery.attempt = result.attempt

    async def _send_whole(
        self, part: _Part, kind: Kind, delivery: _Delivery
    ) -> int | Refusal | Aged:
        """:meth:`_send` of a part, or its stored ``compressed`` body as it is."""
        if part.compressed is None:
            return await self._send(part.raw, part.count, kind, delivery)
        request = Request(part.compressed, RW1_MESSAGE)
        result = await self._send_request(request, part.count, kind, delivery)
        if isinstance(result, NotRW2):
            raise InvariantError("NotRW2 for a remote write 1.0 request (only 2.0 can be it)")
        return result

    async def _refused_part(
        self, items: list[Item], kind: Kind, delivery: _Delivery, refusal: Refusal, count: int
    ) -> int:
        """After ``items`` were refused: split them to isolate the cause, or give up on them."""
        if refusal.status in SPLITTABLE and len(items) > 1 and delivery.splits >= 2:
            delivery.splits -= 2
            if not delivery.split_logged:
                delivery.split_logged = True
                log.info(
                    kv(
                        destination=self.name,
                        kind=kind,
                        status=refusal.status,
                        msg="batch refused: splitting it to isolate the cause",
                    )
                )
            middle = len(items) // 2
            first = await self._deliver_part(items[:middle], kind, delivery)
            return first + await self._deliver_part(items[middle:], kind, delivery)
        if delivery.resent and len(items) == 1 and is_out_of_order(refusal.status, refusal.text):
            self.metrics.already_delivered.labels(self.name).inc(count)
            return 0
        if refusal.status == 413 and len(items) == 1:
            refusal = replace(refusal, reason=DropReason.TOO_LARGE)
        self._drops.rejected(items, kind, count, refusal, delivery.tenant)
        return 0

    async def _send(
        self, raw: bytes, count: int, kind: Kind, delivery: _Delivery
    ) -> int | Refusal | Aged:
        """Send one part (``raw``: its frames, ``count`` samples) in the protocol in use,
        with retries: the samples delivered, or the final refusal. Samples that an RW 2.0
        destination does not take as RW 2.0 (see :func:`~rwrouter.send.encoding.not_rw2`)
        go again at once as RW 1.0, and the destination falls back to it."""
        message = self.message if kind == Kind.SAMPLES else RW1_MESSAGE
        while True:
            request = encode_part(
                raw, message=message, start_timestamps=delivery.start_timestamps, book=self.book
            )
            result = await self._send_request(request, count, kind, delivery)
            if not isinstance(result, NotRW2):
                return result
            self._fall_back(result.reason)
            message = RW1_MESSAGE

    async def _send_request(
        self, request: Request, count: int, kind: Kind, delivery: _Delivery
    ) -> int | Refusal | NotRW2 | Aged:
        """Send one encoded request with retries and read the answer's Written headers;
        :class:`~rwrouter.send.too_old.Aged` when, retried, it came to hold samples too old
        to send (the backoff goes on from ``delivery.attempt``)."""
        attempt, delivery.attempt = delivery.attempt, 0
        too_old = self.too_old
        answer = await self._attempts.post(
            request.body,
            kind=kind,
            message=request.message,
            started=delivery.started,
            tenant=delivery.tenant,
            count=count,
            attempt=attempt,
            aged=None if too_old is None else partial(too_old.aged, delivery.aged_at),
        )
        if isinstance(answer, Aged):
            return answer
        status = answer.status if isinstance(answer, Refusal) else 200
        written = None if isinstance(answer, Refusal) else Written.parse(answer)
        if request.message == RW2_MESSAGE:
            reason = not_rw2(status=status, carried=request.carried, written=written)
            if reason is not None:
                return NotRW2(reason)
        if isinstance(answer, Refusal):
            return answer
        if request.removed:
            self.metrics.start_timestamps_dropped.labels(self.name).inc(request.removed)
        if kind != Kind.SAMPLES:
            return count
        if request.orphans:  # left out of the RW 2.0 request: never sent
            self.metrics.dropped_samples.labels(self.name, DropReason.ORPHAN_EXEMPLAR).inc(
                request.orphans
            )
            count -= min(count, request.orphans)
        missing = not_written(count=count, carried=request.carried, written=written)
        if missing.total:
            logged = delivery.not_written_logged
            delivery.not_written_logged |= self._drops.not_written(missing, logged=logged)
        return count - min(count, missing.total)

    def _fall_back(self, reason: FallbackReason) -> None:
        """The destination does not speak RW 2.0: RW 1.0 from now on (logged, counted once)."""
        if self.message == RW1_MESSAGE:
            return  # another shard's part noticed first
        self.message = RW1_MESSAGE
        self.metrics.protocol_fallbacks.labels(self.name, reason).inc()
        log.warning(
            kv(
                destination=self.name,
                now=RW1_MESSAGE,
                reason=reason,
                msg=FALLBACK_MESSAGES[reason],
            )
        )
        if self.on_protocol is not None:
            self.on_protocol(RW1_MESSAGE)

    async def send_frames(
        self, raw: bytes, count: int, kind: Kind = Kind.SAMPLES, *, tenant: str | None = None
    ) -> Refusal | None:
        """Send ``raw`` (RW1-form frames carrying ``count`` samples, start timestamps
        perhaps; ``tenant``: theirs) as one request in the protocol in use, falling back to RW
        1.0 as a batch does; None when delivered. For ``rwrouter rejected replay`` (no
        split)."""
        delivery = _Delivery(self._clock(), start_timestamps=True, tenant=tenant)
        result = await self._send(raw, count, kind, delivery)
        return result if isinstance(result, Refusal) else None
