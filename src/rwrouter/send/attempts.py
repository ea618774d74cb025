"""A destination's requests and their retries: each attempt signed, POSTed and retried.

One :class:`Attempts` per destination, held by its
:class:`~rwrouter.send.delivery.Deliverer` (which encodes, splits and falls back; this is
the request loop under it). :meth:`Attempts.post` sends one request body until it is
answered 2xx or refused for good:

- Retries follow :class:`~rwrouter.send.retry.RetryPolicy` (network errors, 5xx, opt-in
  429; Retry-After; backoff with jitter; a retry budget in seconds counted from the batch's
  first attempt) and re-send the same compressed bytes. Source: RW 1.0 spec, Prometheus
  ``storage/remote``; the budget is rwrouter's own.
- A 401 or 403 makes the authenticator refresh its credentials if it can (SigV4: always, once);
  the request is then retried once. A second 401/403 for the same request, or one the
  authenticator cannot help with (no auth, basic auth, Authorization header), is final.
- A request being retried when its destination is handed over to a successor (a reload
  replaced it: ``abandon()`` says so) stops retrying: :meth:`Attempts.post` raises
  :class:`~rwrouter.send.stopping.HandedOver` instead of waiting for an answer that may never
  come; the batch stays on disk and the successor sends it.
- An attempt whose request cannot be built (a ValueError from the HTTP client: a header value
  with CR or LF) counts as one without an answer: retried with backoff, given up after
  ``max_retry_duration`` (``retry_budget``), as a network error is.
- A destination with a ``tenant_header`` (``X-Scope-OrgID``) gets each request's tenant in
  it; a request without a tenant gets the configured header of that name, if any.
- With a :class:`~rwrouter.send.pacer.Pacer` (``queue_config.max_samples_per_second``),
  every attempt first waits for its samples (metadata entries) in the destination's token
  bucket, and every 429 lowers the paced rate (:mod:`rwrouter.send.pacing`).
- With an ``aged`` check (the sample age limit, :mod:`rwrouter.send.too_old`), a request
  that it finds aged after a backoff stops (:class:`~rwrouter.send.too_old.Aged`, with its
  attempts so far) so that its part is filtered and encoded again.

Every attempt is counted (``rwrouter_sent_requests_total`` by status code,
``rwrouter_sent_bytes_total``, ``rwrouter_send_duration_seconds``), every retried one in
``rwrouter_retries_total`` and in :meth:`Attempts.take_failures` (the resharding decision).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from rwrouter import USER_AGENT
from rwrouter.auth.schemes import Authenticator
from rwrouter.errors import CredentialsError, TransportError
from rwrouter.logs import kv
from rwrouter.metrics import SendMetrics
from rwrouter.protocol import MESSAGES, RW1_MESSAGE, request_headers
from rwrouter.reasons import DropReason, RetryReason
from rwrouter.send.pacer import Pacer
from rwrouter.send.refusals import Kind, Refusal, reason_of
from rwrouter.send.retry import RetryPolicy
from rwrouter.send.stopping import HandedOver
from rwrouter.send.too_old import Aged
from rwrouter.send.transport import Answer, WriteClient

__all__ = ["Attempts"]

log = logging.getLogger("rwrouter.sending")


class Attempts:
    """Sends the requests of one destination, with retries (see the module docstring).

    ``transport``: the destination's HTTP client, a
    :class:`~rwrouter.send.transport.WriteClient` (the aiohttp
    :class:`~rwrouter.send.transport.Transport`, or a test's); ``auth`` signs every attempt.
    ``headers``: the destination's configured headers (the protocol's own are added per
    request, :func:`rwrouter.protocol.request_headers`). ``tenant_header``: the header a
    request's tenant goes in (None: never sent). ``pacer``: the destination's pacing (None:
    not paced). ``abandon()``: whether to stop retrying (the destination is handed over).
    ``clock``: monotonic seconds (durations, the retry budget); ``wall_clock``: unix seconds
    (Retry-After dates); the deliverer uses both too. Clocks, randomness and sleep are
    injectable for tests.
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
        pacer: Pacer | None = None,
        abandon: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], Coroutine[Any, Any, None]] = asyncio.sleep,
    ) -> None:
        self.name, self.metrics = name, metrics
        self.clock, self.wall_clock = clock, wall_clock
        self._transport, self._auth, self._policy, self._pacer = transport, auth, policy, pacer
        self._abandon = abandon
        self._rand, self._sleep = rand, sleep
        configured = dict(headers or {})
        self._headers = {m: {**configured, **request_headers(m)} for m in MESSAGES}
        self._tenant_header = tenant_header
        # with a tenant, the configured header of that name (in any case) gives way to it
        tenant_key = (tenant_header or "").lower()
        self._tenant_base = {
            m: {k: v for k, v in self._headers[m].items() if k.lower() != tenant_key}
            for m in MESSAGES
        }
        self._failures = 0  # retried attempts since take_failures
        self._not_sent_logged = False  # whether a request that could not be built was logged

    async def start(self) -> None:
        """Open the HTTP client (before the first request)."""
        await self._transport.start()

    async def close(self) -> None:
        """Close the HTTP client (after the last request)."""
        await self._transport.close()

    def take_failures(self) -> int:
        """The attempts retried since the last call (for the resharding decision)."""
        failures, self._failures = self._failures, 0
        return failures

    async def send_body(self, body: bytes, kind: Kind) -> Refusal | None:
        """Send one snappy-compressed RW 1.0 write request body of ``kind`` with retries and
        a credential refresh on 401/403, the retry budget counted from now. None when
        delivered (2xx), else the final refusal. Nothing is counted as sent or dropped here:
        that is the caller's (``rwrouter rejected replay``)."""
        answer = await self.post(body, kind=kind, message=RW1_MESSAGE)
        return answer if isinstance(answer, Refusal) else None

    async def post(
        self,
        body: bytes,
        *,
        kind: Kind,
        message: str,
        started: float | None = None,
        tenant: str | None = None,
        count: int = 0,
        attempt: int = 0,
        aged: Callable[[], bool] | None = None,
    ) -> Refusal | Mapping[str, str] | Aged:
        """POST ``body`` (a ``message`` request of ``kind``, ``count`` samples or metadata
        entries for the pacing, ``tenant`` in the tenant header) with retries, the retry
        budget counted from ``started`` (clock seconds; None: now) and the backoff from
        ``attempt`` (attempts failed before). Returns the headers of the 2xx answer, or the
        final refusal; a :class:`~rwrouter.send.too_old.Aged` with the attempts so far when
        ``aged()`` says so after a backoff. Raises HandedOver when ``abandon()`` says so
        before a retry."""
        started = self.clock() if started is None else started
        refreshed = False
        while True:
            if self._pacer is not None and count:
                await self._pacer.wait(count)
            answer = await self._attempt(body, message, tenant)
            status = answer.status if isinstance(answer, Answer) else None
            if status == 429 and self._pacer is not None:
                self._pacer.throttled(status)
            if isinstance(answer, Answer) and 200 <= answer.status < 300:
                return answer.headers
            text = answer.text if isinstance(answer, Answer) else str(answer)
            if status is not None and not refreshed:
                refreshed = await self._refresh(status, text)
                if refreshed:
                    continue
            retry_after = answer.headers.get("Retry-After") if isinstance(answer, Answer) else None
            decision = self._policy.decide(
                status,
                attempt=attempt,
                retry_after=retry_after,
                now=self.wall_clock(),
                rand=self._rand(),
                elapsed=self.clock() - started,
            )
            if not decision.retry:
                budget = decision.reason is DropReason.RETRY_BUDGET
                final = DropReason.RETRY_BUDGET if budget else reason_of(status)
                return Refusal(status, text, final)
            if self._abandon is not None and self._abandon():
                raise HandedOver(f"destination {self.name} handed over while retrying")
            self._retrying(kind, status, attempt, decision.delay, text)
            await self._sleep(decision.delay)
            attempt += 1
            if aged is not None and aged():
                return Aged(attempt)

    def _retrying(
        self, kind: Kind, status: int | None, attempt: int, delay: float, text: str
    ) -> None:
        """Count a failed attempt that will be retried in ``delay`` seconds, and log
        attempts 1, 2, 4, 8, ..."""
        self.metrics.retries.labels(self.name, _retry_label(status)).inc()
        self._failures += 1
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
        started = self.clock()
        base = self._headers[message]
        if tenant is not None and self._tenant_header is not None:
            base = {**self._tenant_base[message], self._tenant_header: tenant}
        try:
            headers = await self._auth.headers(url=self._transport.url, body=body, base=base)
            headers["User-Agent"] = USER_AGENT
            self.metrics.sent_bytes.labels(self.name).inc(len(body))
            answer: Answer | Exception = await self._transport.post(body, headers)
        except (TransportError, CredentialsError) as exc:
            answer = exc
        except ValueError as exc:  # the request cannot be built, e.g. CR/LF in a header value
            answer = self._not_sent(exc)
        code = str(answer.status) if isinstance(answer, Answer) else "error"
        self.metrics.sent_requests.labels(self.name, code).inc()
        self.metrics.send_duration.labels(self.name).observe(self.clock() - started)
        return answer

    def _not_sent(self, exc: ValueError) -> TransportError:
        """A request the HTTP client refused to build (aiohttp raises ValueError for a header
        value with a control character such as CR or LF, from a credentials file rotated to a
        bad one, say) as an attempt without an answer: retried with backoff and given up
        after ``max_retry_duration`` like a network error. Logged with its traceback once per
        destination (then by the retry log lines); the error names no header value."""
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
            refreshed = await self._auth.refresh_after(status=status, body_text=text)
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


def _retry_label(status: int | None) -> str:
    """The retries counter's label value: the exact status ("503", "429"), or ``network``."""
    return str(status) if status is not None else RetryReason.NETWORK
