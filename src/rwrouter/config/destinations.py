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
import functools
from collections.abc import Callable, Sequence
from typing import Any
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
    DestinationConfig,
    EscapingScheme,
    HaDedupConfig,
    MetadataConfig,
    QueueConfig,
)
from rwrouter.config.promkeys import REFUSED, flag_keys, read_flags
from rwrouter.config.queues import choice, enum_choice, parse_metadata, parse_queue
from rwrouter.config.sections import misplaced
from rwrouter.config.values import Fields, field_names, kind_of, show
from rwrouter.config.workspace import signing_region_error
from rwrouter.errors import ConfigError, ConfigErrors
from rwrouter.protocol import MESSAGES
from rwrouter.relabel import RelabelConfig, parse_relabel_config
from rwrouter.relabel.names import is_utf8_label_name

__all__ = ["check_budgets", "choice", "enum_choice", "parse_destinations", "parse_rules"]


def parse_rules(raw: object, path: str, scheme: str) -> tuple[RelabelConfig, ...]:
    """The rules at ``path``, validated under the name validation ``scheme``; each rule is
    checked on its own: every broken rule is reported (ConfigErrors), not only the first."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(path, "expected a list of relabel rules")
    errors = Collector()
    readers: dict[str, Callable[[], RelabelConfig]] = {
        str(i): functools.partial(parse_relabel_config, item, f"{path}[{i}]", scheme=scheme)
        for i, item in enumerate(raw)
    }
    rules = errors.values(readers)
    errors.check()
    return tuple(rules.values())


def parse_destinations(
    raw: object, path: str, ctx: Context, scheme: str
) -> tuple[DestinationConfig, ...]:
    """The ``remote_write`` list ``raw`` at ``path``; every independent mistake of every
    destination is reported (ConfigErrors), then those across destinations (all of them
    fallbacks, a duplicate name) among the values that parsed."""
    if raw is None or raw == []:
        raise ConfigError(path, "at least one destination is required")
    if not isinstance(raw, list):
        raise ConfigError(path, f"expected a list of destinations, got {kind_of(raw, path)}")
    errors = Collector()  # each destination's mistakes, then the next destination's
    parsed: list[DestinationConfig | None] = []
    for i, item in enumerate(raw):

        def one(item: object = item, at: str = f"{path}[{i}]") -> DestinationConfig:
            fields = errors.fields(
                item,
                at,
                known=field_names(DestinationConfig) + flag_keys("destination"),
                unsupported=REFUSED["destination"],
                elsewhere=misplaced("destination"),
            )
            return _destination(fields, ctx, scheme, errors)

        parsed.append(errors.attempt(one, None))
    if all(d is not None for d in parsed):  # one unreadable could be the non-fallback one
        errors.attempt(lambda: _not_all_fallbacks(parsed, path), None)
    errors.attempt(lambda: _unique(parsed, path), None)
    errors.check()
    return _named([d for d in parsed if d is not None])


def _not_all_fallbacks(parsed: Sequence[DestinationConfig | None], path: str) -> None:
    """At least one destination is not a fallback (a broken ``fallback`` value counts as
    not one: no error follows from it)."""
    if all(d is not None and d.fallback for d in parsed):
        raise ConfigError(f"{path}[0].fallback", "at least one destination must not be a fallback")


def _unique(parsed: Sequence[DestinationConfig | None], path: str) -> None:
    """The explicit names (those that parsed) are unique: one error per repeated name."""
    taken: dict[str, int] = {}
    problems = []
    for i, dest in enumerate(parsed):
        if dest is None or not dest.name:
            continue
        if dest.name in taken:
            problems.append(
                ConfigError(
                    f"{path}[{i}].name",
                    f"duplicate destination name {dest.name!r} "
                    f"(also {path}[{taken[dest.name]}].name)",
                )
            )
        else:
            taken[dest.name] = i
    if problems:
        raise ConfigErrors.of(problems)


def _named(parsed: list[DestinationConfig]) -> tuple[DestinationConfig, ...]:
    """Name the destinations without one after their URL host (+ ``-<index>``); the explicit
    names are unique (:func:`_unique`)."""
    taken = {dest.name: i for i, dest in enumerate(parsed) if dest.name}
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


def _destination(f: Fields, ctx: Context, scheme: str, errors: Collector) -> DestinationConfig:
    """One destination; each key and section is checked on its own, its mistakes kept in
    ``errors`` (a broken value is replaced by its default: the DestinationConfig returned is
    only used when ``errors`` stays empty, and for the checks across destinations)."""
    default = DestinationConfig(name="", url="")
    # The key, valid or not, decides the defaults and checks that depend on it.
    sigv4 = f.has("sigv4") or "sigv4" in f.nulls
    name = errors.attempt(lambda: _name(f), None)
    shadow = errors.attempt(lambda: f.boolean("shadow", default.shadow), None)
    # url before auth: errors come in the order a reader meets the keys.
    url = errors.attempt(lambda: _url(f, ctx, name=name, shadow=shadow), "")
    none: dict[str, Any] = {}
    auth_section = errors.attempt(lambda: auth(f, ctx, errors=errors), none)
    v4 = auth_section.get("sigv4")
    if v4 is not None and v4.region and url:  # the file contradicts itself
        mismatch = signing_region_error(url, v4.region, "sigv4.region", f.at("sigv4.region"))
        if mismatch is not None:
            errors.keep(mismatch)
    errors.attempt(lambda: read_flags(f, "destination"), None)  # notes or refusals
    return DestinationConfig(
        name=name or "",
        url=url,
        shadow=bool(shadow),
        **_settings(f, ctx, scheme, errors, sigv4=sigv4),
        **errors.attempt(lambda: _budget(f, default), none),
        **auth_section,
    )


def _name(f: Fields) -> str:
    """``name`` ("" when absent); not blank."""
    name = f.string("name") or ""
    if f.has("name") and not name.strip():
        raise ConfigError(f.at("name"), "must not be empty")
    return name


def _url(f: Fields, ctx: Context, *, name: str | None, shadow: bool | None) -> str:
    """``url`` (``${VAR}`` expanded): required, except on a shadow destination with a
    ``name`` ("" then). ``name``/``shadow`` None: that key is broken (its error is kept), so
    whether ``url`` may be absent is not known: no error then."""
    if not f.has("url") and (shadow is None or shadow):
        if shadow and name == "":
            raise ConfigError(f.at("name"), "a shadow destination without url needs a name")
        return ""
    return http_url(env_string(f, "url", ctx), f.at("url"), userinfo=False)


def _settings(
    f: Fields, ctx: Context, scheme: str, errors: Collector, *, sigv4: bool
) -> dict[str, Any]:
    """The destination's other keys, each read on its own (:meth:`Collector.values`)."""
    d = DestinationConfig(name="", url="")
    readers: dict[str, Callable[[], Any]] = {
        "remote_timeout": lambda: f.duration("remote_timeout", d.remote_timeout),
        "headers": lambda: headers(f, ctx, sigv4=sigv4),
        "tenant_header": lambda: tenant_header(f, sigv4=sigv4),
        "write_relabel_configs": lambda: parse_rules(
            f.raw("write_relabel_configs"), f.at("write_relabel_configs"), scheme
        ),
        "tls_config": lambda: tls(f, ctx, errors=errors) if f.has("tls_config") else None,
        "proxy_url": lambda: _proxy(f, ctx),
        "queue_config": lambda: parse_queue(
            _section(errors, f, "queue_config", QueueConfig), errors, sigv4=sigv4
        ),
        "metadata_config": lambda: parse_metadata(
            _section(errors, f, "metadata_config", MetadataConfig), errors
        ),
        "send_exemplars": lambda: f.boolean("send_exemplars", d.send_exemplars),
        "send_native_histograms": lambda: f.boolean(
            "send_native_histograms", d.send_native_histograms
        ),
        "fallback": lambda: f.boolean("fallback", d.fallback),
        "audit": lambda: f.boolean("audit", d.audit),
        "ha_dedup": lambda: _ha_dedup(f, errors),
        "protobuf_message": lambda: choice(f, "protobuf_message", d.protobuf_message, MESSAGES),
        # The managed workspace refuses UTF-8 names (400): a sigv4 destination escapes them.
        "metric_name_escaping_scheme": lambda: enum_choice(
            f,
            "metric_name_escaping_scheme",
            EscapingScheme.UNDERSCORES if sigv4 else d.metric_name_escaping_scheme,
            EscapingScheme,
        ),
    }
    return errors.values(readers)


def _proxy(f: Fields, ctx: Context) -> str | None:
    proxy = env_string(f, "proxy_url", ctx)
    return None if proxy is None else http_url(proxy, f.at("proxy_url"), userinfo=True)


def _section(errors: Collector, dest: Fields, key: str, model: type) -> Fields:
    """The destination's section ``key``, whose keys are the fields of ``model`` (its
    unknown keys kept in ``errors``)."""
    return errors.fields(
        dest.raw(key), dest.at(key), known=field_names(model), elsewhere=misplaced(key)
    )


_HA_KEYS = field_names(HaDedupConfig)


def _ha_dedup(dest: Fields, errors: Collector) -> HaDedupConfig | None:
    """The ``ha_dedup`` section (None when absent): two different, non-empty label names (any
    UTF-8 name, as Prometheus ``external_labels`` may hold) and a positive
    ``failover_timeout``."""
    if "ha_dedup" in dest.nulls:  # `ha_dedup:` alone would silently turn it off
        raise ConfigError(dest.at("ha_dedup"), "is empty (write `ha_dedup: {}` for the defaults)")
    if not dest.has("ha_dedup"):
        return None
    f = errors.fields(
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
