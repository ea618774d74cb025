"""Routing per tenant (pure): the label ``__tenant__`` for the relabel rules, and one router
(with its own routing cache) per tenant.

Rules (rwrouter's own, issue 14):

1. When no rule mentions ``__tenant__`` (:func:`mentions_tenant`), tenants change nothing:
   every request is routed by the one router of the configuration, exactly as without tenants
   (a label of that name a sender sends is an ordinary label).
2. When a rule mentions it, the rules of a request with a tenant see ``__tenant__`` with the
   tenant's value on every series (a label of that name the sender sent is replaced), and
   those of a request without one see no ``__tenant__`` (the sender's is removed): a sender
   cannot claim a tenant its credential does not have. After each destination's rules
   ``__tenant__`` is removed from what is sent; a rule copies it into a label that stays
   (``replace`` with ``source_labels: [__tenant__]`` and ``target_label: tenant``).
3. An outcome cached for one tenant is never served to another or to requests without one:
   each tenant gets its own :class:`TenantRouter` (created on its first request), so its
   cache, templates and collision memory are its own. At most ``max_tenants`` of them live at
   once; a new tenant beyond that replaces the one used least recently (whose cache is
   forgotten: its next request routes its series the full way again). The routers share the
   configured routing-cache bounds (``relabel_cache.max_entries`` and ``max_bytes``): with
   ``k`` tenant routers alive each of the ``k + 1`` routers (the no-tenant one too) is bounded
   by ``1 / (k + 1)`` of them.

The no-tenant router of a configuration whose rules do not mention ``__tenant__`` is the plain
:class:`~rwrouter.routing.Router`: its code, and so the receive path's cost, is unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from rwrouter.relabel import Action, RelabelConfig
from rwrouter.routing.outcome import Result, Route
from rwrouter.routing.router import Router

__all__ = [
    "DEFAULT_MAX_TENANTS",
    "TENANT_LABEL",
    "TenantRouter",
    "Tenants",
    "mentions_tenant",
    "with_tenant",
]

TENANT_LABEL = "__tenant__"
DEFAULT_MAX_TENANTS = 16  # routers per configuration (relabel_cache.max_tenants' default)
_TENANT_BYTES = TENANT_LABEL.encode()


def mentions_tenant(global_rules: Sequence[RelabelConfig], routes: Sequence[Route]) -> bool:
    """Whether a rule may read or write ``__tenant__``: it names it in ``source_labels`` or as
    ``target_label``, or a ``labelmap`` matches it or writes it."""
    for rule in (*global_rules, *(rule for route in routes for rule in route.rules)):
        if TENANT_LABEL in rule.source_labels or rule.target_label == TENANT_LABEL:
            return True
        if rule.action == Action.LABELMAP and (
            rule.regex.matches(TENANT_LABEL) or TENANT_LABEL in rule.replacement
        ):
            return True
    return False


def with_tenant(
    labels: tuple[tuple[str, str], ...], tenant: str | None
) -> tuple[tuple[str, str], ...]:
    """``labels`` (sorted by name) without a ``__tenant__`` of their own, with ``tenant``'s."""
    out = [pair for pair in labels if pair[0] != TENANT_LABEL]
    if tenant is not None:
        out.append((TENANT_LABEL, tenant))
        out.sort()
    return tuple(out)


class TenantRouter(Router):
    """A :class:`~rwrouter.routing.Router` whose rules see ``tenant`` as ``__tenant__``
    (None: no ``__tenant__``), removed after them (the module docstring's rules 2 and 3)."""

    def __init__(
        self,
        *,
        tenant: str | None,
        global_rules: Sequence[RelabelConfig],
        routes: Sequence[Route],
        cache_size: int,
        cache_bytes: int,
        cache_max_age: float,
    ) -> None:
        super().__init__(
            global_rules=global_rules,
            routes=routes,
            cache_size=cache_size,
            cache_bytes=cache_bytes,
            cache_max_age=cache_max_age,
        )
        self.tenant = tenant
        if self._signature_names is not None:
            # The template shortcut keys on the values of the labels the rules read: with
            # __tenant__ among them a sender's own __tenant__ (replaced or removed, so the
            # set is not sent unchanged) never takes the template of a set without one.
            names = set(self._signature_names) | {_TENANT_BYTES}
            self._signature_names = tuple(sorted(names))

    _drop_after = TENANT_LABEL  # removed after each destination's rules

    def _results(self, labels: tuple[tuple[str, str], ...]) -> list[Result | None]:
        """:meth:`Router._results` of ``labels`` with this router's ``__tenant__`` (a
        sender's own replaced or removed), which is removed after each destination's rules."""
        return super()._results(with_tenant(labels, self.tenant))


def _like(router: Router, tenant: str | None) -> TenantRouter:
    """A :class:`TenantRouter` of ``router``'s rules, routes and cache bounds."""
    return TenantRouter(
        tenant=tenant,
        global_rules=router.global_rules,
        routes=router.routes,
        cache_size=router.cache_size,
        cache_bytes=router.cache_bytes,
        cache_max_age=router.cache_max_age,
    )


class Tenants:
    """The routers of one configuration: :attr:`router` for requests without a tenant (the
    given ``router`` itself when no rule mentions ``__tenant__``, else a
    :class:`TenantRouter` of its rules without a tenant) and, when a rule mentions it, one
    :class:`TenantRouter` per tenant (:meth:`for_tenant`), at most ``max_tenants`` (the module
    docstring). Safe to use from the decode threads (a lock around the registry)."""

    def __init__(self, router: Router, *, max_tenants: int = DEFAULT_MAX_TENANTS) -> None:
        self.per_tenant = mentions_tenant(router.global_rules, router.routes)
        self.router: Router = _like(router, None) if self.per_tenant else router
        self.max_tenants = max_tenants
        self._bounds = (router.cache_size, router.cache_bytes)  # shared by all the routers
        self._routers: dict[str, TenantRouter] = {}  # least recently used first
        self._lock = threading.Lock()
        self._retired = (0, 0)  # hits and misses of the routers forgotten

    def for_tenant(self, tenant: str | None) -> Router:
        """The router of requests of ``tenant`` (None: without a tenant)."""
        if tenant is None or not self.per_tenant:
            return self.router
        with self._lock:
            router = self._routers.pop(tenant, None)
            if router is None:
                if len(self._routers) >= self.max_tenants:
                    oldest = self._routers.pop(next(iter(self._routers)))
                    hits, misses = self._retired
                    self._retired = (hits + oldest.hits, misses + oldest.misses)
                router = _like(self.router, tenant)
                self._routers[tenant] = router
                self._share()
            else:
                self._routers[tenant] = router  # now the most recently used
        return router

    def _share(self) -> None:
        """Each router's part of the configured bounds (rule 3)."""
        size, nbytes = self._bounds
        routers = self.routers
        for router in routers:
            router.cache_size = max(1, size // len(routers))
            router.cache_bytes = max(1, nbytes // len(routers))

    @property
    def routers(self) -> list[Router]:
        """The no-tenant router, then the tenants' (least recently used first)."""
        return [self.router, *self._routers.values()]

    @property
    def tenants(self) -> list[str]:
        """The tenants that have a router now (least recently used first)."""
        return list(self._routers)

    @property
    def hits(self) -> int:
        """Cache hits of every router, those forgotten included."""
        return self._retired[0] + sum(router.hits for router in self.routers)

    @property
    def misses(self) -> int:
        """Cache misses of every router, those forgotten included."""
        return self._retired[1] + sum(router.misses for router in self.routers)

    def __len__(self) -> int:
        """Label sets cached by all the routers."""
        return sum(len(router) for router in self.routers)

    @property
    def cached_bytes(self) -> int:
        """Bytes cached by all the routers."""
        return sum(router.cached_bytes for router in self.routers)

    @property
    def hit_ratio(self) -> float:
        """:attr:`Router.hit_ratio` of the no-tenant router alone when no tenant has one; else
        the routers' ratios weighted by their lookups (NaN before any lookup)."""
        if not self._routers:
            return self.router.hit_ratio
        weighted = total = 0.0
        for router in self.routers:
            ratio, lookups = router.hit_ratio, router.hits + router.misses
            if lookups and ratio == ratio:  # not NaN
                weighted += ratio * lookups
                total += lookups
        return weighted / total if total else float("nan")
