"""Hands rejected batches to a destination's dead-letter store
(:class:`~rwrouter.deadletter.store.DeadLetterStore`) without blocking the event loop.

A batch its destination rejected for good (4xx other than 429, a single series answered 413,
or the retry budget spent) becomes a dead letter, written in a worker thread;
:meth:`DeadLetters.flush` waits for those writes, so the queue position only moves past a
rejected batch once it is on disk.
"""

from __future__ import annotations

import asyncio
import logging

from rwrouter.deadletter.store import DeadLetterStore
from rwrouter.logs import kv
from rwrouter.metrics import DeadLetterMetrics
from rwrouter.send.refusals import Item, Kind, Refusal

log = logging.getLogger("rwrouter.sending")


class DeadLetters:
    """The refusal hook of a destination's :class:`~rwrouter.send.delivery.Deliverer`."""

    def __init__(self, *, name: str, store: DeadLetterStore, metrics: DeadLetterMetrics) -> None:
        self.name = name
        self.store = store
        self._metrics = metrics
        self._writes: set[asyncio.Task[None]] = set()

    def __call__(
        self, items: list[Item], kind: Kind, refusal: Refusal, tenant: str | None = None
    ) -> None:
        """Called on the event loop for each part rejected for good (samples only: metadata
        is sent again by Prometheus every minute), of ``tenant`` (kept with it)."""
        if kind != Kind.SAMPLES:
            return
        raw = b"".join(frame for frame, _ in items)
        samples = sum(n for _, n in items)
        self._metrics.batches.labels(self.name, refusal.reason).inc()
        task = asyncio.create_task(self._write(raw, len(items), samples, refusal, tenant))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def flush(self) -> None:
        """Wait until every rejected batch handed over so far is written (or failed)."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    async def _write(
        self, raw: bytes, series: int, samples: int, refusal: Refusal, tenant: str | None
    ) -> None:
        try:  # the store logs the entries it removes to stay within its bound
            await asyncio.to_thread(
                self.store.add,
                raw=raw,
                kind=Kind.SAMPLES,
                status=refusal.status,
                reason=refusal.reason,
                response=refusal.text,
                series=series,
                samples=samples,
                tenant=tenant,
            )
        except OSError as exc:
            log.error(
                kv(
                    destination=self.name,
                    msg="could not write the dead-letter store",
                    samples=samples,
                    error=exc,
                )
            )
