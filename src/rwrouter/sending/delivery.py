"""Delivery of one batch to one destination: sign, send, retry, refresh, split.

- Retries follow :class:`~rwrouter.sending.retry.RetryPolicy` (network errors, 5xx, opt-in
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
- Every part refused for good is counted (``dropped_samples``/``dropped_metadata`` by
  :attr:`Refusal.reason`), logged, and handed to the ``on_rejected`` hook (the dead-letter
  store), once per part.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from rwrouter import USER_AGENT
from rwrouter.auth.schemes import Authenticator
from rwrouter.errors import CredentialsError
from rwrouter.logs import q
from rwrouter.metrics import Metrics
from rwrouter.sending.retry import RETRY_BUDGET, RetryPolicy
from rwrouter.sending.transport import Answer, Transport, TransportError
from rwrouter.wire import compress

log = logging.getLogger("rwrouter.sending")

SPLITTABLE = frozenset((400, 409, 413, 422))  # refusals of the content, not of the request
SPLIT_BUDGET = 64  # extra requests one batch may cost to isolate its refused series
TOO_LARGE = "too_large"  # reason: a single series (metadata entry) refused with 413
CREDENTIAL_REFRESH = "credential_refresh"  # retries label value of the refresh retry

Item = tuple[bytes, int]  # a framed series (or metadata entry) and its sample count

_MESSAGES = {
    TOO_LARGE: "series larger than the destination accepts, not retried",
    RETRY_BUDGET: "retry budget spent, not retried further",
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """The final answer for a part that was not delivered.

    ``status``: the HTTP status (None: no answer). ``text``: the head of the answer's body, or
    the error that prevented an answer. ``reason``: why it is final, the ``reason`` label of the
    dropped counters: ``retry_budget``, ``too_large`` (413 for a single item), else the status
    class (``4xx``, ``3xx``), or ``refused`` without a status.
    """

    status: int | None
    text: str
    reason: str


RejectHook = Callable[[list[Item], str, Refusal], None]


@dataclass(slots=True)
class _Batch:
    """State shared by the parts of one batch: its start (clock seconds), split budget, and
    whether it is sent again after a crash."""

    started: float
    splits: int = SPLIT_BUDGET
    resent: bool = False
    split_logged: bool = False


def is_out_of_order(status: int | None, text: str) -> bool:
    """Whether an answer says the samples are older than what the destination has: Prometheus
    and Cortex (the managed workspace) "out of order sample", Mimir "out-of-order samples are
    not allowed"."""
    lowered = text.lower()
    return status == 400 and ("out of order" in lowered or "out-of-order" in lowered)


class Deliverer:
    """Sends batches for one destination (see the module docstring).

    ``base_headers``: the protocol headers plus the destination's configured headers.
    ``on_rejected(items, kind, refusal)``: called on the event loop, synchronously, once for
    every part refused for good (it must not block: file writes go to a thread); an exception
    it raises is logged, not propagated. ``clock``: monotonic seconds (durations, retry budget);
    ``wall_clock``: unix seconds (Retry-After dates). Clocks, randomness and sleep are
    injectable for tests.
    """

    def __init__(
        self,
        *,
        name: str,
        transport: Transport,
        auth: Authenticator,
        policy: RetryPolicy,
        base_headers: dict[str, str],
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], Coroutine[Any, Any, None]] = asyncio.sleep,
        on_rejected: RejectHook | None = None,
    ) -> None:
        self.name = name
        self.transport = transport
        self.auth = auth
        self.policy = policy
        self.base_headers = base_headers
        self.metrics = metrics
        self._clock, self._wall, self._rand, self._sleep = clock, wall_clock, rand, sleep
        self._on_rejected = on_rejected
        self.failures = 0  # retried attempts, for the resharding decision

    async def deliver(self, items: list[Item], kind: str, *, resent: bool = False) -> int:
        """Deliver a batch (``kind``: "samples" or "metadata"); returns how many of its
        samples (metadata entries) were delivered. Refused parts are counted, logged and handed
        to ``on_rejected``. ``resent``: the batch may have been delivered before a crash (see
        the module docstring); it may be split down to single series."""
        splits = 2 * len(items) if resent else SPLIT_BUDGET
        batch = _Batch(started=self._clock(), splits=splits, resent=resent)
        return await self._deliver_part(items, kind, batch)

    async def deliver_raw(
        self,
        raw: bytes,
        count: int,
        expand: Callable[[], list[Item]],
        *,
        kind: str = "samples",
        resent: bool = False,
        compressed: bytes | None = None,
    ) -> int:
        """:meth:`deliver` for a batch given as its frames already concatenated (``raw``) with
        ``count`` samples: the usual case costs no walk over its series; ``expand()`` gives
        the (frame, samples) items only when the batch is refused and must be split. With
        ``compressed`` (the batch already snappy-compressed), that is sent and ``raw`` is not
        used."""
        batch = _Batch(started=self._clock(), splits=SPLIT_BUDGET, resent=resent)
        if compressed is not None:
            refusal = await self.send_body(compressed, kind, started=batch.started)
        else:
            refusal = await self._send(raw, kind, batch)
        if refusal is None:
            return count
        items = expand()
        if resent:
            batch.splits = 2 * len(items)
        return await self._refused_part(items, kind, batch, refusal, count)

    async def _deliver_part(self, items: list[Item], kind: str, batch: _Batch) -> int:
        count = sum(n for _, n in items)
        refusal = await self._send(b"".join(frame for frame, _ in items), kind, batch)
        if refusal is None:
            return count
        return await self._refused_part(items, kind, batch, refusal, count)

    async def _refused_part(
        self, items: list[Item], kind: str, batch: _Batch, refusal: Refusal, count: int
    ) -> int:
        """After ``items`` were refused: split them to isolate the cause, or give up on them."""
        if refusal.status in SPLITTABLE and len(items) > 1 and batch.splits >= 2:
            batch.splits -= 2
            if not batch.split_logged:
                batch.split_logged = True
                log.info("destination=%s kind=%s status=%s msg=%s", self.name, kind,
                         refusal.status, q("batch refused: splitting it to isolate the cause"),
                         )  # fmt: skip
            middle = len(items) // 2
            first = await self._deliver_part(items[:middle], kind, batch)
            return first + await self._deliver_part(items[middle:], kind, batch)
        if batch.resent and len(items) == 1 and is_out_of_order(refusal.status, refusal.text):
            self.metrics.already_delivered.labels(self.name).inc(count)
            return 0
        if refusal.status == 413 and len(items) == 1:
            refusal = replace(refusal, reason=TOO_LARGE)
        self._refused(items, kind, count, refusal)
        return 0

    async def _send(self, raw: bytes, kind: str, batch: _Batch) -> Refusal | None:
        """Send one request with retries; None when delivered, else the final refusal."""
        return await self.send_body(compress(raw), kind, started=batch.started)

    async def send_body(
        self, body: bytes, kind: str, *, started: float | None = None
    ) -> Refusal | None:
        """Send one snappy-compressed write request body (``kind``: "samples" or "metadata")
        with retries, a credential refresh on 401/403, and the retry budget counted from
        ``started`` (clock seconds; default now). None when delivered (2xx), else the final
        refusal. Nothing is counted as sent or dropped here: that is the caller's."""
        started = self._clock() if started is None else started
        attempt = 0
        refreshed = False
        while True:
            answer = await self._attempt(body)
            status = answer.status if isinstance(answer, Answer) else None
            if status is not None and 200 <= status < 300:
                return None
            text = answer.text if isinstance(answer, Answer) else str(answer)
            if status is not None and not refreshed:
                refreshed = await self._refresh(status, text)
                if refreshed:
                    continue
            retry_after = answer.headers.get("Retry-After") if isinstance(answer, Answer) else None
            decision = self.policy.decide(
                status, attempt=attempt, retry_after=retry_after, now=self._wall(),
                rand=self._rand(), elapsed=self._clock() - started,
            )  # fmt: skip
            if not decision.retry:
                final = RETRY_BUDGET if decision.reason == RETRY_BUDGET else _status_class(status)
                return Refusal(status, text, final)
            self.metrics.retries.labels(self.name, _retry_label(status)).inc()
            self.failures += 1
            if (attempt + 1) & attempt == 0:  # log attempts 1, 2, 4, 8, ...
                log.warning("destination=%s kind=%s status=%s attempt=%d retry_in=%.3fs error=%s",
                            self.name, kind, status or "none", attempt + 1, decision.delay,
                            q(text[:200]))  # fmt: skip
            await self._sleep(decision.delay)
            attempt += 1

    async def _attempt(self, body: bytes) -> Answer | Exception:
        """One signed POST; the answer, or the error that prevented one."""
        started = self._clock()
        try:
            headers = await self.auth.headers(
                url=self.transport.url, body=body, base=self.base_headers
            )
            headers["User-Agent"] = USER_AGENT
            self.metrics.sent_bytes.labels(self.name).inc(len(body))
            answer: Answer | Exception = await self.transport.post(body, headers)
        except (TransportError, CredentialsError) as exc:
            answer = exc
        code = str(answer.status) if isinstance(answer, Answer) else "error"
        self.metrics.sent_requests.labels(self.name, code).inc()
        self.metrics.send_duration.labels(self.name).observe(self._clock() - started)
        return answer

    async def _refresh(self, status: int, text: str) -> bool:
        """Ask the authenticator to refresh after a refusal (SigV4: a 401 or 403); True means
        retry now (once per request)."""
        try:
            refreshed = await self.auth.refresh_after(status=status, body_text=text)
        except CredentialsError as exc:
            log.warning("destination=%s msg=%s error=%s", self.name,
                        q("credential refresh failed"), q(exc))  # fmt: skip
            return False
        if refreshed:
            self.metrics.retries.labels(self.name, CREDENTIAL_REFRESH).inc()
            log.info("destination=%s status=%d msg=%s", self.name, status,
                     q("credentials refreshed, retrying once"))  # fmt: skip
        return refreshed

    def _refused(self, items: list[Item], kind: str, count: int, refusal: Refusal) -> None:
        """Count, log and hand to ``on_rejected`` a part refused for good."""
        if kind == "samples":
            self.metrics.dropped_samples.labels(self.name, refusal.reason).inc(count)
        else:
            self.metrics.dropped_metadata.labels(self.name, refusal.reason).inc(count)
        message = _MESSAGES.get(refusal.reason, "refused by destination, not retried")
        log.error("destination=%s kind=%s status=%s reason=%s dropped=%d msg=%s body=%s",
                  self.name, kind, refusal.status, refusal.reason, count, q(message),
                  q(refusal.text[:1024]))  # fmt: skip
        if self._on_rejected is None:
            return
        try:
            self._on_rejected(items, kind, refusal)
        except Exception:  # a broken hook must not stop the sender of this destination
            log.exception("destination=%s kind=%s msg=%s", self.name, kind,
                          q("on_rejected hook failed"))  # fmt: skip


def _status_class(status: int | None) -> str:
    """``4xx``, ``3xx``, ... for a status; ``refused`` for no answer."""
    return f"{status // 100}xx" if status is not None else "refused"


def _retry_label(status: int | None) -> str:
    """The retries counter's label value: the exact status ("503", "429"), or "network"."""
    return str(status) if status is not None else "network"
