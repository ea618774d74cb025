"""The ``remote_write`` section (pure): each destination's keys, validated with Prometheus's
field semantics (``remote_write`` of the Prometheus configuration) plus rwrouter's own
(``fallback``, ``shadow``, ``audit``, ``metric_name_escaping_scheme``, the series budget per
destination), and
the names given to destinations without one. The Prometheus keys without an rwrouter
setting (``follow_redirects``, ``oauth2``, ...) are read or refused as
:mod:`rwrouter.config.promkeys` says. Raises ConfigError naming the key path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, TypeVar
from urllib.parse import urlsplit

from rwrouter.config.budget import QUOTA_MARGIN, OnSeriesLimit
from rwrouter.config.client import (
    Context,
    auth,
    env_string,
    headers,
    http_url,
    tenant_header,
    tls,
)
from rwrouter.config.collect import Collector
from rwrouter.config.model import (
    SIGV4_MAX_REQUEST_BYTES,
    DestinationConfig,
    EscapingScheme,
    HaDedupConfig,
    MetadataConfig,
    OnFull,
    QueueConfig,
)
from rwrouter.config.promkeys import REFUSED, flag_keys, read_flags
from rwrouter.config.sections import misplaced
from rwrouter.config.values import Fields, field_names, kind_of, show
from rwrouter.errors import ConfigError
from rwrouter.protocol import MESSAGES
from rwrouter.relabel import RelabelConfig, parse_relabel_configs
from rwrouter.relabel.names import is_utf8_label_name

__all__ = ["check_budgets", "choice", "parse_destinations", "parse_rules"]


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


def parse_rules(raw: object, path: str, scheme: str) -> tuple[RelabelConfig, ...]:
    """The rules at ``path``, validated under the name validation ``scheme``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(path, "expected a list of relabel rules")
    return parse_relabel_configs(raw, path, scheme=scheme)


def parse_destinations(
    raw: object, path: str, ctx: Context, scheme: str
) -> tuple[DestinationConfig, ...]:
    if raw is None or raw == []:
        raise ConfigError(path, "at least one destination is required")
    if not isinstance(raw, list):
        raise ConfigError(path, f"expected a list of destinations, got {kind_of(raw, path)}")
    errors = Collector()  # each destination's mistakes, then the next destination's
    parsed: list[DestinationConfig] = []
    for i, item in enumerate(raw):

        def one(item: object = item, at: str = f"{path}[{i}]") -> DestinationConfig:
            return _destination(
                errors.fields(
                    item,
                    at,
                    known=field_names(DestinationConfig) + flag_keys("destination"),
                    unsupported=REFUSED["destination"],
                    elsewhere=misplaced("destination"),
                ),
                ctx,
                scheme,
            )

        dest = errors.attempt(one, None)
        if dest is not None:
            parsed.append(dest)
    errors.check()
    return _checked(parsed, path)


def _checked(parsed: list[DestinationConfig], path: str) -> tuple[DestinationConfig, ...]:
    """What holds across destinations: one that is not a fallback, unique names."""
    if all(d.fallback for d in parsed):
        raise ConfigError(f"{path}[0].fallback", "at least one destination must not be a fallback")
    return _named(parsed, path)


def _named(parsed: list[DestinationConfig], path: str) -> tuple[DestinationConfig, ...]:
    """Check explicit names are unique; name the others after their URL host (+ ``-<index>``)."""
    taken: dict[str, int] = {}
    for i, dest in enumerate(parsed):
        if dest.name in taken:
            raise ConfigError(
                f"{path}[{i}].name",
                f"duplicate destination name {dest.name!r} (also {path}[{taken[dest.name]}].name)",
            )
        if dest.name:
            taken[dest.name] = i
    hosts = [urlsplit(d.url).hostname or "" for d in parsed]
    named = []
    for i, dest in enumerate(parsed):
        name = dest.name
        if not name:
            name = hosts[i] if hosts.count(hosts[i]) == 1 else f"{hosts[i]}-{i}"
            while name in taken:
                name = f"{name}-{i}"
            taken[name] = i
        named.append(dataclasses.replace(dest, name=name))
    return tuple(named)


def _destination(f: Fields, ctx: Context, scheme: str) -> DestinationConfig:
    default = DestinationConfig(name="", url="")
    name = f.string("name")
    if name is not None and not name.strip():
        raise ConfigError(f.at("name"), "must not be empty")
    shadow = f.boolean("shadow", default.shadow)
    if shadow and not f.has("url") and not name:
        raise ConfigError(f.at("name"), "a shadow destination without url needs a name")
    # url before auth: errors come in the order a reader meets the keys.
    url = (
        ""
        if shadow and not f.has("url")
        else http_url(env_string(f, "url", ctx), f.at("url"), userinfo=False)
    )
    auth_section = auth(f, ctx)
    proxy = env_string(f, "proxy_url", ctx)
    read_flags(f, "destination")  # follow_redirects, enable_http2, ...: notes or refusals
    return DestinationConfig(
        name=name or "",
        url=url,
        remote_timeout=f.duration("remote_timeout", default.remote_timeout),
        headers=headers(f, ctx, sigv4="sigv4" in auth_section),
        tenant_header=tenant_header(f, sigv4="sigv4" in auth_section),
        write_relabel_configs=parse_rules(
            f.raw("write_relabel_configs"), f.at("write_relabel_configs"), scheme
        ),
        tls_config=tls(f, ctx) if f.has("tls_config") else None,
        proxy_url=None if proxy is None else http_url(proxy, f.at("proxy_url"), userinfo=True),
        queue_config=_queue(
            _section(f, "queue_config", QueueConfig), sigv4="sigv4" in auth_section
        ),
        metadata_config=_metadata(_section(f, "metadata_config", MetadataConfig)),
        send_exemplars=f.boolean("send_exemplars", default.send_exemplars),
        send_native_histograms=f.boolean("send_native_histograms", default.send_native_histograms),
        fallback=f.boolean("fallback", default.fallback),
        shadow=shadow,
        audit=f.boolean("audit", default.audit),
        ha_dedup=_ha_dedup(f),
        protobuf_message=choice(f, "protobuf_message", default.protobuf_message, MESSAGES),
        **_budget(f, default),
        # The managed workspace refuses UTF-8 names (400): a sigv4 destination escapes them.
        metric_name_escaping_scheme=enum_choice(
            f,
            "metric_name_escaping_scheme",
            EscapingScheme.UNDERSCORES
            if "sigv4" in auth_section
            else default.metric_name_escaping_scheme,
            EscapingScheme,
        ),
        **auth_section,
    )


def _section(dest: Fields, key: str, model: type) -> Fields:
    """The destination's section ``key``, whose keys are the fields of ``model``."""
    return Fields(dest.raw(key), dest.at(key), known=field_names(model), elsewhere=misplaced(key))


_HA_KEYS = field_names(HaDedupConfig)


def _ha_dedup(dest: Fields) -> HaDedupConfig | None:
    """The ``ha_dedup`` section (None when absent): two different, non-empty label names (any
    UTF-8 name, as Prometheus ``external_labels`` may hold) and a positive
    ``failover_timeout``."""
    if "ha_dedup" in dest.nulls:  # `ha_dedup:` alone would silently turn it off
        raise ConfigError(dest.at("ha_dedup"), "is empty (write `ha_dedup: {}` for the defaults)")
    if not dest.has("ha_dedup"):
        return None
    f = Fields(
        dest.raw("ha_dedup"), dest.at("ha_dedup"), known=_HA_KEYS, elsewhere=misplaced("ha_dedup")
    )
    d = HaDedupConfig()
    names = {}
    for key, default in (("cluster_label", d.cluster_label), ("replica_label", d.replica_label)):
        name = f.string(key, default) or ""
        if not is_utf8_label_name(name):
            raise ConfigError(f.at(key), f"expected a label name, got {show(name, f.at(key))}")
        if name == "__name__":  # the replica label is dropped: every series would lose its name
            raise ConfigError(f.at(key), "must not be __name__")
        names[key] = name
    if names["cluster_label"] == names["replica_label"]:
        raise ConfigError(f.at("replica_label"), "must differ from cluster_label")
    return HaDedupConfig(
        cluster_label=names["cluster_label"],
        replica_label=names["replica_label"],
        failover_timeout=f.duration("failover_timeout", d.failover_timeout),
    )


def _budget(f: Fields, default: DestinationConfig) -> dict[str, Any]:
    """The series budget keys (:mod:`rwrouter.routing.budget`); the others need
    ``series_limit``."""
    if "series_limit" in f.nulls:  # `series_limit:` alone would silently turn it off
        raise ConfigError(f.at("series_limit"), "is empty (give the active series it may hold)")
    if not f.has("series_limit"):
        for key in ("on_series_limit", "series_window", "series_limit_near_quota"):
            if f.has(key):
                raise ConfigError(f.at(key), "needs series_limit")
        return {}
    return {
        "series_limit": f.integer("series_limit", 1, minimum=1),
        "on_series_limit": enum_choice(
            f, "on_series_limit", default.on_series_limit, OnSeriesLimit
        ),
        "series_window": f.duration("series_window", default.series_window),
        "series_limit_near_quota": f.boolean(
            "series_limit_near_quota", default.series_limit_near_quota
        ),
    }


def check_budgets(destinations: Sequence[DestinationConfig], quota: int, path: str) -> None:
    """The series budgets against the rest of the configuration: ``on_series_limit:
    fallback`` needs a fallback destination to go to, a fallback destination's own budget
    can only drop, a shadow destination sends nothing to budget; a sigv4 destination's
    ``series_limit`` is at most ``quota`` (``audit.series_limit``: the workspace's
    active-series limit, past which it answers 400 to a new series) and within
    :data:`QUOTA_MARGIN` of it only with ``series_limit_near_quota: true``. Raises
    ConfigError naming the key."""
    has_fallback = any(d.fallback and not d.shadow for d in destinations)  # a shadow sends none
    for i, dest in enumerate(destinations):
        at = f"{path}[{i}]"
        limit = dest.series_limit
        if limit is None:
            continue
        if dest.shadow:
            raise ConfigError(f"{at}.series_limit", "a shadow destination sends nothing to limit")
        if dest.on_series_limit == OnSeriesLimit.FALLBACK and dest.fallback:
            raise ConfigError(
                f"{at}.on_series_limit",
                "a fallback destination's budget can only drop (on_series_limit: drop)",
            )
        if dest.on_series_limit == OnSeriesLimit.FALLBACK and not has_fallback:
            raise ConfigError(
                f"{at}.on_series_limit",
                "fallback needs a destination with fallback: true that is not a shadow "
                "(or use drop)",
            )
        if dest.sigv4 is None:
            continue
        if limit > quota:
            raise ConfigError(
                f"{at}.series_limit",
                f"{limit} is over the workspace's limit of {quota} (audit.series_limit)",
            )
        if limit > quota * (1 - QUOTA_MARGIN) and not dest.series_limit_near_quota:
            raise ConfigError(
                f"{at}.series_limit",
                f"{limit} is within {QUOTA_MARGIN:.0%} of the workspace's limit of {quota} "
                "(audit.series_limit), which refuses new series with 400: leave a margin "
                "(other writers, collisions of the count) or set series_limit_near_quota: true",
            )


def _queue(f: Fields, *, sigv4: bool) -> QueueConfig:
    d = QueueConfig()
    request_bytes = SIGV4_MAX_REQUEST_BYTES if sigv4 else d.max_request_bytes
    queue = QueueConfig(
        capacity=f.integer("capacity", d.capacity, minimum=1),
        min_shards=f.integer("min_shards", d.min_shards, minimum=1),
        max_shards=f.integer("max_shards", d.max_shards, minimum=1),
        max_samples_per_send=f.integer("max_samples_per_send", d.max_samples_per_send, minimum=1),
        batch_send_deadline=f.duration("batch_send_deadline", d.batch_send_deadline),
        min_backoff=f.duration("min_backoff", d.min_backoff),
        max_backoff=f.duration("max_backoff", d.max_backoff),
        retry_on_http_429=f.boolean("retry_on_http_429", d.retry_on_http_429),
        max_memory_bytes=f.size("max_memory_bytes", d.max_memory_bytes),
        max_disk_bytes=f.size("max_disk_bytes", d.max_disk_bytes),
        on_full=enum_choice(f, "on_full", d.on_full, OnFull),
        max_request_bytes=f.size("max_request_bytes", request_bytes),
        max_retry_duration=f.duration("max_retry_duration", d.max_retry_duration, positive=False),
        max_retry_duration_on_http_429=f.duration(
            "max_retry_duration_on_http_429", d.max_retry_duration_on_http_429, positive=False
        ),
        # Prometheus's key: 0 (its default) turns it off
        sample_age_limit=f.duration("sample_age_limit", d.sample_age_limit, positive=False),
    )
    queue = _pacing(f, queue)
    if queue.min_shards > queue.max_shards:
        raise ConfigError(f.at("min_shards"), f"must be <= max_shards ({queue.max_shards})")
    if queue.min_backoff > queue.max_backoff:
        raise ConfigError(f.at("min_backoff"), "must be <= max_backoff")
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


def _metadata(f: Fields) -> MetadataConfig:
    d = MetadataConfig()
    return MetadataConfig(
        send=f.boolean("send", d.send),
        send_interval=f.duration("send_interval", d.send_interval),
        max_samples_per_send=f.integer("max_samples_per_send", d.max_samples_per_send, minimum=1),
    )
