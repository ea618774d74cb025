"""A destination's sample age limit at send time: the shell around
:class:`~rwrouter.send.age.SampleAgeLimit` (``queue_config.sample_age_limit``).

One per destination with a limit, held by its :class:`~rwrouter.send.delivery.Deliverer`:

- before a part of a batch (the batch, or a half of it while a refusal is split) is encoded,
  :meth:`TooOld.recent` takes out its samples (exemplars, native histograms) too old at the
  wall clock's now; they are counted (``rwrouter_samples_dropped_total{reason="too_old"}``),
  logged at most once a minute (:data:`TOO_OLD_LOG_INTERVAL`) and never sent; a part left
  with none is done;
- :meth:`TooOld.aged_at` says when the oldest sample left becomes too old; a part still
  being retried then is aged (:meth:`TooOld.aged`): its request stops retrying as it is
  (:class:`Aged`) and the deliverer filters and encodes it again, keeping its retry budget
  and backoff.

Source: Prometheus ``storage/remote/queue_manager.go`` (``isSampleOld``, checked when a batch
is built and again before every retry of ``sendSamplesWithBackoff``). Without a limit the
deliverer holds no :class:`TooOld` and nothing is walked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from rwrouter.errors import InvariantError
from rwrouter.logs import kv
from rwrouter.metrics import SendMetrics
from rwrouter.reasons import DropReason
from rwrouter.send.age import SampleAgeLimit
from rwrouter.wire.age import Recent

__all__ = ["TOO_OLD_LOG_INTERVAL", "TOO_OLD_MESSAGE", "Aged", "TooOld"]

log = logging.getLogger("rwrouter.sending")

TOO_OLD_LOG_INTERVAL = 60.0  # seconds between two "too old" log lines
TOO_OLD_MESSAGE = "samples older than sample_age_limit dropped, not sent"


@dataclass(frozen=True, slots=True)
class Aged:
    """The part being retried now holds samples too old to send: filter it again.
    ``attempt``: the attempts of its request that failed so far (the backoff of the next)."""

    attempt: int


class TooOld:
    """Drops the samples of one destination's parts that are too old to send (see the module
    docstring). ``limit``: the destination's, active (``limit.limit`` > 0); ``clock``:
    monotonic seconds (the log interval); ``wall_clock``: unix seconds (the limit).

    Raises ValueError for a limit that is off (a deliverer without a limit holds none)."""

    def __init__(
        self,
        *,
        name: str,
        limit: SampleAgeLimit,
        metrics: SendMetrics,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not limit.active:
            raise ValueError("a sample age limit of 0 is off: no TooOld for it")
        self.name = name
        self.limit = limit
        self.metrics = metrics
        self._clock, self._wall = clock, wall_clock
        self._logged_at: float | None = None  # when "too old" was last logged (clock)

    def recent(self, raw: bytes) -> Recent:
        """``raw`` (RW1-form frames) without its samples too old now; those are counted and
        logged (at most once per :data:`TOO_OLD_LOG_INTERVAL`). ``Recent.dropped`` 0: the
        frames are unchanged (``Recent.items`` None). Raises DecodeError for malformed
        frames."""
        recent = self.limit.recent(raw, now=self._wall())
        if recent is None:
            raise InvariantError("TooOld with a sample age limit that is off")
        if recent.dropped:
            self._dropped(recent.dropped)
        return recent

    def aged_at(self, recent: Recent) -> float | None:
        """When (unix seconds) the oldest sample ``recent`` left becomes too old; None when
        it left none."""
        return self.limit.aged_at(recent.oldest_ms)

    def aged(self, aged_at: float | None) -> bool:
        """Whether a part whose oldest sample becomes too old at ``aged_at`` (unix seconds,
        :meth:`aged_at`; None: never) holds one now."""
        return aged_at is not None and self._wall() > aged_at

    def _dropped(self, dropped: int) -> None:
        self.metrics.dropped_samples.labels(self.name, DropReason.TOO_OLD).inc(dropped)
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < TOO_OLD_LOG_INTERVAL:
            return
        self._logged_at = now
        log.warning(
            kv(
                destination=self.name,
                dropped=dropped,
                sample_age_limit=f"{self.limit.limit:g}s",
                reason=DropReason.TOO_OLD,
                msg=TOO_OLD_MESSAGE,
            )
        )
