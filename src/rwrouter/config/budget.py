"""The values of a destination's series budget keys (pure): ``on_series_limit``'s choices
and the defaults; the policy itself is :mod:`rwrouter.routing.budget`."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DEFAULT_SERIES_WINDOW", "QUOTA_MARGIN", "OnSeriesLimit"]

DEFAULT_SERIES_WINDOW = 7200.0  # seconds: the workspace's "active = a sample in the last 2 h"
QUOTA_MARGIN = 0.10  # a sigv4 series_limit above 90 % of audit.series_limit needs saying so


class OnSeriesLimit(StrEnum):
    """``on_series_limit``: what a new series past a destination's ``series_limit`` does:
    ``fallback`` goes to the fallback destination (unless another destination keeps it),
    ``drop`` is dropped (counted, reason ``series_limit``); :mod:`rwrouter.routing.budget`."""

    FALLBACK = "fallback"
    DROP = "drop"
