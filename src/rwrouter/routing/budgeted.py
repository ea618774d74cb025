"""The router of destinations with a series budget (pure; time passed in): a new series over a
destination's ``series_limit`` goes to the fallback destination instead, or is dropped
(:mod:`rwrouter.routing.budget` has the policy).

The decision is made once per label set, on a routing-cache miss, and cached with the rest of
its outcome: cache hits stay in the compiled loop and cost nothing more. Misses stay compiled
too (the template shortcut and the plan of :class:`~rwrouter.routing.Router`): the loop calls
back into Python (:meth:`BudgetedRouter._budgeted`, the router's ``review`` of
:func:`~rwrouter.routing.scan.scan_request_py`) only for a miss whose outcome a budgeted
destination keeps; a miss it drops or leaves to others costs nothing more. A template's
outcome (rules that only filter) is reviewed for each label set that takes it, with the label
set's own shard hash: a budget decides per series, never per template. After each request, the
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
from rwrouter.routing.cache import Entry, Slot, keeps_at, pack_entry, slot_at, unpack_entry
from rwrouter.routing.escape import ALLOW_UTF8
from rwrouter.routing.outcome import REASONS, Renamed, RuleCopies
from rwrouter.routing.routed import RoutedRequest, shard_hash
from rwrouter.routing.router import Router
from rwrouter.wire.accelerator import decode_labels
from rwrouter.wire.index import label_name

__all__ = ["BudgetedRouter", "budget_states"]

_OVER = REASONS.index(DropReason.SERIES_LIMIT)
_COLLIDED = REASONS.index(DropReason.NAME_COLLISION)


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
        # Each miss a budgeted destination keeps is decided by _budgeted: by the compiled
        # loop for the misses it routes itself, by _miss for the others.
        self._review = (sum(1 << i for i in self.budgets), self._budgeted)

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

    def _miss(self, raw_labels: bytes) -> Entry:
        """:meth:`Router._miss` (template shortcut or the full way, cached), then the budgets'
        decision, cached instead."""
        return self._decided(raw_labels, super()._miss(raw_labels))

    def _route_again(self, key: bytes) -> None:
        """:meth:`Router._route_again` (a collision loser), then the budgets' decision."""
        super()._route_again(key)
        entry = self._young.get(key)
        if entry is not None:
            self._decided(key, entry)

    def _decided(self, key: bytes, entry: Entry) -> Entry:
        """``entry``, just cached in the young generation under ``key``, as the budgets decide
        it when a budgeted destination keeps it (:meth:`_budgeted`; replaced in the cache when
        that changes it)."""
        review = self._review  # (mask, _budgeted)
        if review is None or not keeps_at(entry, review[0]):
            return entry
        decided = review[1](key, entry)
        if decided is not entry:
            self._young[key] = decided
            self._young_bytes += len(decided) - len(entry)
        return decided

    def _budgeted(self, key: bytes, entry: Entry) -> Entry:
        """The miss ``entry`` of the label set ``key`` (raw label bytes) with each budgeted
        destination over its budget dropped (``series_limit``) and, for ``on_series_limit:
        fallback`` when no other destination keeps the series, the fallback destinations'
        outcomes; ``entry`` itself when every budget admits the series (admitted, it counts
        from now on: :meth:`SeriesBudget.decide` at the time of the request)."""
        over = [i for i in self.budgets if not self._admitted(i, key, slot_at(key, entry, i))]
        if not over:
            return entry
        slots = unpack_entry(key, entry)
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
        return self.budgets[i].decide(
            key=key, name=label_name(labels), hashed=hashed, now=self._now
        )

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
