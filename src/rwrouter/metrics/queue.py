"""A destination's queue metrics: its disk queue (:mod:`rwrouter.queue.diskqueue`: bytes on
disk, its bound, records torn or corrupt) and its in-memory read-ahead
(:mod:`rwrouter.send.reader`: samples and bytes read and not yet done, their bounds, the
oldest one's age). Every series has a ``destination`` label (the remote_write ``name``)."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge


class QueueMetrics:
    """``rwrouter_queue_*``, registered on ``registry``. The gauges are set or watched by the
    destination (:meth:`rwrouter.pipeline.destination.Destination.start`); the reader and
    the shards count ``corrupt_records``."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        r = registry
        self.disk_bytes = Gauge(
            "rwrouter_queue_disk_bytes",
            "Bytes of a destination's queue segment files on disk.",
            ["destination"],
            registry=r,
        )
        self.disk_capacity_bytes = Gauge(
            "rwrouter_queue_disk_capacity_bytes",
            "Bound of a destination's disk queue (queue_config.max_disk_bytes).",
            ["destination"],
            registry=r,
        )
        self.blocks = Gauge(
            "rwrouter_queue_blocks",
            "Queue records (one request's share for this destination each) not yet done: on "
            "disk or in flight.",
            ["destination"],
            registry=r,
        )
        self.unsent_samples = Gauge(
            "rwrouter_queue_unsent_samples",
            "Samples queued for a destination and not yet sent: on disk not yet read, plus "
            "read and waiting or in flight in memory (0: everything accepted was sent). "
            "rwrouter_queue_disk_bytes counts whole segment files, sent records included.",
            ["destination"],
            registry=r,
        )
        self.oldest_age = Gauge(
            "rwrouter_queue_oldest_unsent_age_seconds",
            "Age of the oldest record read for sending and not yet done, since it was "
            "received (0 when none).",
            ["destination"],
            registry=r,
        )
        self.corrupt_records = Counter(
            "rwrouter_queue_corrupt_records",
            "Queue records found torn or corrupt (checksum) and skipped; their samples are lost.",
            ["destination"],
            registry=r,
        )
        self._memory(r)

    def _memory(self, r: CollectorRegistry) -> None:
        """The in-memory read-ahead's gauges."""
        self.samples = Gauge(
            "rwrouter_queue_samples",
            "Samples read from the disk queue and waiting or in flight in memory.",
            ["destination"],
            registry=r,
        )
        self.capacity_samples = Gauge(
            "rwrouter_queue_capacity_samples",
            "Read-ahead bound of a destination's in-memory queue, samples "
            "(capacity per running shard).",
            ["destination"],
            registry=r,
        )
        self.memory_bytes = Gauge(
            "rwrouter_queue_bytes",
            "Bytes of series read from the disk queue and waiting or in flight in memory.",
            ["destination"],
            registry=r,
        )
        self.capacity_bytes = Gauge(
            "rwrouter_queue_capacity_bytes",
            "Byte bound of a destination's in-memory queue (queue_config.max_memory_bytes).",
            ["destination"],
            registry=r,
        )

    def forget(self, name: str) -> None:
        """Remove destination ``name``'s gauges (the counter stays)."""
        gauges = (
            self.disk_bytes,
            self.disk_capacity_bytes,
            self.blocks,
            self.unsent_samples,
            self.oldest_age,
            self.samples,
            self.capacity_samples,
            self.memory_bytes,
            self.capacity_bytes,
        )
        for gauge in gauges:
            with contextlib.suppress(KeyError):
                gauge.remove(name)
