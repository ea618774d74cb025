"""Delivery of one batch to one destination: sign, send, retry, refresh, split.

- Retries follow :class:`~rwrouter.sending.retry.RetryPolicy` (network errors, 5xx, opt-in
  429; Retry-After; backoff with jitter) and re-send the same compressed bytes.
- A SigV4 403 "security token ... expired" refreshes the credentials and retries once.
- A content refusal (400, 409, 422) of a batch of several series is split in halves, each sent
  on its own, so one invalid series (say an out-of-bounds timestamp from one sender) costs only
  itself and not the other senders' series batched with it. Receivers such as Prometheus roll
  back a whole request on the first bad sample. The split is bounded per batch
  (:data:`SPLIT_BUDGET` requests); what is still refused then is dropped, counted and logged.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from rwrouter import USER_AGENT
from rwrouter.auth.schemes import Authenticator
from rwrouter.errors import CredentialsError
from rwrouter.logs import q
from rwrouter.metrics import Metrics
from rwrouter.sending.retry import RetryPolicy
from rwrouter.sending.transport import Answer, Transport, TransportError
from rwrouter.wire import compress

log = logging.getLogger("rwrouter.sending")

SPLITTABLE = frozenset((400, 409, 422))  # refusals about the content, not the request
SPLIT_BUDGET = 64  # extra requests one batch may cost to isolate its refused series

Item = tuple[bytes, int]  # a framed series (or metadata entry) and its sample count


@dataclass(frozen=True, slots=True)
class Refusal:
    """The final answer of a batch that was not delivered: status (None: no answer) and text."""

    status: int | None
    text: str


class Deliverer:
    """Sends batches for one destination (see the module docstring).

    ``base_headers``: the protocol headers plus the destination's configured headers. Clocks,
    randomness and sleep are injectable for tests.
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
    ) -> None:
        self.name = name
        self.transport = transport
        self.auth = auth
        self.policy = policy
        self.base_headers = base_headers
        self.metrics = metrics
        self._clock, self._wall, self._rand, self._sleep = clock, wall_clock, rand, sleep
        self.failures = 0  # retried attempts, for the resharding decision

    async def deliver(self, items: list[Item], kind: str) -> int:
        """Deliver a batch (``kind``: "samples" or "metadata"); returns how many of its
        samples (metadata entries) were delivered. Refused parts are counted and logged."""
        budget = [SPLIT_BUDGET]
        return await self._deliver_part(items, kind, budget)

    async def _deliver_part(self, items: list[Item], kind: str, budget: list[int]) -> int:
        count = sum(n for _, n in items)
        refusal = await self._send(b"".join(frame for frame, _ in items), kind)
        if refusal is None:
            return count
        if refusal.status in SPLITTABLE and len(items) > 1 and budget[0] >= 2:
            budget[0] -= 2
            if budget[0] == SPLIT_BUDGET - 2:
                log.info("destination=%s kind=%s status=%s msg=%s", self.name, kind,
                         refusal.status, q("batch refused: splitting it to isolate the cause"),
                         )  # fmt: skip
            middle = len(items) // 2
            first = await self._deliver_part(items[:middle], kind, budget)
            return first + await self._deliver_part(items[middle:], kind, budget)
        self._refused(kind, count, refusal)
        return 0

    async def _send(self, raw: bytes, kind: str) -> Refusal | None:
        """Send one request with retries; None when delivered, else the final refusal."""
        body = compress(raw)
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
                rand=self._rand(),
            )  # fmt: skip
            if not decision.retry:
                return Refusal(status, text)
            self.metrics.retries.labels(self.name, decision.reason).inc()
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
        """Refresh credentials after a 403 expired-token answer; True means retry now."""
        try:
            refreshed = await self.auth.refresh_after(status=status, body_text=text)
        except CredentialsError as exc:
            log.warning("destination=%s msg=%s error=%s", self.name,
                        q("credential refresh failed"), q(exc))  # fmt: skip
            return False
        if refreshed:
            self.metrics.retries.labels(self.name, "expired_token").inc()
        return refreshed

    def _refused(self, kind: str, count: int, refusal: Refusal) -> None:
        """Count and log a part refused for good (4xx other than a retried 429; 3xx)."""
        status = refusal.status
        reason = f"{status // 100}xx" if status is not None else "refused"
        if kind == "samples":
            self.metrics.dropped_samples.labels(self.name, reason).inc(count)
        else:
            self.metrics.dropped_metadata.labels(self.name, reason).inc(count)
        log.error("destination=%s kind=%s status=%s dropped=%d msg=%s body=%s",
                  self.name, kind, status, count, q("refused by destination, not retried"),
                  q(refusal.text[:1024]))  # fmt: skip
