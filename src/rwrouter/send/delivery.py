"""Delivery of one batch to one destination: sign, send, retry, refresh, split.

- Retries follow :class:`~rwrouter.send.retry.RetryPolicy` (network errors, 5xx, opt-in
  429; Retry-After; backoff with jitter; a retry budget in seconds counted from the batch's
  first attempt) and re-send the same compressed bytes. Source: RW 1.0 spec, Prometheus
  ``storage/remote``; the budget is rwrouter's own.
- A 401 or 403 makes the authenticator refresh its credentials if it can (SigV4: always, once);
  the request is then retried once. A second 401/403 for the same request, or one the
  authenticator cannot help with (no auth, basic auth, Authorization header), is final.
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
- A batch being retried when its destination is handed over to a successor (a reload
  replaced it: :attr:`Deliverer.abandon` says so) stops retrying: :meth:`Deliverer.deliver`
  raises :class:`~rwrouter.send.stopping.HandedOver` instead of waiting for an answer that
  may never come; the batch stays on disk and the successor sends it.
- An attempt whose request cannot be built (a ValueError from the HTTP client: a header value
  with CR or LF) counts as one without an answer: retried with backoff, given up after
  ``max_retry_duration`` (``retry_budget``), as a network error is.
- Every part refused for good is counted (``dropped_samples``/``dropped_metadata`` by
  :attr:`~rwrouter.send.refusals.Refusal.reason`), logged, and handed to the ``on_rejected``
  hook (the dead-letter store), once per part, with the batch's tenant.
- A destination with a ``tenant_header`` (``X-Scope-OrgID``) gets each batch's tenant in it
  (batches never mix tenants); a batch without a tenant gets the configured header of that
  name, if any.
- Samples go out in :attr:`Deliverer.message` (``protobuf_message``), each part (a split
  half too) encoded for it by :mod:`rwrouter.send.encoding`; metadata requests are RW 1.0.
  An RW 2.0 destination that does not speak it (415, or a 2xx that wrote nothing) gets the
  same part again at once as RW 1.0, and RW 1.0 from then on (``on_protocol``) until
  :meth:`Deliverer.use` (a reload). What a 2xx's Written headers say was not written is
  counted (``dropped_samples``, ``not_written``) and logged at most once per batch and minute.
- With a :class:`~rwrouter.send.pacer.Pacer` (``queue_config.max_samples_per_second``),
  every attempt first waits for its samples (metadata entries) in the destination's token
  bucket, and every 429 lowers the paced rate (:mod:`rwrouter.send.pacing`).
- With a sample age limit (``queue_config.sample_age_limit``), every part goes without its
  samples too old at the wall clock's now, and is filtered and encoded again when a retry
  finds it holding some (:mod:`rwrouter.send.too_old`); a part left with none is done.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any

from rwrouter import USER_AGENT
from rwrouter.auth.schemes import Authenticator
from rwrouter.errors import CredentialsError, InvariantError, TransportError
from rwrouter.logs import kv
from rwrouter.metrics import SendMetrics
from rwrouter.protocol import MESSAGES, RW1_MESSAGE, RW2_MESSAGE, Written, request_headers
from rwrouter.reasons import DropReason, FallbackReason, RetryReason
from rwrouter.send.age import SampleAgeLimit
from rwrouter.send.encoding import (
    FALLBACK_MESSAGES,
    NOT_WRITTEN_MESSAGE,
    NotRW2,
    Request,
    encode_part,
    not_rw2,
    not_written,
)
from rwrouter.send.metabook import MetadataBook
from rwrouter.send.pacer import Pacer
from rwrouter.send.refusals import Item, Kind, Refusal, RejectHook, is_out_of_order, reason_of
from rwrouter.send.retry import RetryPolicy
from rwrouter.send.stopping import HandedOver
from rwrouter.send.too_old import STALE, Stale, TooOld
from rwrouter.send.transport import Answer, WriteClient
from rwrouter.wire.age import Recent

log = logging.getLogger("rwrouter.sending")

SPLITTABLE = frozenset((400, 409, 413, 422))  # refusals of the content, not of the request
SPLIT_BUDGET = 64  # extra requests one batch may cost to isolate its refused series
NOT_WRITTEN_LOG_INTERVAL = 60.0  # seconds between two "not written" log lines

_MESSAGES = {
    DropReason.TOO_LARGE: "series larger than the destination accepts, not retried",
    DropReason.RETRY_BUDGET: "retry budget spent, not retried further",
}


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
    stale_at: float | None = None  # wall seconds when the part in flight holds too old samples
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
    """Sends batches for one destination (see the module docstring).

    ``transport``: the destination's HTTP client, a
    :class:`~rwrouter.send.transport.WriteClient` (the aiohttp
    :class:`~rwrouter.send.transport.Transport`, or a test's). ``headers``: the destination's
    configured headers (the protocol's own are added per request,
    :func:`rwrouter.protocol.request_headers`). ``message``: the protobuf message samples go
    out in (``protobuf_message``); ``book``: the metadata of an RW 2.0
    destination. ``tenant_header``: the header a batch's tenant goes in (None: never sent).
    ``on_rejected(items, kind, refusal, tenant)``: called on the event loop,
    synchronously, once for every part refused for good (it must not block: file writes go
    to a thread); an exception it raises is logged, not propagated. ``on_protocol(message)``:
    called when the destination turned out not to speak RW 2.0 (now RW 1.0); an attribute,
    which the :class:`~rwrouter.pipeline.destination.Destination` owning the deliverer sets;
    ``abandon()``: whether to stop retrying (raise
    :class:`~rwrouter.send.stopping.HandedOver`), an attribute the shards set.
    ``pacer``: the destination's pacing (None: not paced).
    ``age``: the destination's sample age limit (``queue_config.sample_age_limit``; None or
    0: off; :class:`~rwrouter.send.too_old.TooOld` applies it). ``clock``: monotonic
    seconds (durations, retry budget); ``wall_clock``: unix seconds (Retry-After dates, the
    sample age limit). Clocks, randomness and sleep are injectable for tests.
    """

    def __init__(
        self,
        *,
        name: str,
        transport: WriteClient,
        auth: Authenticator,
        policy: RetryPolicy,
        metrics: SendMetrics,
        headers: Mapping[str, str] | None = None,
        tenant_header: str | None = None,
        message: str = RW1_MESSAGE,
        book: MetadataBook | None = None,
        age: SampleAgeLimit | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], Coroutine[Any, Any, None]] = asyncio.sleep,
        on_rejected: RejectHook | None = None,
        on_protocol: Callable[[str], None] | None = None,
        pacer: Pacer | None = None,
    ) -> None:
        self.name = name
        self.pacer = pacer
        self.transport = transport
        self.auth = auth
        self.policy = policy
        configured = dict(headers or {})
        self._headers = {m: {**configured, **request_headers(m)} for m in MESSAGES}
        self.tenant_header = tenant_header
        # with a tenant, the configured header of that name (in any case) gives way to it
        tenant_key = (tenant_header or "").lower()
        self._tenant_base = {
            m: {k: v for k, v in self._headers[m].items() if k.lower() != tenant_key}
            for m in MESSAGES
        }
        self.message = message
        self.book = book
        self.metrics = metrics
        self.too_old = (
            TooOld(name=name, limit=age, metrics=metrics, clock=clock, wall_clock=wall_clock)
            if age is not None and age.active
            else None
        )
        self._clock, self._wall, self._rand, self._sleep = clock, wall_clock, rand, sleep
        self._on_rejected = on_rejected
        self.on_protocol = on_protocol
        self.abandon: Callable[[], bool] = _never  # the shards: stop at a handover
        self.failures = 0  # retried attempts, for the resharding decision
        self._not_written_at: float | None = None  # when "not written" was last logged
        self._not_sent_logged = False  # whether a request that could not be built was logged

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
        samples too old now go first, and again whenever a retry finds it stale; a part left
        with none is done (0 delivered)."""
        too_old = self.too_old if kind == Kind.SAMPLES else None
        while True:
            if too_old is not None:
                recent = too_old.recent(part.raw)
                delivery.stale_at = too_old.stale_at(recent)
                if recent.dropped:
                    part = part.recent(recent)
                    if not part.count:
                        return part, 0
            result = await self._send_whole(part, kind, delivery)
            if not isinstance(result, Stale):
                return part, result

    async def _send_whole(
        self, part: _Part, kind: Kind, delivery: _Delivery
    ) -> int | Refusal | Stale:
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
        self._refused(items, kind, count, refusal, delivery.tenant)
        return 0

    async def _send(
        self, raw: bytes, count: int, kind: Kind, delivery: _Delivery
    ) -> int | Refusal | Stale:
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
    ) -> int | Refusal | NotRW2 | Stale:
        """Send one encoded request with retries and read the answer's Written headers;
        :data:`STALE` when, retried, it came to hold samples too old to send."""
        answer = await self._post(
            request.body,
            kind,
            request.message,
            delivery.started,
            delivery.tenant,
            count,
            delivery,
        )
        if isinstance(answer, Stale):
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
            self._not_written(missing, delivery)
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

    def _not_written(self, missing: Written, delivery: _Delivery) -> None:
        """Count (``not_written``) and log (at most once per batch and a minute) what a 2xx
        said was not written."""
        self.metrics.dropped_samples.labels(self.name, DropReason.NOT_WRITTEN).inc(missing.total)
        now = self._clock()
        last = self._not_written_at
        recent = last is not None and now - last < NOT_WRITTEN_LOG_INTERVAL
        if delivery.not_written_logged or recent:
            return
        delivery.not_written_logged = True
        self._not_written_at = now
        log.warning(
            kv(
                destination=self.name,
                samples=missing.samples,
                histograms=missing.histograms,
                exemplars=missing.exemplars,
                reason=DropReason.NOT_WRITTEN,
                msg=NOT_WRITTEN_MESSAGE,
            )
        )

    async def send_body(
        self,
        body: bytes,
        kind: Kind,
        *,
        started: float | None = None,
        message: str = RW1_MESSAGE,
        tenant: str | None = None,
    ) -> Refusal | None:
        """Send one snappy-compressed write request body of ``kind``
        in ``message`` with retries, a credential refresh on 401/403, and the retry budget
        counted from ``started`` (clock seconds; default now); ``tenant``: sent in the
        ``tenant_header``. None when delivered (2xx), else the final refusal. Nothing is
        counted as sent or dropped here: that is the caller's."""
        answer = await self._post(body, kind, message, started, tenant)
        return answer if isinstance(answer, Refusal) else None

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

    async def _post(
        self,
        body: bytes,
        kind: Kind,
        message: str,
        started: float | None,
        tenant: str | None,
        count: int = 0,
        delivery: _Delivery | None = None,
    ) -> Refusal | Mapping[str, str] | Stale:
        """POST ``body`` (``count`` samples or metadata entries, for the pacing) with
        retries: the headers of the 2xx answer, or the final refusal; :data:`STALE` when,
        before a retry, the wall clock passed ``delivery.stale_at`` (the attempts so far stay
        in ``delivery.attempt``, for the backoff of the part sent again)."""
        started = self._clock() if started is None else started
        attempt = 0
        if delivery is not None:
            attempt, delivery.attempt = delivery.attempt, 0
        refreshed = False
        while True:
            if self.pacer is not None and count:
                await self.pacer.wait(count)
            answer = await self._attempt(body, message, tenant)
            status = answer.status if isinstance(answer, Answer) else None
            if status == 429 and self.pacer is not None:
                self.pacer.throttled(status)
            if isinstance(answer, Answer) and 200 <= answer.status < 300:
                return answer.headers
            text = answer.text if isinstance(answer, Answer) else str(answer)
            if status is not None and not refreshed:
                refreshed = await self._refresh(status, text)
                if refreshed:
                    continue
            retry_after = answer.headers.get("Retry-After") if isinstance(answer, Answer) else None
            decision = self.policy.decide(
                status,
                attempt=attempt,
                retry_after=retry_after,
                now=self._wall(),
                rand=self._rand(),
                elapsed=self._clock() - started,
            )
            if not decision.retry:
                budget = decision.reason is DropReason.RETRY_BUDGET
                final = DropReason.RETRY_BUDGET if budget else reason_of(status)
                return Refusal(status, text, final)
            if self.abandon():
                raise HandedOver(f"destination {self.name} handed over while retrying")
            self._retrying(kind, status, attempt, decision.delay, text)
            await self._sleep(decision.delay)
            attempt += 1
            if (
                delivery is not None
                and self.too_old is not None
                and self.too_old.stale(delivery.stale_at)
            ):
                delivery.attempt = attempt
                return STALE

    def _retrying(
        self, kind: Kind, status: int | None, attempt: int, delay: float, text: str
    ) -> None:
        """Count a failed attempt that will be retried in ``delay`` seconds, and log
        attempts 1, 2, 4, 8, ..."""
        self.metrics.retries.labels(self.name, _retry_label(status)).inc()
        self.failures += 1
        if (attempt + 1) & attempt == 0:
            log.warning(
                kv(
                    destination=self.name,
                    kind=kind,
                    status=status or "none",
                    attempt=attempt + 1,
                    retry_in=f"{delay:.3f}s",
                    error=text[:200],
                )
            )

    async def _attempt(self, body: bytes, message: str, tenant: str | None) -> Answer | Exception:
        """One signed POST of a ``message`` body (``tenant`` in the tenant header); the
        answer, or the error that prevented one."""
        started = self._clock()
        base = self._headers[message]
        if tenant is not None and self.tenant_header is not None:
            base = {**self._tenant_base[message], self.tenant_header: tenant}
        try:
            headers = await self.auth.headers(url=self.transport.url, body=body, base=base)
            headers["User-Agent"] = USER_AGENT
            self.metrics.sent_bytes.labels(self.name).inc(len(body))
            answer: Answer | Exception = await self.transport.post(body, headers)
        except (TransportError, CredentialsError) as exc:
            answer = exc
        except ValueError as exc:  # the request cannot be built, e.g. CR/LF in a header value
            answer = self._not_sent(exc)
        code = str(answer.status) if isinstance(answer, Answer) else "error"
        self.metrics.sent_requests.labels(self.name, code).inc()
        self.metrics.send_duration.labels(self.name).observe(self._clock() - started)
        return answer

    def _not_sent(self, exc: ValueError) -> TransportError:
        """A request the HTTP client refused to build (aiohttp raises ValueError for a header
        value with a control character such as CR or LF, from a credentials file rotated to a
        bad one, say) as an attempt without an answer: retried with backoff and given up
        after ``max_retry_duration`` like a network error. Logged with its traceback once per
        deliverer (then by the retry log lines); the error names no header value."""
        if not self._not_sent_logged:
            self._not_sent_logged = True
            log.exception(
                kv(
                    destination=self.name,
                    msg="the request could not be built: retried as a failed attempt",
                    error=exc,
                )
            )
        error = TransportError(f"request not sent: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        return error

    async def _refresh(self, status: int, text: str) -> bool:
        """Ask the authenticator to refresh after a refusal (SigV4: a 401 or 403); True means
        retry now (once per request)."""
        try:
            refreshed = await self.auth.refresh_after(status=status, body_text=text)
        except CredentialsError as exc:
            log.warning(kv(destination=self.name, msg="credential refresh failed", error=exc))
            return False
        if refreshed:
            self.metrics.retries.labels(self.name, RetryReason.CREDENTIAL_REFRESH).inc()
            log.info(
                kv(
                    destination=self.name,
                    status=status,
                    msg="credentials refreshed, retrying once",
                )
            )
        return refreshed

    def _refused(
        self, items: list[Item], kind: Kind, count: int, refusal: Refusal, tenant: str | None
    ) -> None:
        """Count, log and hand to ``on_rejected`` a part refused for good (of ``tenant``)."""
        if kind == Kind.SAMPLES:
            self.metrics.dropped_samples.labels(self.name, refusal.reason).inc(count)
        else:
            self.metrics.dropped_metadata.labels(self.name, refusal.reason).inc(count)
        message = _MESSAGES.get(refusal.reason, "refused by destination, not retried")
        log.error(
            kv(
                destination=self.name,
                kind=kind,
                status=refusal.status,
                reason=refusal.reason,
                dropped=count,
                msg=message,
                body=refusal.text[:1024],
            )
        )
        if self._on_rejected is None:
            return
        try:
            self._on_rejected(items, kind, refusal, tenant)
        except Exception:  # a broken hook must not stop the sender of this destination
            log.exception(kv(destination=self.name, kind=kind, msg="on_rejected hook failed"))


def _never() -> bool:
    return False


def _retry_label(status: int | None) -> str:
    """The retries counter's label value: the exact status ("503", "429"), or ``network``."""
    return str(status) if status is not None else RetryReason.NETWORK
