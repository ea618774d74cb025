"""A destination's ``queue_config`` and ``metadata_config`` sections (pure): Prometheus's keys
and defaults plus rwrouter's own (``max_disk_bytes``, ``on_full``, pacing, ...).

Each key is checked on its own (:meth:`Collector.values`): ``max_shards: -1`` and
``retry_on_http_429: maybe`` in one section are two lines of ``check-config``. A check that
reads two keys (``min_shards <= max_shards``, ``min_backoff <= max_backoff``, pacing) runs
only when both read. Errors name the key path (ConfigError, kept in the Collector).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from enum import StrEnum
from typing import TypeVar

from rwrouter.config.collect import Collector
from rwrouter.config.model import SIGV4_MAX_REQUEST_BYTES, MetadataConfig, OnFull, QueueConfig
from rwrouter.config.values import Fields, show
from rwrouter.errors import ConfigError

__all__ = ["choice", "enum_choice", "parse_metadata", "parse_queue"]


def choice(f: Fields, key: str, default: str, choices: Sequence[str]) -> str:
    """``key``'s value, one of ``choices`` (``default`` when absent). Raises ConfigError
    listing them otherwise."""
    value = f.string(key, default) or ""
    if value not in choices:
        raise ConfigError(
            f.at(key), f"expected one of {', '.join(choices)}, got {show(value, f.at(key))}"
        )
    return value


E = TypeVar("E", bound=StrEnum)


def enum_choice(f: Fields, key: str, default: E, enum: type[E]) -> E:
    """``key``'s value as a member of ``enum`` (:func:`choice` of its values, in order)."""
    return enum(choice(f, key, default, tuple(enum)))


def parse_queue(f: Fields, errors: Collector, *, sigv4: bool) -> QueueConfig:
    """The ``queue_config`` section ``f``; its mistakes are kept in ``errors`` (the
    QueueConfig returned then holds defaults in their place)."""
    d = QueueConfig()
    request_bytes = SIGV4_MAX_REQUEST_BYTES if sigv4 else d.max_request_bytes
    read = errors.values(
        {
            "capacity": lambda: f.integer("capacity", d.capacity, minimum=1),
            "min_shards": lambda: f.integer("min_shards", d.min_shards, minimum=1),
            "max_shards": lambda: f.integer("max_shards", d.max_shards, minimum=1),
            "max_samples_per_send": lambda: f.integer(
                "max_samples_per_send", d.max_samples_per_send, minimum=1
            ),
            "batch_send_deadline": lambda: f.duration("batch_send_deadline", d.batch_send_deadline),
            "min_backoff": lambda: f.duration("min_backoff", d.min_backoff),
            "max_backoff": lambda: f.duration("max_backoff", d.max_backoff),
            "retry_on_http_429": lambda: f.boolean("retry_on_http_429", d.retry_on_http_429),
            "max_memory_bytes": lambda: f.size("max_memory_bytes", d.max_memory_bytes),
            "max_disk_bytes": lambda: f.size("max_disk_bytes", d.max_disk_bytes),
            "on_full": lambda: enum_choice(f, "on_full", d.on_full, OnFull),
            "max_request_bytes": lambda: f.size("max_request_bytes", request_bytes),
            "max_retry_duration": lambda: f.duration(
                "max_retry_duration", d.max_retry_duration, positive=False
            ),
            "max_retry_duration_on_http_429": lambda: f.duration(
                "max_retry_duration_on_http_429", d.max_retry_duration_on_http_429, positive=False
            ),
            # Prometheus's key: 0 (its default) turns it off
            "sample_age_limit": lambda: f.duration(
                "sample_age_limit", d.sample_age_limit, positive=False
            ),
        }
    )
    queue = QueueConfig(**read)
    if "max_samples_per_send" in read:  # the default burst depends on it
        queue = errors.attempt(lambda: _pacing(f, queue), queue)
    if {"min_shards", "max_shards"} <= read.keys() and queue.min_shards > queue.max_shards:
        errors.keep(ConfigError(f.at("min_shards"), f"must be <= max_shards ({queue.max_shards})"))
    if {"min_backoff", "max_backoff"} <= read.keys() and queue.min_backoff > queue.max_backoff:
        errors.keep(ConfigError(f.at("min_backoff"), "must be <= max_backoff"))
    return queue


def _pacing(f: Fields, queue: QueueConfig) -> QueueConfig:
    """``max_samples_per_second`` (0 or absent: not paced) and ``burst_samples`` (default:
    one second's worth, at least ``max_samples_per_send``; only with a rate)."""
    rate = f.integer("max_samples_per_second", 0, minimum=0)
    if not rate:
        if f.has("burst_samples"):
            why = "is 0 (off)" if f.has("max_samples_per_second") else "is not set"
            raise ConfigError(
                f.at("burst_samples"),
                f"does nothing: pacing is off, max_samples_per_second {why}; set "
                "max_samples_per_second to the samples a second to pace at, or remove "
                "burst_samples",
            )
        return queue
    burst = f.integer("burst_samples", max(rate, queue.max_samples_per_send), minimum=1)
    return dataclasses.replace(queue, max_samples_per_second=float(rate), burst_samples=burst)


def parse_metadata(f: Fields, errors: Collector) -> MetadataConfig:
    """The ``metadata_config`` section ``f``, each key checked on its own (into ``errors``)."""
    d = MetadataConfig()
    return MetadataConfig(
        **errors.values(
            {
                "send": lambda: f.boolean("send", d.send),
                "send_interval": lambda: f.duration("send_interval", d.send_interval),
                "max_samples_per_send": lambda: f.integer(
                    "max_samples_per_send", d.max_samples_per_send, minimum=1
                ),
            }
        )
    )
