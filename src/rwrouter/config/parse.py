"""YAML text -> :class:`Config` (pure), in Prometheus ``remote_write`` syntax.

Rules (each has a ``tests/testdata/config/<rule>.bad.yml``): unknown keys are errors; Prometheus
keys rwrouter does not implement are errors saying "not supported by rwrouter"; ``${VAR}`` is
expanded only in ``url``, ``headers`` values, credential fields, ``*_file`` paths and ``proxy_url``
(never in relabel rules, where ``${1}`` is a template); every error names the key path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from rwrouter.config.client import NOT_SUPPORTED, Context
from rwrouter.config.collect import Collector
from rwrouter.config.destinations import (
    check_budgets,
    enum_choice,
    parse_destinations,
    parse_rules,
)
from rwrouter.config.document import load_yaml
from rwrouter.config.model import (
    AuditConfig,
    Config,
    Fsync,
    GlobalConfig,
    PriceTier,
    RelabelCacheConfig,
    ServerConfig,
    StorageConfig,
    ValidationScheme,
)
from rwrouter.config.paths import check_destination_paths
from rwrouter.config.promkeys import PROMETHEUS_ONLY, notes
from rwrouter.config.sections import TOP_KEYS, misplaced
from rwrouter.config.values import Fields, field_names, format_size, kind_of, show
from rwrouter.errors import ConfigError

__all__ = ["parse_config"]

_PROMETHEUS_ONLY = (
    "a Prometheus setting, not read by rwrouter "
    "(its keys: global, server, storage, relabel_cache, audit, relabel_configs, remote_write)"
)
_TOP_UNSUPPORTED = dict.fromkeys(PROMETHEUS_ONLY["top"], _PROMETHEUS_ONLY)
_GLOBAL_PROMETHEUS_ONLY = (
    "a Prometheus setting, not read by rwrouter (its global key: metric_name_validation_scheme)"
)
_GLOBAL_UNSUPPORTED = {
    **dict.fromkeys(PROMETHEUS_ONLY["global"], _GLOBAL_PROMETHEUS_ONLY),
    "external_labels": f"{NOT_SUPPORTED} (add the labels with a relabel_configs replace rule)",
    "metric_name_escaping_scheme": (
        "a Prometheus scrape setting; rwrouter escapes per destination: set "
        "remote_write[].metric_name_escaping_scheme"
    ),
}
_STORAGE_UNSUPPORTED = dict.fromkeys(
    PROMETHEUS_ONLY["storage"],
    "a Prometheus setting (of its TSDB), not read by rwrouter: rwrouter's storage section "
    f"holds its queues ({', '.join(field_names(StorageConfig))})",
)


def parse_config(
    text: str,
    *,
    env: Mapping[str, str],
    source: str = "<string>",
    base_dir: str | None = None,
    files: list[tuple[str, str]] | None = None,
) -> Config:
    """Parse and validate a configuration file's text; raises ConfigError naming the key path.

    ``env`` supplies ``${VAR}`` values; ``base_dir``, when given, is joined to relative ``*_file``
    paths (as Prometheus resolves them against the config file's directory). Reads no files:
    ``files``, when given, gets each ``*_file`` named, ``(key path, file path)``, also when
    the file has mistakes elsewhere (the caller checks them: every mistake in one run).
    """
    errors = Collector()  # every independent mistake, not only the first (check-config)
    top = errors.fields(
        load_yaml(text, source),
        "",
        known=TOP_KEYS,
        unsupported=_TOP_UNSUPPORTED,
        elsewhere=misplaced("top"),
    )
    ctx = Context(env=env, base_dir=base_dir, files=files)
    global_ = errors.attempt(lambda: _global_section(errors, top), GlobalConfig())
    scheme = global_.metric_name_validation_scheme
    config = Config(
        global_=global_,
        server=errors.attempt(
            lambda: _server(_section(errors, top, "server", ServerConfig), errors), ServerConfig()
        ),
        storage=errors.attempt(
            lambda: _storage(
                _section(errors, top, "storage", StorageConfig, unsupported=_STORAGE_UNSUPPORTED),
                errors,
            ),
            StorageConfig(),
        ),
        relabel_cache=errors.attempt(
            lambda: _relabel_cache(
                _section(errors, top, "relabel_cache", RelabelCacheConfig), errors
            ),
            RelabelCacheConfig(),
        ),
        audit=errors.attempt(
            lambda: _audit(_section(errors, top, "audit", AuditConfig), errors), AuditConfig()
        ),
        relabel_configs=errors.attempt(
            lambda: parse_rules(top.raw("relabel_configs"), "relabel_configs", scheme), ()
        ),
        remote_write=errors.attempt(
            lambda: parse_destinations(top.raw("remote_write"), "remote_write", ctx, scheme), ()
        ),
        source=source,
        notes=notes(top.raw("remote_write"), "remote_write"),
    )
    errors.check()  # the checks below read several sections: only once each is valid
    _check_across(config)
    return config


def _global_section(errors: Collector, top: Fields) -> GlobalConfig:
    return _global(
        errors.fields(
            top.raw("global"),
            "global",
            known=field_names(GlobalConfig),
            unsupported=_GLOBAL_UNSUPPORTED,
            elsewhere=misplaced("global"),
        )
    )


def _check_across(config: Config) -> None:
    """What holds across sections: series budgets within the audit's quota, queue paths."""
    check_budgets(config.remote_write, config.audit.series_limit, "remote_write")
    check_destination_paths(
        config.storage.path,
        (
            (f"remote_write[{i}].name", d.name)
            for i, d in enumerate(config.remote_write)
            if not d.shadow
        ),
    )


def _section(
    errors: Collector,
    top: Fields,
    key: str,
    model: type,
    *,
    unsupported: Mapping[str, str] | None = None,
) -> Fields:
    """The top-level section ``key``, whose keys are the fields of ``model`` (unknown keys,
    and those of ``unsupported`` with its reason, kept in ``errors``)."""
    return errors.fields(
        top.raw(key),
        key,
        known=field_names(model),
        unsupported=unsupported,
        elsewhere=misplaced(key),
    )


def _global(f: Fields) -> GlobalConfig:
    d = GlobalConfig()
    key = "metric_name_validation_scheme"
    # Empty is Prometheus's "unset": the default (utf8), as when the key is absent.
    scheme = f.string(key, d.metric_name_validation_scheme) or d.metric_name_validation_scheme
    if scheme not in tuple(ValidationScheme):
        raise ConfigError(
            f.at(key),
            f"expected one of {', '.join(ValidationScheme)}, got {show(scheme, f.at(key))}",
        )
    return GlobalConfig(metric_name_validation_scheme=ValidationScheme(scheme))


def _server(f: Fields, errors: Collector) -> ServerConfig:
    """The ``server`` section; each key is checked on its own (every bad value reported),
    then ``max_buffered_body_bytes`` >= ``max_request_bytes`` when both parsed (one largest
    body must fit)."""
    d = ServerConfig()
    found = errors.values(
        {
            "listen_address": lambda: parse_listen_address(
                f.string("listen_address", d.listen_address), f.at("listen_address")
            ),
            "max_request_bytes": lambda: f.size("max_request_bytes", d.max_request_bytes),
            "max_decoded_bytes": lambda: f.size("max_decoded_bytes", d.max_decoded_bytes),
            "queue_full_retry_after": lambda: f.duration(
                "queue_full_retry_after", d.queue_full_retry_after
            ),
            "read_timeout": lambda: f.duration("read_timeout", d.read_timeout),
            "shutdown_timeout": lambda: f.duration(
                "shutdown_timeout", d.shutdown_timeout, positive=False
            ),
            "max_concurrent_reads": lambda: f.integer(
                "max_concurrent_reads", d.max_concurrent_reads, minimum=1
            ),
            "max_buffered_body_bytes": lambda: f.size(
                "max_buffered_body_bytes", d.max_buffered_body_bytes
            ),
            "read_wait_timeout": lambda: f.duration("read_wait_timeout", d.read_wait_timeout),
            "header_read_timeout": lambda: f.duration("header_read_timeout", d.header_read_timeout),
            "idle_timeout": lambda: f.duration("idle_timeout", d.idle_timeout),
            "max_connections": lambda: f.integer("max_connections", d.max_connections, minimum=1),
        }
    )
    request, buffered = found.get("max_request_bytes"), found.get("max_buffered_body_bytes")
    if request is not None and buffered is not None and buffered < request:
        errors.keep(
            ConfigError(
                f.at("max_buffered_body_bytes"),
                f"must be at least max_request_bytes ({format_size(request)}): "
                f"one largest body must fit, got {format_size(buffered)}",
            )
        )
    return ServerConfig(**found)


def _storage(f: Fields, errors: Collector) -> StorageConfig:
    """The ``storage`` section, each key checked on its own."""
    d = StorageConfig()
    return StorageConfig(
        **errors.values(
            {
                "path": lambda: _not_empty(f, "path", d.path),
                "fsync": lambda: enum_choice(f, "fsync", d.fsync, Fsync),
                "fsync_interval": lambda: f.duration("fsync_interval", d.fsync_interval),
                "rejected_max_bytes": lambda: f.size("rejected_max_bytes", d.rejected_max_bytes),
            }
        )
    )


def _not_empty(f: Fields, key: str, default: str, *, blank: bool = True) -> str:
    """The string at ``key``; empty (or, unless ``blank``, only spaces) is an error."""
    value = f.string(key, default) or ""
    if not (value if blank else value.strip()):
        raise ConfigError(f.at(key), "must not be empty")
    return value


def _relabel_cache(f: Fields, errors: Collector) -> RelabelCacheConfig:
    """The ``relabel_cache`` section, each key checked on its own."""
    d = RelabelCacheConfig()
    return RelabelCacheConfig(
        **errors.values(
            {
                "max_entries": lambda: f.integer("max_entries", d.max_entries, minimum=1),
                "max_bytes": lambda: f.size("max_bytes", d.max_bytes),
                "max_age": lambda: f.duration("max_age", d.max_age),
                "max_tenants": lambda: f.integer("max_tenants", d.max_tenants, minimum=1),
            }
        )
    )


def _audit(f: Fields, errors: Collector) -> AuditConfig:
    """The ``audit`` section, each key checked on its own."""
    d = AuditConfig()
    return AuditConfig(
        **errors.values(
            {
                "window": lambda: f.duration("window", d.window),
                "series_limit": lambda: f.integer("series_limit", d.series_limit, minimum=1),
                "max_series": lambda: f.integer("max_series", d.max_series, minimum=1),
                "rate_window": lambda: f.duration("rate_window", d.rate_window),
                "price_tiers": lambda: (
                    _price_tiers(f.raw("price_tiers"), f.at("price_tiers"))
                    if f.has("price_tiers")
                    else d.price_tiers
                ),
                "currency": lambda: _not_empty(f, "currency", d.currency, blank=False),
                "refresh": lambda: f.duration("refresh", d.refresh, positive=False),
            }
        )
    )


def _price_tiers(raw: object, path: str) -> tuple[PriceTier, ...]:
    """Ascending tiers; only the last may (and must) have no ``up_to_samples``."""
    if not isinstance(raw, list) or not raw:
        got = "an empty list" if raw == [] else kind_of(raw, path)
        raise ConfigError(path, f"expected a non-empty list of tiers, got {got}")
    tiers, bound = [], 0
    for i, item in enumerate(raw):
        f = Fields(
            item, f"{path}[{i}]", known=field_names(PriceTier), elsewhere=misplaced("price_tiers")
        )
        price = f.raw("per_million")
        if price is None:
            raise ConfigError(f.at("per_million"), "required (price per million samples)")
        if (
            isinstance(price, bool)
            or not isinstance(price, int | float)
            or not 0 <= price < math.inf
        ):
            why = "expected a finite price >= 0 per million samples, got " + show(
                price, f.at("per_million")
            )
            raise ConfigError(f.at("per_million"), why)
        last = i == len(raw) - 1
        if last == f.has("up_to_samples"):
            raise ConfigError(
                f.at("up_to_samples"),
                "the last tier has no bound (omit it)"
                if last
                else "required on every tier but the last",
            )
        up_to = None if last else f.integer("up_to_samples", 0, minimum=bound + 1)
        bound = up_to or bound
        tiers.append(PriceTier(per_million=float(price), up_to_samples=up_to))
    return tuple(tiers)


def parse_listen_address(value: str | None, path: str) -> str:
    """``host:port`` (port 0..65535; an IPv6 host in brackets), else ConfigError."""
    text = value or ""
    host, sep, port = text.rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    valid_host = (
        bool(bare) and not any(c.isspace() for c in bare) and (":" not in host or bare != host)
    )
    if not sep or not valid_host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            path, f"expected host:port (e.g. 0.0.0.0:9250, [::]:9250), got {show(value, path)}"
        )
    return text
