"""A destination's dead-letter metrics (:mod:`rwrouter.deadletter`): the batches refused for
good and stored, by reason, and the store's size. Every series has a ``destination`` label
(the remote_write ``name``)."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge

from rwrouter.reasons import REFUSAL_REASONS, listing


class DeadLetterMetrics:
    """``rwrouter_rejected_*``, registered on ``registry``: the writer
    (:class:`rwrouter.deadletter.writer.DeadLetters`) counts ``batches``; the destination
    watches the store's gauges."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        r = registry
        self.store_bytes = Gauge(
            "rwrouter_rejected_store_bytes",
            "Bytes in a destination's dead-letter store (storage.path/rejected).",
            ["destination"],
            registry=r,
        )
        self.store_entries = Gauge(
            "rwrouter_rejected_store_entries",
            "Batches in a destination's dead-letter store.",
            ["destination"],
            registry=r,
        )
        self.batches = Counter(
            "rwrouter_rejected_batches",
            "Batches refused for good and stored in the dead-letter store, by reason: "
            + listing(REFUSAL_REASONS)
            + ".",
            ["destination", "reason"],
            registry=r,
        )

    def forget(self, name: str) -> None:
        """Remove destination ``name``'s gauges (the counter stays)."""
        for gauge in (self.store_bytes, self.store_entries):
            with contextlib.suppress(KeyError):
                gauge.remove(name)
