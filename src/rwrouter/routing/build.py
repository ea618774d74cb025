"""The router of a configuration (pure): its global rules, then one route per destination."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rwrouter.config import Config, DestinationConfig
from rwrouter.errors import ConfigError
from rwrouter.relabel import RelabelConfig, parse_relabel_configs
from rwrouter.routing.budget import SeriesBudget, SeriesStore
from rwrouter.routing.budgeted import BudgetedRouter
from rwrouter.routing.outcome import Route
from rwrouter.routing.router import Router
from rwrouter.routing.tenants import mentions_tenant

__all__ = ["build_router", "route_rules"]


def route_rules(dest: DestinationConfig) -> tuple[RelabelConfig, ...]:
    """A destination's rules as its route applies them: its ``write_relabel_configs``, then,
    with ``ha_dedup``, a ``labeldrop`` of the replica label (the HA tracker's removal of it:
    :mod:`rwrouter.routing.ha`)."""
    if dest.ha_dedup is None:
        return dest.write_relabel_configs
    drop = {"action": "labeldrop", "regex": re.escape(dest.ha_dedup.replica_label)}
    return dest.write_relabel_configs + parse_relabel_configs([drop], "ha_dedup")


StoreOf = Callable[[DestinationConfig], SeriesStore]
"""The shared store of a budgeted destination's series (``rwrouter run --workers``)."""


def build_router(config: Config, *, stores: StoreOf | None = None) -> Router:
    """The router of a configuration: global rules, then one route per destination: those
    that send (config order), then the shadow ones (config order). With a destination's
    ``series_limit``: a :class:`~rwrouter.routing.budgeted.BudgetedRouter`, each budget in
    the store ``stores`` gives for its destination (the workers of ``rwrouter run --workers``
    share one), or this process's own (``stores`` None).
    Raises ConfigError for a series budget with rules that read ``__tenant__`` (not
    supported)."""
    ordered = sorted(config.remote_write, key=lambda d: d.shadow)  # stable
    routes = [
        Route(
            name=d.name,
            rules=route_rules(d),
            fallback=d.fallback,
            shadow=d.shadow,
            send_exemplars=d.send_exemplars,
            send_native_histograms=d.send_native_histograms,
            escaping=d.metric_name_escaping_scheme,
            ha_dedup=d.ha_dedup,
        )
        for d in ordered
    ]
    cache = config.relabel_cache
    args: dict[str, Any] = {
        "global_rules": config.relabel_configs,
        "routes": routes,
        "cache_size": cache.max_entries,
        "cache_bytes": cache.max_bytes,
        "cache_max_age": cache.max_age,
    }
    budgets = {
        d.name: SeriesBudget(
            limit=d.series_limit,
            window=d.series_window,
            action=d.on_series_limit,
            now=0.0,
            store=stores(d) if stores is not None else None,
        )
        for d in ordered
        if d.series_limit is not None
    }
    if not budgets:
        return Router(**args)
    if mentions_tenant(config.relabel_configs, routes):
        i = next(i for i, d in enumerate(config.remote_write) if d.series_limit is not None)
        raise ConfigError(
            f"remote_write[{i}].series_limit", "not supported with rules that read __tenant__"
        )
    return BudgetedRouter(budgets=budgets, **args)
