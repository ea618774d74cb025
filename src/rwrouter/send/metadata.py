"""A destination's metadata queue: metric metadata entries, kept in memory only.

Prometheus sends all metadata again every ``metadata_config.send_interval`` (1 min by default),
so losing queued metadata at a crash costs nothing lasting; it never holds back samples.
The queue is bounded by :data:`METADATA_QUEUE_LIMIT` entries and a byte bound; the oldest
entries are dropped first (counted, reason ``queue_full``).

An entry identical to one queued less than ``resend_after`` seconds ago (half of
``metadata_config.send_interval``) is not queued again: a Prometheus sending remote write 2.0
repeats every series' metadata in every request, and several senders send the same families;
a changed entry (new help, type or unit) is queued at once. What was queued is remembered for
at most :data:`RECENT_LIMIT` distinct entries (then forgotten all at once: they are queued
again once).

Entries of a tenant (a destination with a ``tenant_header``) are queued, remembered and batched
apart: a metadata request carries one tenant's entries, sent in its header.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from rwrouter.logs import kv
from rwrouter.metrics import SendMetrics
from rwrouter.reasons import DropReason
from rwrouter.send.delivery import Deliverer
from rwrouter.send.refusals import Kind
from rwrouter.send.stopping import HandedOver

log = logging.getLogger("rwrouter.sending")

METADATA_QUEUE_LIMIT = 10_000  # entries
RECENT_LIMIT = 100_000  # distinct entries whose last queueing time is remembered


class MetadataQueue:
    """Metadata entries (framed ``metadata`` fields of a write request) waiting to be sent in
    batches of ``batch_size`` entries; ``max_bytes`` bounds the entries' total size;
    ``resend_after`` (seconds) how soon an identical entry is queued again; ``clock``:
    monotonic seconds; ``metrics``: the destination's send metrics (entries sent, and
    dropped as ``queue_full``). Entries are queued with their tenant (None: none)."""

    def __init__(
        self,
        *,
        name: str,
        batch_size: int,
        max_bytes: int,
        metrics: SendMetrics,
        resend_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.resend_after = resend_after
        self._clock = clock
        # tenant -> entry -> when it was last queued; _remembered: entries in all of them
        self._recent: dict[str | None, dict[bytes, float]] = {}
        self._remembered = 0
        self.batch_size = batch_size
        self.max_bytes = max_bytes
        self._metrics = metrics
        self._entries: deque[tuple[bytes, str | None]] = deque()
        self.nbytes = 0  # queued and in flight
        self._queued_bytes = 0
        self._wake = asyncio.Event()
        self.closing = False

    def add(self, metadata: list[bytes], tenant: str | None = None) -> None:
        """Queue entries (of ``tenant``) not queued within ``resend_after`` seconds; drop (and
        count) the oldest beyond the bounds."""
        metadata = self._fresh(metadata, tenant)
        if not metadata:
            return
        self._entries.extend((entry, tenant) for entry in metadata)
        added = sum(map(len, metadata))
        self.nbytes += added
        self._queued_bytes += added
        dropped = 0
        while self._entries and (
            len(self._entries) > METADATA_QUEUE_LIMIT or self._queued_bytes > self.max_bytes
        ):
            size = len(self._entries.popleft()[0])
            self.nbytes -= size
            self._queued_bytes -= size
            dropped += 1
        if dropped:
            self._metrics.dropped_metadata.labels(self.name, DropReason.QUEUE_FULL).inc(dropped)
        self._wake.set()

    def _fresh(self, metadata: list[bytes], tenant: str | None) -> list[bytes]:
        """The entries of ``metadata`` to queue now (each once), remembering when."""
        now, fresh = self._clock(), []
        recent = self._recent.setdefault(tenant, {})
        for entry in metadata:
            last = recent.get(entry)
            if last is None or now - last >= self.resend_after:
                if last is None:
                    if self._remembered >= RECENT_LIMIT:
                        self._recent = {tenant: {}}
                        recent, self._remembered = self._recent[tenant], 0
                    self._remembered += 1
                recent[entry] = now
                fresh.append(entry)
        return fresh

    def close(self) -> None:
        """Send what is queued, then let :meth:`run` return."""
        self.closing = True
        self._wake.set()

    def queued(self) -> list[tuple[bytes, str | None]]:
        """What waits to be sent, oldest first: (framed entry, its tenant)."""
        return list(self._entries)

    def _take(self) -> tuple[list[tuple[bytes, int]], str | None]:
        """The next batch: up to ``batch_size`` queued entries of one tenant, in order, as
        (entry, 1) items; and that tenant."""
        entries = self._entries
        tenant = entries[0][1]
        batch: list[tuple[bytes, int]] = []
        while entries and len(batch) < self.batch_size and entries[0][1] == tenant:
            batch.append((entries.popleft()[0], 1))
        return batch, tenant

    async def run(self, deliverer: Deliverer) -> None:
        """Send batches until closed and empty."""
        while True:
            if not self._entries:
                if self.closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch, tenant = self._take()
            size = sum(len(entry) for entry, _ in batch)
            self._queued_bytes -= size
            try:
                delivered = await deliverer.deliver(batch, Kind.METADATA, tenant=tenant)
            except HandedOver:  # a reload replaced the destination: the senders send them again
                return
            except Exception:  # a bug, not an answer: these entries come again within a minute
                log.exception(
                    kv(
                        destination=self.name,
                        msg="sending metadata failed unexpectedly: dropped",
                    )
                )
                delivered = 0
            finally:
                self.nbytes -= size
            if delivered:
                self._metrics.sent_metadata.labels(self.name).inc(delivered)
