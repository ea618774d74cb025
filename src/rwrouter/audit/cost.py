"""Projected monthly ingestion cost (pure).

A month is 730 hours (2,628,000 seconds), the convention of AWS's pricing pages. Tiers apply
to the cumulative samples of the month, in order (the managed workspace bills each sample
ingested at the price of the tier the month's running total is in). The projection assumes
this traffic is all the account ingests in the region that month (other traffic would move it
into cheaper tiers sooner) and ignores any free tier.
"""

from __future__ import annotations

from collections.abc import Sequence

from rwrouter.config.model import PriceTier

__all__ = ["SECONDS_PER_MONTH", "monthly_cost", "monthly_samples"]

SECONDS_PER_MONTH = 730 * 3600


def monthly_samples(samples_per_second: float) -> float:
    """Samples a month at a steady ``samples_per_second``."""
    return samples_per_second * SECONDS_PER_MONTH


def monthly_cost(samples: float, tiers: Sequence[PriceTier]) -> float:
    """The price of ``samples`` ingested in one month under ``tiers`` (ascending
    ``up_to_samples``, the last one unbounded), in the tiers' currency. Raises ValueError for
    negative samples or tiers that are empty or whose last one is bounded."""
    if samples < 0:
        raise ValueError("samples must be >= 0")
    if not tiers or tiers[-1].up_to_samples is not None:
        raise ValueError("the last price tier must be unbounded")
    cost, floor = 0.0, 0
    for tier in tiers:
        top = samples if tier.up_to_samples is None else min(samples, tier.up_to_samples)
        if top > floor:
            cost += (top - floor) / 1e6 * tier.per_million
        if tier.up_to_samples is None or samples <= tier.up_to_samples:
            break
        floor = tier.up_to_samples
    return cost
