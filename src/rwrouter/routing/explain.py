"""Why one label set goes where it goes (pure; the relabel debugger, ``rwrouter relabel``).

The decision of each destination is the router's own (:meth:`Router.route_series`, what every
series gets on a cache miss, escaping and the collision memory included); the steps are the
engine's own (:func:`rwrouter.relabel.trace`, rule by rule with the function
:func:`~rwrouter.relabel.process` applies), then the destination's escaping scheme
(:func:`rwrouter.routing.escape.escape_labels`). :func:`explain` checks that both agree on the
labels sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from rwrouter.config.model import EscapingScheme
from rwrouter.errors import InvariantError
from rwrouter.reasons import DropReason
from rwrouter.relabel import RelabelConfig, Step, trace
from rwrouter.relabel.series import format_labels
from rwrouter.routing import Router
from rwrouter.routing.escape import ALLOW_UTF8, Escaped, escape_labels
from rwrouter.routing.outcome import Route
from rwrouter.wire.accelerator import decode_labels

__all__ = ["DROPPED", "INVALID_OUTCOME", "NOT_SENT", "SENT", "Decision", "Explanation", "explain"]

LabelTuple = tuple[tuple[str, str], ...]

# Outcomes of a destination.
SENT = "sent"  # the label set is forwarded (``labels``)
DROPPED = "dropped"  # a rule dropped it, or no label is left (counted as reason "relabel")
INVALID_OUTCOME = "invalid"  # no __name__ or an empty label name left (reason "invalid")
NOT_SENT = "not sent"  # a fallback destination: a non-fallback destination kept it (no count)


@dataclass(frozen=True, slots=True)
class Decision:
    """One destination's outcome for a label set.

    ``steps``: its own write_relabel_configs, rule by rule (empty when they were not applied:
    a global rule dropped the series, or a fallback destination does not receive it).
    ``dropped_by``: ``("global" | "destination", rule index)`` when a rule dropped the series.
    ``reason``: the drop reason the router counts (``relabel``, ``invalid``,
    ``name_collision``), None otherwise. ``detail``: one line saying why, for people.
    ``shadow``: the destination is only counted by the audit (what it would be sent is never
    sent). ``labels``: the labels sent (after escaping), or that would be. ``escaping``: the
    destination's ``metric_name_escaping_scheme``; ``escaped``: what it changed
    (:class:`~rwrouter.routing.escape.Escaped`) and ``before``: the labels before it, both None
    when it changed nothing.
    """

    name: str
    fallback: bool
    outcome: str
    labels: LabelTuple | None
    steps: tuple[Step, ...]
    dropped_by: tuple[str, int] | None
    reason: DropReason | None
    detail: str
    shadow: bool = False
    escaping: EscapingScheme = ALLOW_UTF8
    escaped: Escaped | None = None
    before: LabelTuple | None = None

    @property
    def escape_note(self) -> str:
        """What escaping changed, in one line for people ("" when nothing)."""
        if self.escaped is None:
            return ""
        parts = []
        if self.escaped.metric_name is not None:
            old, new = self.escaped.metric_name
            parts.append(f"metric name {old} -> {new}")
        parts += [f"label {old} -> {new}" for old, new in self.escaped.renamed]
        parts += [
            f"label {old} dropped (its escaped name is {kept}'s too; {kept} sorts first)"
            for old, kept in self.escaped.dropped
        ]
        return f"escaped ({self.escaping}): " + "; ".join(parts)


@dataclass(frozen=True, slots=True)
class Explanation:
    """A label set's way through the router: the global rules' steps, the label set they leave
    (None when one dropped it), then one :class:`Decision` per destination in config order."""

    labels: LabelTuple
    global_steps: tuple[Step, ...]
    after_global: LabelTuple | None
    decisions: tuple[Decision, ...]


def explain(
    labels: Sequence[tuple[str, str]],
    global_rules: Sequence[RelabelConfig],
    routes: Sequence[Route],
    *,
    router: Router | None = None,
    drop_after: str | None = None,
) -> Explanation:
    """The outcome of ``labels`` (any order) at each destination of ``routes`` after
    ``global_rules``, with the rules' steps. ``router`` (of those rules and routes): one that
    remembers the series explained before, so a collision between them shows (a fresh one
    otherwise). ``drop_after``: a label removed after each destination's rules, as the router
    does (a tenant's ``__tenant__``: :class:`~rwrouter.routing.tenants.TenantRouter`, whose
    ``labels`` carry it). Raises InvariantError if the engine's steps and the router's
    decision disagree (a bug)."""
    start = tuple(sorted(labels))
    if router is None:
        router = Router(global_rules=global_rules, routes=routes, cache_size=1, cache_bytes=1)
    outcomes = router.route_series(start)
    global_steps = tuple(trace(global_rules, start))
    after, global_drop = _after_global(global_steps, start)
    primaries = _primaries(routes, outcomes)
    decisions = []
    for route, res in zip(routes, outcomes, strict=True):
        decision = _route_decision(
            route,
            res,
            after=after,
            global_drop=global_drop,
            primaries=primaries,
            drop_after=drop_after,
        )
        decisions.append(
            dataclasses.replace(decision, shadow=route.shadow) if route.shadow else decision
        )
    return Explanation(start, global_steps, after, tuple(decisions))


def _after_global(
    global_steps: Sequence[Step], start: LabelTuple
) -> tuple[LabelTuple | None, int | None]:
    """The label set the global rules leave of ``start`` (None when one dropped it) and the
    index of the rule that dropped it (None when none did), from their ``global_steps``."""
    if not global_steps:
        return start, None
    last = global_steps[-1]
    return (last.labels, None) if last.kept else (None, last.index)


def _primaries(routes: Sequence[Route], outcomes: Sequence[bytes | DropReason | None]) -> list[str]:
    """The destinations that are neither fallback nor shadow and keep the series (a fallback
    destination receives it only when none does)."""
    lost = (DropReason.RELABEL, DropReason.INVALID, None)
    return [
        r.name
        for r, res in zip(routes, outcomes, strict=True)
        if not r.fallback and not r.shadow and res not in lost
    ]


def _route_decision(
    route: Route,
    res: bytes | DropReason | None,
    *,
    after: LabelTuple | None,
    global_drop: int | None,
    primaries: Sequence[str],
    drop_after: str | None = None,
) -> Decision:
    """``route``'s decision given what the global rules left (``after``, None when rule
    ``global_drop`` dropped the series) and the router's outcome ``res``: dropped before its
    own rules, not sent (a fallback destination that ``primaries`` keep it from), or what its
    own rules and escaping make of it (:func:`_decision`)."""
    if after is None:
        _agree(res == DropReason.RELABEL, route, res)
        return Decision(
            route.name,
            route.fallback,
            DROPPED,
            None,
            (),
            ("global", global_drop or 0),
            DropReason.RELABEL,
            f"dropped by global rule [{global_drop}]",
        )
    if not after:
        _agree(res == DropReason.RELABEL, route, res)
        detail = "no labels left after the global rules"
        return Decision(
            route.name, route.fallback, DROPPED, None, (), None, DropReason.RELABEL, detail
        )
    if res is None:
        return Decision(
            route.name, True, NOT_SENT, None, (), None, None, f"kept by {', '.join(primaries)}"
        )
    return _decision(route, after, res, drop_after)


def _agree(agreed: bool, route: Route, *seen: object) -> None:
    """Raise InvariantError when the relabel engine's steps and the router's outcome for
    ``route`` disagree (``seen``: what each gave)."""
    if not agreed:
        raise InvariantError(f"the relabel steps and the router disagree at {route.name}: {seen}")


def _decision(
    route: Route, labels: LabelTuple, res: bytes | DropReason, drop_after: str | None = None
) -> Decision:
    """``route``'s decision for ``labels`` (what the global rules left, not empty) from its
    own rules' steps (then without the label ``drop_after``) and the router's outcome ``res``
    (the series sent, or a drop reason)."""
    steps = tuple(trace(route.rules, labels))
    final = steps[-1].labels if steps else labels
    if drop_after is not None:
        final = tuple(pair for pair in final if pair[0] != drop_after)
    if steps and not steps[-1].kept:
        _agree(res == DropReason.RELABEL, route, res)
        index = steps[-1].index
        return Decision(
            route.name,
            route.fallback,
            DROPPED,
            None,
            steps,
            ("destination", index),
            DropReason.RELABEL,
            f"dropped by rule [{index}]",
        )
    if isinstance(res, bytes) or res == DropReason.NAME_COLLISION:
        return _escaped_decision(route, steps=steps, final=final, res=res)
    if res == DropReason.INVALID:
        names = [name for name, _ in final]
        why = "no __name__ label" if "__name__" not in names else "an empty label name"
        return Decision(
            route.name,
            route.fallback,
            INVALID_OUTCOME,
            final,
            steps,
            None,
            DropReason.INVALID,
            f"invalid: {why} after relabeling",
        )
    _agree(res == DropReason.RELABEL and not final, route, res, final)
    return Decision(
        route.name,
        route.fallback,
        DROPPED,
        None,
        steps,
        None,
        DropReason.RELABEL,
        "no labels left after relabeling",
    )


def _escaped_decision(
    route: Route, *, steps: tuple[Step, ...], final: LabelTuple, res: bytes | DropReason
) -> Decision:
    """The decision for a series ``route``'s rules kept as ``final``: escaped by its scheme,
    then sent (``res``: the encoded series, checked against the escaped labels) or dropped
    as another series' (``res``: ``name_collision``)."""
    escaped = escape_labels(final, route.escaping)
    change = escaped if escaped.changed else None
    if isinstance(res, bytes):
        _agree(decode_labels(res) == escaped.labels, route, res, escaped)
        outcome, reason, why = SENT, None, "sent"
    else:
        outcome, reason = DROPPED, DropReason.NAME_COLLISION
        why = (
            f"dropped: escaped, it is {format_labels(escaped.labels)}, the series of"
            " another one seen first (name collision)"
        )
    return Decision(
        route.name,
        route.fallback,
        outcome,
        escaped.labels,
        steps,
        None,
        reason,
        why,
        escaping=route.escaping,
        escaped=change,
        before=final if change else None,
    )
