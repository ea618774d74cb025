"""The builders of a destination: its parts from its ``remote_write`` entry, then the whole.

:func:`make_destination` builds a :class:`~rwrouter.pipeline.destination.Destination` from its
configuration, the storage settings, its HTTP client, its authenticator and the metrics: the
disk queue (``<storage.path>/queue/<name>``), the dead-letter store
(``<storage.path>/rejected/<name>``) and its writer, the pacer, the requests' attempts
(retry policy, headers), the metadata book (RW 2.0 only), the deliverer, the reader with its
shards, and the metadata queue.
:func:`build_destination` sets up the authenticator and the transport of a ``remote_write``
entry first (what ``rwrouter run`` and a reload do).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from rwrouter.auth.schemes import Authenticator, authenticator_for
from rwrouter.config import DestinationConfig, QueueConfig, StorageConfig, redact_url
from rwrouter.deadletter.store import DeadLetterStore, dead_letter_dir, safe_dirname
from rwrouter.deadletter.writer import DeadLetters
from rwrouter.logs import kv
from rwrouter.metrics import Metrics
from rwrouter.pipeline.destination import Destination
from rwrouter.protocol import RW2_MESSAGE
from rwrouter.queue.diskqueue import DiskQueue
from rwrouter.send.age import SampleAgeLimit
from rwrouter.send.attempts import Attempts
from rwrouter.send.delivery import Deliverer
from rwrouter.send.metabook import MetadataBook
from rwrouter.send.metadata import MetadataQueue
from rwrouter.send.pacer import Pacer
from rwrouter.send.reader import QueueReader
from rwrouter.send.retry import RetryPolicy
from rwrouter.send.shards import RESHARD_INTERVAL
from rwrouter.send.stopping import Stopping
from rwrouter.send.transport import WriteClient, transport_for

log = logging.getLogger("rwrouter.fanout")


def queue_dir(storage_path: str, destination: str) -> Path:
    """``<storage.path>/queue/<destination>`` (the name made safe for a file system)."""
    return Path(storage_path) / "queue" / safe_dirname(destination)


def make_destination(
    config: DestinationConfig,
    *,
    storage: StorageConfig,
    transport: WriteClient,
    auth: Authenticator,
    metrics: Metrics,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    rand: Callable[[], float] = random.random,
    sleep: Callable[[float], Coroutine[Any, Any, None]] = asyncio.sleep,
    reshard_interval: float = RESHARD_INTERVAL,
) -> Destination:
    """A (not yet started) destination for ``config``, built from its parts (see the module
    docstring). Clocks (``clock``: monotonic seconds, ``wall_clock``: unix seconds),
    randomness and sleep are injectable for tests; ``reshard_interval``: seconds between
    resharding decisions. Opens no file: the queue is opened by ``Destination.start``."""
    dead_letters = _dead_letters(config, storage=storage, metrics=metrics)
    stopping = Stopping()  # shared by the appends, the reader, the senders and the pacer
    pacer = _pacer(config, metrics=metrics, stopping=stopping, clock=clock)
    attempts = _attempts(
        config,
        transport=transport,
        auth=auth,
        metrics=metrics,
        pacer=pacer,
        stopping=stopping,
        clock=clock,
        wall_clock=wall_clock,
        rand=rand,
        sleep=sleep,
    )
    deliverer = _deliverer(config, attempts=attempts, dead_letters=dead_letters)
    reader = _reader(
        config,
        storage=storage,
        deliverer=deliverer,
        dead_letters=dead_letters,
        metrics=metrics,
        clock=clock,
        stopping=stopping,
        reshard_interval=reshard_interval,
    )
    return Destination(
        config=config,
        storage=storage,
        reader=reader,
        deliverer=deliverer,
        auth=auth,
        pacer=pacer,
        dead_letters=dead_letters,
        metadata=_metadata_queue(config, metrics),
        metrics=metrics,
        clock=clock,
        wall_clock=wall_clock,
    )


def _dead_letters(
    config: DestinationConfig, *, storage: StorageConfig, metrics: Metrics
) -> DeadLetters:
    """The destination's dead-letter store (``<storage.path>/rejected/<name>``, bounded by
    ``storage.rejected_max_bytes``) and the writer that hands refused batches to it."""
    store = DeadLetterStore(
        dead_letter_dir(storage.path, config.name), max_bytes=storage.rejected_max_bytes
    )
    return DeadLetters(name=config.name, store=store, metrics=metrics.deadletter)


def _attempts(
    config: DestinationConfig,
    *,
    transport: WriteClient,
    auth: Authenticator,
    metrics: Metrics,
    pacer: Pacer | None,
    stopping: Stopping,
    clock: Callable[[], float],
    wall_clock: Callable[[], float],
    rand: Callable[[], float],
    sleep: Callable[[float], Coroutine[Any, Any, None]],
) -> Attempts:
    """The destination's requests: signed by ``auth``, sent by ``transport`` with its
    headers, retried by its retry policy, paced by ``pacer``; a request being retried stops
    when ``stopping`` is a handover (the batch is the successor's)."""
    return Attempts(
        name=config.name,
        transport=transport,
        auth=auth,
        policy=_retry_policy(config.queue_config),
        metrics=metrics.send,
        headers=dict(config.headers),
        tenant_header=config.tenant_header,
        pacer=pacer,
        abandon=lambda: stopping.handover,
        clock=clock,
        wall_clock=wall_clock,
        rand=rand,
        sleep=sleep,
    )


def _deliverer(
    config: DestinationConfig, *, attempts: Attempts, dead_letters: DeadLetters
) -> Deliverer:
    """The destination's deliverer, sending through ``attempts`` (its requests with their
    retry policy, headers and pacing): its protocol, the metadata book of an RW 2.0
    destination, its sample age limit; what it rejects for good goes to ``dead_letters``."""
    return Deliverer(
        attempts=attempts,
        message=config.protobuf_message,
        book=_metadata_book(config),
        age=SampleAgeLimit(config.queue_config.sample_age_limit),
        on_rejected=dead_letters,
    )


def _pacer(
    config: DestinationConfig,
    *,
    metrics: Metrics,
    stopping: Stopping,
    clock: Callable[[], float],
) -> Pacer | None:
    """The destination's pacer (``max_samples_per_second``, ``burst_samples``), shared by its
    shards and metadata sender; None when it is not paced."""
    q_ = config.queue_config
    if not q_.paced:
        return None
    return Pacer(
        name=config.name,
        rate=q_.max_samples_per_second,
        burst=q_.burst_samples,
        metrics=metrics.send,
        stopping=stopping,
        clock=clock,
    )


def _metadata_book(config: DestinationConfig) -> MetadataBook | None:
    """The metadata book of an RW 2.0 destination (its metric name escaping scheme); None
    for RW 1.0, which sends metadata on its own (:mod:`rwrouter.send.metadata`)."""
    if config.protobuf_message != RW2_MESSAGE:
        return None
    return MetadataBook(escaping=config.metric_name_escaping_scheme)


def _retry_policy(q_: QueueConfig) -> RetryPolicy:
    """The destination's retry policy from the ``queue_config`` entry (backoff seconds, 429
    handling, retry budgets in seconds)."""
    return RetryPolicy(
        min_backoff=q_.min_backoff,
        max_backoff=q_.max_backoff,
        retry_on_http_429=q_.retry_on_http_429,
        max_retry_duration=q_.max_retry_duration,
        max_retry_duration_on_http_429=q_.max_retry_duration_on_http_429,
    )


def _reader(
    config: DestinationConfig,
    *,
    storage: StorageConfig,
    deliverer: Deliverer,
    dead_letters: DeadLetters,
    metrics: Metrics,
    clock: Callable[[], float],
    stopping: Stopping,
    reshard_interval: float,
) -> QueueReader:
    """The reader of the destination's disk queue (``<storage.path>/queue/<name>``, bounded
    by ``max_disk_bytes``; not opened yet), with its shards and the destination's stop."""
    q_ = config.queue_config
    return QueueReader(
        name=config.name,
        queue=DiskQueue(queue_dir(storage.path, config.name), max_bytes=q_.max_disk_bytes),
        queue_config=q_,
        deliverer=deliverer,
        dead_letters=dead_letters,
        metrics=metrics.send,
        queue_metrics=metrics.queue,
        clock=clock,
        stopping=stopping,
        reshard_interval=reshard_interval,
    )


def _metadata_queue(config: DestinationConfig, metrics: Metrics) -> MetadataQueue:
    """The destination's metadata queue: batches of ``metadata_config.max_samples_per_send``
    entries, at most ``queue_config.max_memory_bytes`` bytes, an entry sent again after half
    of ``metadata_config.send_interval`` seconds."""
    return MetadataQueue(
        name=config.name,
        batch_size=config.metadata_config.max_samples_per_send,
        max_bytes=config.queue_config.max_memory_bytes,
        metrics=metrics.send,
        resend_after=config.metadata_config.send_interval / 2,
    )


async def build_destination(
    dest: DestinationConfig, index: int, *, storage: StorageConfig, metrics: Metrics
) -> Destination:
    """A (not yet started) :class:`Destination` for ``remote_write[index]``: its
    authenticator, its :class:`~rwrouter.send.transport.Transport`, then
    :func:`make_destination`.

    Raises ConfigError / CredentialsError when its auth cannot be set up.
    """
    path = f"remote_write[{index}]"
    auth = await authenticator_for(dest, path=path)
    log.info(
        kv(
            destination=dest.name,
            url=redact_url(dest.url),
            auth=auth.kind,
            fallback=dest.fallback,
            rules=len(dest.write_relabel_configs),
        )
    )
    return make_destination(
        dest, storage=storage, transport=transport_for(dest, path=path), auth=auth, metrics=metrics
    )
