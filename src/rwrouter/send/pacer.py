"""A destination's pacer: the shell around :class:`~rwrouter.send.pacing.Pacing`.

One per destination (``queue_config.max_samples_per_second``), shared by its shards and its
metadata sender through the destination's :class:`~rwrouter.send.attempts.Attempts`: before
every attempt it awaits :meth:`Pacer.wait` with the request's samples (metadata entries), and
tells :meth:`Pacer.throttled` of every 429. The wait sleeps on the event loop (other
destinations and the receive side go on); the backlog waits in the disk queue, nothing is
dropped for pacing.

Stopping: a handover (a reload replaced the destination) ends a wait at once with
:class:`~rwrouter.send.stopping.HandedOver` (the batch stays on disk for the successor); a
drain keeps pacing, and the stop's deadline (``server.shutdown_timeout``) cancels the senders
and their waits as it does their retries.

Observed: ``rwrouter_pacing_delay_seconds`` (each request's wait), the rate in force
(``rwrouter_pacing_rate``), its settings, and the 429s that lowered it; a throttling episode
is logged once when it starts and once when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from rwrouter.logs import kv
from rwrouter.metrics import SendMetrics
from rwrouter.send.pacing import Episode, Pacing
from rwrouter.send.stopping import HandedOver, Stopping

log = logging.getLogger("rwrouter.sending")


class Pacer:
    """Paces one destination's requests (see the module docstring). ``rate``: samples per
    second; ``burst``: samples; ``clock``: monotonic seconds."""

    def __init__(
        self,
        *,
        name: str,
        rate: float,
        burst: int,
        metrics: SendMetrics,
        stopping: Stopping,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._clock, self._stopping, self._metrics = clock, stopping, metrics
        self.pacing = Pacing(rate=rate, burst=burst, now=clock())

    def show(self) -> None:
        """Set the settings' gauges and the rate in force (when its destination starts)."""
        m, name = self._metrics, self.name
        m.pacing_limit.labels(name).set(self.pacing.rate)
        m.pacing_burst.labels(name).set(self.pacing.burst)
        m.pacing_rate.labels(name).set(self.pacing.rate_at(self._clock()))

    async def wait(self, samples: int) -> None:
        """Wait until a request of ``samples`` samples (metadata entries) may go. Raises
        HandedOver when the destination is handed over meanwhile."""
        reservation = self.pacing.reserve(samples, now=self._clock())
        if reservation.ended is not None:
            self._ended(reservation.ended)
        self._metrics.pacing_rate.labels(self.name).set(reservation.rate)
        self._metrics.pacing_delay.labels(self.name).observe(reservation.wait)
        if reservation.wait <= 0:
            return
        until = self._clock() + reservation.wait
        await self._stopping.sleep(reservation.wait)  # ends early when the stop begins
        if self._stopping.handover:
            raise HandedOver(f"destination {self.name} handed over while pacing")
        left = until - self._clock()
        if left > 0:  # draining: keep the pace; the stop's deadline cancels this wait
            await asyncio.sleep(left)

    def throttled(self, status: int) -> None:
        """A ``status`` 429 answer: lower the rate (AIMD), count it, log an episode's start."""
        throttle = self.pacing.throttled(now=self._clock())
        self._metrics.pacing_rate.labels(self.name).set(throttle.rate)
        if throttle.decreased:
            self._metrics.pacing_decreases.labels(self.name).inc()
        if throttle.started:
            log.warning(
                kv(
                    destination=self.name,
                    status=status,
                    rate=f"{throttle.rate:g}",
                    max_samples_per_second=f"{self.pacing.rate:g}",
                    msg="rate limited: pacing lowered, recovering gradually",
                )
            )

    def _ended(self, episode: Episode) -> None:
        log.info(
            kv(
                destination=self.name,
                rate=f"{self.pacing.rate:g}",
                lasted=f"{episode.seconds:.1f}s",
                throttles=episode.throttles,
                lowest=f"{episode.lowest:g}",
                msg="pacing back at max_samples_per_second",
            )
        )
