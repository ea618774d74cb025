"""What a destination's deliveries drop after sending: counted by reason, logged, and the
parts refused for good handed to the dead-letter hook.

One :class:`Drops` per destination, held by its :class:`~rwrouter.send.delivery.Deliverer`:

- :meth:`Drops.rejected`: a part refused for good, once retries and splitting are done, is
  counted (``rwrouter_samples_dropped_total``/``rwrouter_metadata_dropped_total`` by
  :attr:`~rwrouter.send.refusals.Refusal.reason`), logged, and handed to the ``on_rejected``
  hook (the dead-letter store) with its tenant; a hook that raises is logged, not
  propagated.
- :meth:`Drops.not_written`: what a 2xx's Written headers say was not written (RW 2.0) is
  counted (``not_written``) and logged at most once per batch and
  :data:`NOT_WRITTEN_LOG_INTERVAL`.

Samples too old to send are dropped before sending (:mod:`rwrouter.send.too_old`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rwrouter.logs import kv
from rwrouter.metrics import SendMetrics
from rwrouter.protocol import Written
from rwrouter.reasons import DropReason
from rwrouter.send.encoding import NOT_WRITTEN_MESSAGE
from rwrouter.send.refusals import Item, Kind, Refusal, RejectHook

__all__ = ["NOT_WRITTEN_LOG_INTERVAL", "Drops"]

log = logging.getLogger("rwrouter.sending")

NOT_WRITTEN_LOG_INTERVAL = 60.0  # seconds between two "not written" log lines

_MESSAGES = {
    DropReason.TOO_LARGE: "series larger than the destination accepts, not retried",
    DropReason.RETRY_BUDGET: "retry budget spent, not retried further",
}


class Drops:
    """Counts and logs what one destination's deliveries drop (see the module docstring).
    ``on_rejected(items, kind, refusal, tenant)``: called on the event loop, synchronously,
    once for every part refused for good (it must not block: file writes go to a thread).
    ``clock``: monotonic seconds (the log interval)."""

    def __init__(
        self,
        *,
        name: str,
        metrics: SendMetrics,
        clock: Callable[[], float],
        on_rejected: RejectHook | None = None,
    ) -> None:
        self.name, self.metrics, self._clock = name, metrics, clock
        self._on_rejected = on_rejected
        self._not_written_at: float | None = None  # when "not written" was last logged

    def rejected(
        self, items: list[Item], kind: Kind, count: int, refusal: Refusal, tenant: str | None
    ) -> None:
        """Count, log and hand to ``on_rejected`` a part (``items``, ``count`` samples or
        metadata entries, of ``tenant``) refused for good."""
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

    def not_written(self, missing: Written, *, logged: bool) -> bool:
        """Count (``not_written``) what a 2xx said was not written (``missing``), and log it
        unless ``logged`` (its batch's was) or one was logged within
        :data:`NOT_WRITTEN_LOG_INTERVAL`; True when it was logged now."""
        self.metrics.dropped_samples.labels(self.name, DropReason.NOT_WRITTEN).inc(missing.total)
        now = self._clock()
        last = self._not_written_at
        if logged or (last is not None and now - last < NOT_WRITTEN_LOG_INTERVAL):
            return False
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
        return True
