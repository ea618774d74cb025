"""YAML text -> :class:`Config` (pure), in Prometheus ``remote_write`` syntax.

Rules (each has a ``tests/testdata/config/<rule>.bad.yml``): unknown keys are errors; Prometheus
keys rwrouter does not implement are errors saying "not supported by rwrouter"; ``${VAR}`` is
expanded only in ``url``, ``headers`` values, credential fields, ``*_file`` paths and ``proxy_url``
(never in relabel rules, where ``${1}`` is a template); every error names the key path.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from urllib.parse import urlsplit

import yaml

from rwrouter.config.client import NOT_SUPPORTED, Context, auth, env_string, headers, http_url, tls
from rwrouter.config.model import (
    ESCAPING_SCHEMES,
    FSYNC_POLICIES,
    ON_FULL_POLICIES,
    SIGV4_MAX_REQUEST_BYTES,
    VALIDATION_SCHEMES,
    AuditConfig,
    Config,
    DestinationConfig,
    GlobalConfig,
    MetadataConfig,
    PriceTier,
    QueueConfig,
    RelabelCacheConfig,
    ServerConfig,
    StorageConfig,
)
from rwrouter.config.values import Fields, field_names, kind_of
from rwrouter.errors import ConfigError
from rwrouter.protocol import MESSAGES
from rwrouter.relabel import RelabelConfig, parse_relabel_configs

__all__ = ["parse_config"]

_PROMETHEUS_ONLY = (
    "a Prometheus setting, not read by rwrouter "
    "(its keys: global, server, storage, relabel_cache, audit, relabel_configs, remote_write)"
)
_TOP_UNSUPPORTED = dict.fromkeys(
    (
        "scrape_configs",
        "scrape_config_files",
        "rule_files",
        "alerting",
        "remote_read",
        "tracing",
        "otlp",
        "runtime",
    ),
    _PROMETHEUS_ONLY,
)
_DEST_UNSUPPORTED = dict.fromkeys(
    (
        "oauth2",
        "azuread",
        "google_iam",
        "follow_redirects",
        "enable_http2",
        "no_proxy",
        "proxy_from_environment",
        "proxy_connect_header",
        "http_headers",
        "round_robin_dns",
        "bearer_token",
        "bearer_token_file",
        "enable_compression",
    ),
    NOT_SUPPORTED,
)
_GLOBAL_PROMETHEUS_ONLY = (
    "a Prometheus setting, not read by rwrouter (its global key: metric_name_validation_scheme)"
)
_GLOBAL_UNSUPPORTED = {
    **dict.fromkeys(
        (
            "scrape_interval",
            "scrape_timeout",
            "scrape_protocols",
            "evaluation_interval",
            "rule_query_offset",
            "query_log_file",
            "scrape_failure_log_file",
            "body_size_limit",
            "sample_limit",
            "label_limit",
            "label_name_length_limit",
            "label_value_length_limit",
            "target_limit",
            "keep_dropped_targets",
            "always_scrape_classic_histograms",
            "convert_classic_histograms_to_nhcb",
            "scrape_native_histograms",
            "extra_scrape_metrics",
        ),
        _GLOBAL_PROMETHEUS_ONLY,
    ),
    "external_labels": f"{NOT_SUPPORTED} (add the labels with a relabel_configs replace rule)",
    "metric_name_escaping_scheme": (
        "a Prometheus scrape setting; rwrouter escapes per destination: set "
        "remote_write[].metric_name_escaping_scheme"
    ),
}


def parse_config(
    text: str, *, env: Mapping[str, str], source: str = "<string>", base_dir: str | None = None
) -> Config:
    """Parse and validate a configuration file's text; raises ConfigError naming the key path.

    ``env`` supplies ``${VAR}`` values; ``base_dir``, when given, is joined to relative ``*_file``
    paths (as Prometheus resolves them against the config file's directory). Reads no files.
    """
    top = Fields(
        _load_yaml(text, source),
        "",
        known=("global", "server", "storage", "relabel_cache", "audit", "relabel_configs",
               "remote_write"),
        unsupported=_TOP_UNSUPPORTED,
    )  # fmt: skip
    ctx = Context(env=env, base_dir=base_dir)
    global_fields = Fields(
        top.raw("global"), "global", known=field_names(GlobalConfig),
        unsupported=_GLOBAL_UNSUPPORTED,
    )  # fmt: skip
    global_ = _global(global_fields)
    scheme = global_.metric_name_validation_scheme
    return Config(
        global_=global_,
        server=_server(Fields(top.raw("server"), "server", known=field_names(ServerConfig))),
        storage=_storage(Fields(top.raw("storage"), "storage", known=field_names(StorageConfig))),
        relabel_cache=_relabel_cache(
            Fields(top.raw("relabel_cache"), "relabel_cache", known=field_names(RelabelCacheConfig))
        ),
        audit=_audit(Fields(top.raw("audit"), "audit", known=field_names(AuditConfig))),
        relabel_configs=_rules(top.raw("relabel_configs"), "relabel_configs", scheme),
        remote_write=_destinations(top.raw("remote_write"), "remote_write", ctx, scheme),
        source=source,
    )


def _load_yaml(text: str, source: str) -> object:
    """``yaml.safe_load`` that also refuses duplicate keys in a mapping."""
    loader = yaml.SafeLoader(text)
    loader.name = source  # shown in YAML error marks
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_duplicate_keys(node, "", set())
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError("", f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _check_utf8(text: str, path: str) -> None:
    """Refuse a lone surrogate (``"\\ud800"`` YAML escapes: not valid UTF-8; Go's YAML parser,
    so Prometheus, refuses every such escape)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = text[exc.start]
            raise ConfigError(path, f"invalid UTF-8: a lone surrogate \\u{ord(bad):04x} "
                              "(from a YAML escape)") from None  # fmt: skip


def _check_duplicate_keys(node: yaml.Node, path: str, seen: set[int]) -> None:
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode) and isinstance(node.value, str):
        _check_utf8(node.value, path)
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicate_keys(item, f"{path}[{i}]", seen)
    elif isinstance(node, yaml.MappingNode):
        lines: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            child = f"{path}.{key.value}" if path else str(key.value)
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                line = key.start_mark.line + 1
                if (key.tag, key.value) in lines:
                    first = lines[(key.tag, key.value)]
                    raise ConfigError(child, f"duplicate key (lines {first} and {line})")
                lines[(key.tag, key.value)] = line
            _check_duplicate_keys(value, child, seen)


def _global(f: Fields) -> GlobalConfig:
    d = GlobalConfig()
    key = "metric_name_validation_scheme"
    # Empty is Prometheus's "unset": the default (utf8), as when the key is absent.
    scheme = f.string(key, d.metric_name_validation_scheme) or d.metric_name_validation_scheme
    if scheme not in VALIDATION_SCHEMES:
        raise ConfigError(f.at(key), f"expected one of {', '.join(VALIDATION_SCHEMES)}, "
                          f"got {scheme!r}")  # fmt: skip
    return GlobalConfig(metric_name_validation_scheme=scheme)


def _server(f: Fields) -> ServerConfig:
    default = ServerConfig()
    return ServerConfig(
        listen_address=parse_listen_address(
            f.string("listen_address", default.listen_address), f.at("listen_address")
        ),
        max_request_bytes=f.size("max_request_bytes", default.max_request_bytes),
        max_decoded_bytes=f.size("max_decoded_bytes", default.max_decoded_bytes),
        queue_full_retry_after=f.duration("queue_full_retry_after", default.queue_full_retry_after),
        read_timeout=f.duration("read_timeout", default.read_timeout),
        shutdown_timeout=f.duration("shutdown_timeout", default.shutdown_timeout, positive=False),
    )


def _storage(f: Fields) -> StorageConfig:
    d = StorageConfig()
    path = f.string("path", d.path)
    if not path:
        raise ConfigError(f.at("path"), "must not be empty")
    return StorageConfig(
        path=path,
        fsync=_choice(f, "fsync", d.fsync, FSYNC_POLICIES),
        fsync_interval=f.duration("fsync_interval", d.fsync_interval),
        rejected_max_bytes=f.size("rejected_max_bytes", d.rejected_max_bytes),
    )


def _relabel_cache(f: Fields) -> RelabelCacheConfig:
    d = RelabelCacheConfig()
    return RelabelCacheConfig(
        max_entries=f.integer("max_entries", d.max_entries, minimum=1),
        max_bytes=f.size("max_bytes", d.max_bytes),
        max_age=f.duration("max_age", d.max_age),
    )


def _audit(f: Fields) -> AuditConfig:
    d = AuditConfig()
    currency = f.string("currency", d.currency) or ""
    if not currency.strip():
        raise ConfigError(f.at("currency"), "must not be empty")
    return AuditConfig(
        window=f.duration("window", d.window),
        series_limit=f.integer("series_limit", d.series_limit, minimum=1),
        max_series=f.integer("max_series", d.max_series, minimum=1),
        rate_window=f.duration("rate_window", d.rate_window),
        price_tiers=_price_tiers(f.raw("price_tiers"), f.at("price_tiers"))
        if f.has("price_tiers") else d.price_tiers,
        currency=currency,
    )  # fmt: skip


def _price_tiers(raw: object, path: str) -> tuple[PriceTier, ...]:
    """Ascending tiers; only the last may (and must) have no ``up_to_samples``."""
    if not isinstance(raw, list) or not raw:
        got = "an empty list" if raw == [] else kind_of(raw)
        raise ConfigError(path, f"expected a non-empty list of tiers, got {got}")
    tiers, bound = [], 0
    for i, item in enumerate(raw):
        f = Fields(item, f"{path}[{i}]", known=field_names(PriceTier))
        price = f.raw("per_million")
        if price is None:
            raise ConfigError(f.at("per_million"), "required (price per million samples)")
        if (isinstance(price, bool) or not isinstance(price, int | float)
                or not 0 <= price < math.inf):  # fmt: skip
            why = f"expected a finite price >= 0 per million samples, got {price!r}"
            raise ConfigError(f.at("per_million"), why)
        last = i == len(raw) - 1
        if last == f.has("up_to_samples"):
            raise ConfigError(f.at("up_to_samples"), "the last tier has no bound (omit it)" if last
                              else "required on every tier but the last")  # fmt: skip
        up_to = None if last else f.integer("up_to_samples", 0, minimum=bound + 1)
        bound = up_to or bound
        tiers.append(PriceTier(per_million=float(price), up_to_samples=up_to))
    return tuple(tiers)


def _choice(f: Fields, key: str, default: str, choices: tuple[str, ...]) -> str:
    value = f.string(key, default) or ""
    if value not in choices:
        raise ConfigError(f.at(key), f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def parse_listen_address(value: str | None, path: str) -> str:
    """``host:port`` (port 0..65535; an IPv6 host in brackets), else ConfigError."""
    text = value or ""
    host, sep, port = text.rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    valid_host = (
        bool(bare) and not any(c.isspace() for c in bare) and (":" not in host or bare != host)
    )
    if not sep or not valid_host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(path, f"expected host:port (e.g. 0.0.0.0:9250, [::]:9250), got {value!r}")
    return text


def _rules(raw: object, path: str, scheme: str) -> tuple[RelabelConfig, ...]:
    """The rules at ``path``, validated under the name validation ``scheme``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(path, "expected a list of relabel rules")
    return parse_relabel_configs(raw, path, scheme=scheme)


def _destinations(
    raw: object, path: str, ctx: Context, scheme: str
) -> tuple[DestinationConfig, ...]:
    if raw is None or raw == []:
        raise ConfigError(path, "at least one destination is required")
    if not isinstance(raw, list):
        raise ConfigError(path, f"expected a list of destinations, got {kind_of(raw)}")
    parsed = [
        _destination(
            Fields(
                item,
                f"{path}[{i}]",
                known=field_names(DestinationConfig),
                unsupported=_DEST_UNSUPPORTED,
            ),
            ctx,
            scheme,
        )
        for i, item in enumerate(raw)
    ]
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
    url = "" if shadow and not f.has("url") else http_url(env_string(f, "url", ctx), f.at("url"),
                                                            userinfo=False)  # fmt: skip
    auth_section = auth(f, ctx)
    proxy = env_string(f, "proxy_url", ctx)
    return DestinationConfig(
        name=name or "",
        url=url,
        remote_timeout=f.duration("remote_timeout", default.remote_timeout),
        headers=headers(f, ctx, sigv4="sigv4" in auth_section),
        write_relabel_configs=_rules(
            f.raw("write_relabel_configs"), f.at("write_relabel_configs"), scheme
        ),
        tls_config=tls(f, ctx) if f.has("tls_config") else None,
        proxy_url=None if proxy is None else http_url(proxy, f.at("proxy_url"), userinfo=True),
        queue_config=_queue(
            Fields(
                f.raw("queue_config"),
                f.at("queue_config"),
                known=field_names(QueueConfig),
                unsupported={"sample_age_limit": NOT_SUPPORTED},
            ),
            sigv4="sigv4" in auth_section,
        ),
        metadata_config=_metadata(
            Fields(
                f.raw("metadata_config"), f.at("metadata_config"), known=field_names(MetadataConfig)
            )
        ),
        send_exemplars=f.boolean("send_exemplars", default.send_exemplars),
        send_native_histograms=f.boolean("send_native_histograms", default.send_native_histograms),
        fallback=f.boolean("fallback", default.fallback),
        shadow=shadow,
        audit=f.boolean("audit", default.audit),
        protobuf_message=_choice(f, "protobuf_message", default.protobuf_message, MESSAGES),
        # The managed workspace refuses UTF-8 names (400): a sigv4 destination escapes them.
        metric_name_escaping_scheme=_choice(
            f, "metric_name_escaping_scheme",
            "underscores" if "sigv4" in auth_section else default.metric_name_escaping_scheme,
            ESCAPING_SCHEMES,
        ),
        **auth_section,
    )  # fmt: skip


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
        on_full=_choice(f, "on_full", d.on_full, ON_FULL_POLICIES),
        max_request_bytes=f.size("max_request_bytes", request_bytes),
        max_retry_duration=f.duration("max_retry_duration", d.max_retry_duration, positive=False),
        max_retry_duration_on_http_429=f.duration(
            "max_retry_duration_on_http_429", d.max_retry_duration_on_http_429, positive=False
        ),
    )
    if queue.min_shards > queue.max_shards:
        raise ConfigError(f.at("min_shards"), f"must be <= max_shards ({queue.max_shards})")
    if queue.min_backoff > queue.max_backoff:
        raise ConfigError(f.at("min_backoff"), "must be <= max_backoff")
    return queue


def _metadata(f: Fields) -> MetadataConfig:
    d = MetadataConfig()
    return MetadataConfig(
        send=f.boolean("send", d.send),
        send_interval=f.duration("send_interval", d.send_interval),
        max_samples_per_send=f.integer("max_samples_per_send", d.max_samples_per_send, minimum=1),
    )
