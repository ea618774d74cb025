"""The router of a configuration (pure): its global rules, then one route per destination."""

from __future__ import annotations

from rwrouter.config import Config
from rwrouter.routing.outcome import Route
from rwrouter.routing.router import Router

__all__ = ["build_router"]


def build_router(config: Config) -> Router:
    """The router of a configuration: global rules, then one route per destination: those
    that send (config order), then the shadow ones (config order)."""
    ordered = sorted(config.remote_write, key=lambda d: d.shadow)  # stable
    routes = [
        Route(
            name=d.name,
            rules=d.write_relabel_configs,
            fallback=d.fallback,
            shadow=d.shadow,
            send_exemplars=d.send_exemplars,
            send_native_histograms=d.send_native_histograms,
            escaping=d.metric_name_escaping_scheme,
        )
        for d in ordered
    ]
    cache = config.relabel_cache
    return Router(
        global_rules=config.relabel_configs,
        routes=routes,
        cache_size=cache.max_entries,
        cache_bytes=cache.max_bytes,
        cache_max_age=cache.max_age,
    )
