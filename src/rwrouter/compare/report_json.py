"""The report of ``rwrouter compare`` as JSON-ready values (pure; ``--json``): the same as the
text report (:mod:`rwrouter.compare.report`), one object per query.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rwrouter.compare.external import labels_only_in_workspace
from rwrouter.compare.parity import Parity
from rwrouter.compare.report import SIDES, QueryReport, exit_code, stats_of
from rwrouter.relabel.series import format_labels

__all__ = ["json_safe", "to_json"]


def to_json(
    reports: Sequence[QueryReport], *, tolerance: float, summary: str, limit: int = 100
) -> dict[str, Any]:
    """The report as JSON-ready values: ``queries`` (one object per query: window, status,
    speed-up, each store's stats in seconds, parity with up to ``limit`` series listed per
    kind), ``tolerance``, ``summary`` and ``exit_code``."""
    document = {
        "queries": [_query_json(r, limit) for r in reports],
        "tolerance": tolerance,
        "summary": summary,
        "exit_code": exit_code(reports),
    }
    return json_safe(document)  # type: ignore[no-any-return]


def _query_json(r: QueryReport, limit: int) -> dict[str, Any]:
    sides = {
        side.replace("-", "_"): {
            "url": r.urls.get(side),
            "runs": s.runs,
            "answered": s.answered,
            "timeouts": s.timeouts,
            "errors": s.errors,
            "error": s.error,
            "p50_seconds": s.p50,
            "p95_seconds": s.p95,
        }
        for side in SIDES
        for s in (stats_of(r, side),)
    }
    return {
        "query": r.query,
        "start": r.start,
        "end": r.end,
        "step_seconds": r.step,
        "status": r.status,
        "speedup": r.speedup,
        **sides,
        "parity": None if r.parity is None else _parity_json(r.parity, limit),
    }


def _parity_json(p: Parity, limit: int) -> dict[str, Any]:
    def listed(series: Sequence[Any]) -> list[str]:
        return [format_labels(labels) for labels in series[:limit]]

    return {
        "equal": p.equal,
        "no_data": p.no_data,
        "series_compared": p.series_compared,
        "points_compared": p.points_compared,
        "missing_in_workspace": len(p.missing_in_workspace),
        "missing_in_self_hosted": len(p.missing_in_self_hosted),
        "unexpected_in_workspace": len(p.unexpected_in_workspace),
        "collisions": len(p.collisions),
        "not_migrated": len(p.not_migrated),
        "differing_series": p.differing_series,
        "differing_points": p.differing_points,
        "labels_only_in_workspace": dict(
            labels_only_in_workspace(p.missing_in_self_hosted, p.missing_in_workspace)
        ),
        "examples": {
            "missing_in_workspace": listed(p.missing_in_workspace),
            "missing_in_self_hosted": listed(p.missing_in_self_hosted),
            "unexpected_in_workspace": listed(p.unexpected_in_workspace),
            "collisions": [
                {"workspace": format_labels(c.workspace), "self_hosted": listed(c.self_hosted)}
                for c in p.collisions[:limit]
            ],
            "differences": [
                {
                    "series": format_labels(d.labels),
                    "timestamp": d.timestamp_ms / 1000,
                    "self_hosted": d.self_hosted,
                    "workspace": d.workspace,
                }
                for d in p.differences[:limit]
            ],
        },
        "families": {
            name: {
                "in_both": c.in_both,
                "missing_in_workspace": c.missing_in_workspace,
                "missing_in_self_hosted": c.missing_in_self_hosted,
                "unexpected_in_workspace": c.unexpected_in_workspace,
                "colliding": c.colliding,
                "differing": c.differing,
                "not_migrated": c.not_migrated,
            }
            for name, c in p.families.items()
        },
    }


def json_safe(value: Any) -> Any:
    """``value`` (JSON-ready: dicts, lists, scalars) with every NaN or infinite float as
    Prometheus's JSON spells it, a string (``"NaN"``, ``"+Inf"``, ``"-Inf"``): JSON has no
    such numbers, and ``json.dumps`` would write invalid JSON for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value
