"""Why one label set goes where it goes (pure; the relabel debugger, ``rwrouter relabel``).

The decision of each destination is the router's own (:meth:`Router.route_labels`, the function
every series goes through on a cache miss); the steps are the engine's own
(:func:`rwrouter.relabel.trace`, rule by rule with the function :func:`~rwrouter.relabel.process`
applies). :func:`explain` checks that both agree on the labels sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from rwrouter.relabel import RelabelConfig, Step, trace
from rwrouter.routing import Router
from rwrouter.routing.outcome import INVALID, RELABEL, Route
from rwrouter.wire.scan import decode_labels

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
    ``reason``: the drop reason the router counts (``relabel``, ``invalid``), None otherwise.
    ``detail``: one line saying why, for people. ``shadow``: the destination is only counted
    by the audit (what it would be sent is never sent).
    """

    name: str
    fallback: bool
    outcome: str
    labels: LabelTuple | None
    steps: tuple[Step, ...]
    dropped_by: tuple[str, int] | None
    reason: str | None
    detail: str
    shadow: bool = False


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
) -> Explanation:
    """The outcome of ``labels`` (any order) at each destination of ``routes`` after
    ``global_rules``, with the rules' steps. Raises AssertionError if the engine's steps and
    the router's decision disagree (a bug)."""
    start = tuple(sorted(labels))
    router = Router(global_rules=global_rules, routes=routes, cache_size=1, cache_bytes=1)
    outcomes = router.route_labels(start)
    global_steps = tuple(trace(global_rules, start))
    after: LabelTuple | None = start
    global_drop: int | None = None
    if global_steps:
        last = global_steps[-1]
        after = last.labels if last.kept else None
        global_drop = None if last.kept else last.index
    primaries = [r.name for r, res in zip(routes, outcomes, strict=True)
                 if not r.fallback and not r.shadow and isinstance(res, bytes)]  # fmt: skip
    decisions = []
    for route, res in zip(routes, outcomes, strict=True):
        if after is None:
            assert res == RELABEL, (route.name, res)
            decisions.append(Decision(route.name, route.fallback, DROPPED, None, (),
                                      ("global", global_drop or 0), RELABEL,
                                      f"dropped by global rule [{global_drop}]"))  # fmt: skip
            continue
        if not after:
            assert res == RELABEL, (route.name, res)
            detail = "no labels left after the global rules"
            decisions.append(Decision(route.name, route.fallback, DROPPED, None, (), None,
                                      RELABEL, detail))  # fmt: skip
            continue
        if res is None:
            decisions.append(Decision(route.name, True, NOT_SENT, None, (), None, None,
                                      f"kept by {', '.join(primaries)}"))  # fmt: skip
            continue
        decisions.append(_decision(route, after, res))
    decisions = [dataclasses.replace(d, shadow=r.shadow) if r.shadow else d
                 for d, r in zip(decisions, routes, strict=True)]  # fmt: skip
    return Explanation(start, global_steps, after, tuple(decisions))


def _decision(route: Route, labels: LabelTuple, res: bytes | str) -> Decision:
    steps = tuple(trace(route.rules, labels))
    final = steps[-1].labels if steps else labels
    if steps and not steps[-1].kept:
        assert res == RELABEL, (route.name, res)
        index = steps[-1].index
        return Decision(route.name, route.fallback, DROPPED, None, steps,
                        ("destination", index), RELABEL, f"dropped by rule [{index}]")  # fmt: skip
    if isinstance(res, bytes):
        assert decode_labels(res) == final, (route.name, res, final)
        return Decision(route.name, route.fallback, SENT, final, steps, None, None, "sent")
    if res == INVALID:
        names = [name for name, _ in final]
        why = "no __name__ label" if "__name__" not in names else "an empty label name"
        return Decision(route.name, route.fallback, INVALID_OUTCOME, final, steps, None,
                        INVALID, f"invalid: {why} after relabeling")  # fmt: skip
    assert res == RELABEL and not final, (route.name, res, final)
    return Decision(route.name, route.fallback, DROPPED, None, steps, None, RELABEL,
                    "no labels left after relabeling")  # fmt: skip
