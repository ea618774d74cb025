"""The router of destinations with a series budget (pure; time passed in): a new series over a
destination's ``series_limit`` goes to the fallback destination instead, or is dropped
(:mod:`rwrouter.routing.budget` has the policy).

The decision is made once per label set, when it is routed the full way (a routing-cache
miss), and cached with the rest of its outcome: cache hits stay in the compiled loop and cost
nothing more. So that every miss reaches :meth:`BudgetedRouter._miss`, the loop is given no
template shortcut and no plan of its own (it calls ``miss``; the miss itself is still routed
by the compiled ``route_labels`` when the accelerator is built). After each request, the
budgeted destinations' shares are counted into their budgets (the series sent stay active).
When room frees up while series are over a budget (series left the window), the routing cache
is forgotten once: every label set is decided again as it arrives (those the destination
has stay; new ones take the room in arrival order). That happens at most once per
``series_window / 8`` and only while series are over a budget.

An over series is routed as if the destination's rules had dropped it (reason
``series_limit``): with ``on_series_limit: fallback`` a fallback destination then takes it
with its own rules, unless another non-fallback destination keeps it; with ``drop`` it goes
nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rwrouter.config.budget import OnSeriesLimit
from rwrouter.reasons import DropReason
from rwrouter.relabel import process_compiled
from rwrouter.routing.budget import BudgetState, SeriesBudget
from rwrouter.routing.cache import Entry, Slot, pack_entry, unpack_entry
from rwrouter.routing.escape import ALLOW_UTF8
from rwrouter.routing.outcome import REASONS, Renamed, RuleCopies
from rwrouter.routing.routed import RoutedRequest, shard_hash
from rwrouter.routing.router import Router
from rwrouter.wire.accelerator import compiled, decode_labels
from rwrouter.wire.index import INDEX, named_frames_list

__all__ = ["BudgetedRouter", "budget_states"]

_OVER = REASONS.index(DropReason.SERIES_LIMIT)
_COLLIDED = REASONS.index(DropReason.NAME_COLLISION)
_route_labels = compiled("route_labels")  # the miss path in C (wire/_route.h), when built


class BudgetedRouter(Router):
    """A :class:`~rwrouter.routing.Router` whose destinations named in ``budgets`` hold at most
    their budget of active series (the module docstring); ``router_args``: the Router's.
    Raises ValueError for a budget of a destination it does not route to."""

    def __init__(self, *, budgets: Mapping[str, SeriesBudget], **router_args: Any) -> None:
        super().__init__(**router_args)
        names = [route.name for route in self.routes]
        if unknown := sorted(set(budgets) - set(names)):
            raise ValueError(f"a series budget for an unknown destination {unknown[0]!r}")
        self.budgets = {i: budgets[name] for i, name in enumerate(names) if name in budgets}
        # Every miss to _miss, decided there: no template shortcut, no plan for the loop
        # (the plan still routes the miss itself, compiled, in _route_raw).
        self._miss_plan, self._plan = self._plan, None
        self._signature_names = None

    def adopt(self, old: Router) -> None:
        """Carry the budgets' counts over from the router this one replaces (a reload), by
        destination name when its ``series_window`` is the same; the limit and action are
        this one's (with another shared table, :meth:`SeriesBudget.carry`). The series a
        destination has are still active at the workspace: counted again from nothing, they
        would leave room that is not there."""
        if not isinstance(old, BudgetedRouter):
            return
        previous = {old.routes[i].name: budget for i, budget in old.budgets.items()}
        for i, budget in self.budgets.items():
            kept = previous.get(self.routes[i].name)
            if kept is None or kept.window != budget.window:
                continue
            if kept.store is budget.store:  # None, or the same shared table
                kept.resize(limit=budget.limit, action=budget.action)
                self.budgets[i] = kept
            else:  # another shared table (another size): it takes the counts
                budget.carry(kept)

    def budget_states(self, now: float) -> dict[str, BudgetState]:
        """Each budgeted destination's :class:`BudgetState` at ``now``, by name."""
        return {self.routes[i].name: b.state(now) for i, b in self.budgets.items()}

    def route(
        self, data: bytes, *, now: float = 0.0, rw2: bool = False, max_bytes: int | None = None
    ) -> RoutedRequest:
        """:meth:`Router.route`, then the budgeted destinations' shares counted as sent at
        ``now``; first, when room freed up in a budget with series over it, the routing
        cache is forgotten (they are decided again)."""
        if [i for i, budget in self.budgets.items() if budget.freed(now)]:
            self._rotate(now)
            self._rotate(now)
        out = super().route(data, now=now, rw2=rw2, max_bytes=max_bytes)
        for i, budget in self.budgets.items():
            share = out.shares[i]
            if share.series:
                budget.observe(share.body, share.index, now)
        return out

    def _route_raw(self, raw_labels: bytes) -> Entry:
        """:meth:`Router._route_raw` (compiled when built), then the budgets' decision."""
        if self._miss_plan is not None and _route_labels is not None:
            entry: Entry = _route_labels(raw_labels, *self._miss_plan, self._drop_after)
        else:
            entry = self._route_raw_py(raw_labels)
        return self._budgeted(raw_labels, entry)

    def _budgeted(self, key: bytes, entry: Entry) -> Entry:
        """``entry`` with each budgeted destination over its budget dropped (``series_limit``)
        and, for ``on_series_limit: fallback`` when no other destination keeps the series,
        the fallback destinations' outcomes."""
        slots = unpack_entry(key, entry)
        over = [i for i in self.budgets if not self._admitted(i, key, slots[i])]
        if not over:
            return entry
        for i in over:
            slots[i] = _OVER
        divert = any(self.budgets[i].action == OnSeriesLimit.FALLBACK for i in over)
        if divert and not self._kept(slots):
            self._to_fallbacks(key, slots)
        return pack_entry(key, slots)

    def _admitted(self, i: int, key: bytes, slot: Slot) -> bool:
        """Whether destination ``i`` may keep its ``slot`` of the label set ``key`` (True
        when it does not keep it anyway)."""
        if not isinstance(slot, tuple):
            return True
        labels, hashed = slot
        # The metric name as the audit's count finds it in a frame (the same raw bytes).
        name = named_frames_list(labels, INDEX.pack(len(labels), 0, 0))[0][0]
        return self.budgets[i].decide(key=key, name=name, hashed=hashed, now=self._now)

    def _kept(self, slots: list[Slot]) -> bool:
        """Whether a non-fallback, non-shadow destination keeps the series (a collision
        counts as kept: the routing semantics)."""
        return any(
            not route.fallback
            and not route.shadow
            and (isinstance(slot, tuple) or slot == _COLLIDED)
            for route, slot in zip(self.routes, slots, strict=True)
        )

    def _to_fallbacks(self, key: bytes, slots: list[Slot]) -> None:
        """Fill the fallback destinations' slots with their outcome of the label set ``key``
        (their own rules and escaping, as :meth:`Router._results` does; a budget of their
        own applies too)."""
        labels = decode_labels(key)
        base = process_compiled(labels, self.global_rules) if self.global_rules else labels
        if not base:
            return
        apply = RuleCopies(base, drop=self._drop_after)
        for j, route in enumerate(self.routes):
            if not route.fallback:
                continue
            res = apply(route.rules, self._filter_only[j], route.escaping)
            if isinstance(res, Renamed) or (
                isinstance(res, bytes)
                and self._claims is not None
                and self._escaping[j] != ALLOW_UTF8
            ):
                res = self._collide(j, res, key)
            slot: Slot = (res, shard_hash(res)) if isinstance(res, bytes) else REASONS.index(res)
            slots[j] = slot if j not in self.budgets or self._admitted(j, key, slot) else _OVER


def budget_states(router: Router, now: float) -> dict[str, BudgetState]:
    """``router``'s series budgets by destination at ``now`` (seconds; empty for a router
    without one): :meth:`BudgetedRouter.budget_states`."""
    return router.budget_states(now) if isinstance(router, BudgetedRouter) else {}
