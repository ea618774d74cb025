"""The audit (pure): which metric names a destination would receive, how many active series
and samples per second they make, and what that costs a month on the managed workspace.

- :mod:`rwrouter.audit.active`: :class:`ActiveSeries` counts one destination's routed series
  per metric name over a window; :func:`merge` joins the counts of several workers.
- :mod:`rwrouter.audit.cost`: monthly samples and tiered ingestion price.
- :mod:`rwrouter.audit.report`: the report (JSON shape and text table).

The I/O side (counting in the decode path, ``GET /-/audit``, ``rwrouter audit``) is
:mod:`rwrouter.audit.live`, :mod:`rwrouter.server.app` and :mod:`rwrouter.cli.audit`.
"""

from rwrouter.audit.active import (
    GENERATIONS,
    OTHER,
    RATE_BUCKETS,
    ActiveSeries,
    NameCount,
    Snapshot,
    merge,
    with_keys,
)
from rwrouter.audit.cost import SECONDS_PER_MONTH, monthly_cost, monthly_samples
from rwrouter.audit.report import SORT_KEYS, build_report, format_table, rank, reranked

__all__ = [
    "GENERATIONS",
    "OTHER",
    "RATE_BUCKETS",
    "SECONDS_PER_MONTH",
    "SORT_KEYS",
    "ActiveSeries",
    "NameCount",
    "Snapshot",
    "build_report",
    "format_table",
    "merge",
    "monthly_cost",
    "monthly_samples",
    "rank",
    "reranked",
    "with_keys",
]
