"""Fan-out: global relabel rules, per-destination copies, fallback routing, drop counts (pure).

Rules (rwrouter's routing semantics, built on Prometheus relabel semantics):

1. The global ``relabel_configs`` run first, on every series.
2. Each destination applies its own ``write_relabel_configs`` to its *own copy* of the result.
3. A ``fallback`` destination receives exactly the series that no non-fallback destination kept
   after its own rules (then applies its own rules too). A ``shadow`` destination (counted by
   the audit, never sent) does not count as keeping a series: adding one changes nothing else.
4. A series left without labels is not sent (reason ``relabel``); one left without ``__name__``
   or with an empty label name is not sent either (reason ``invalid``: every receiver would
   reject it, and with it the rest of the batch).
   A destination with ``send_exemplars: false`` or ``send_native_histograms: false`` gets the
   series without those; a series left with nothing to send is not sent (reason ``filtered``).
5. Then each destination's ``metric_name_escaping_scheme`` writes its output names
   (:mod:`rwrouter.routing.escape`; ``allow-utf-8`` changes nothing). Two series that escaping
   makes equal at a destination collide: the first seen is sent, the later one is not (reason
   ``name_collision``; :mod:`rwrouter.routing.collisions`). Escaping and collisions come after
   the fallback decision: a series a destination kept counts as kept even when a collision
   drops it there.
6. Metadata entries are routed by applying the same rules to the label set
   ``{__name__: <metric family name>}``; the entry itself is forwarded unchanged (but for its
   family name, escaped as the destination escapes metric names). An entry without a family
   name is sent nowhere (counted as ``invalid``).

7. A destination with a ``series_limit`` (:mod:`rwrouter.routing.budget`) takes a *new*
   series only while it has room; one past it is not sent there (reason ``series_limit``) and
   goes to the fallback destinations as if the destination had not kept it, or nowhere
   (``on_series_limit``); :class:`BudgetedRouter`.

The outcome of a label set depends only on its raw bytes, so it is computed once and cached (the
same series return every scrape). Samples, exemplars and histograms are never decoded: a routed
series is its re-encoded labels followed by the sender's raw bytes.
"""

from rwrouter.routing.budget import BudgetState, SeriesBudget
from rwrouter.routing.budgeted import BudgetedRouter, budget_states
from rwrouter.routing.build import build_router
from rwrouter.routing.cache import DEFAULT_CACHE_BYTES, DEFAULT_CACHE_MAX_AGE, DEFAULT_CACHE_SIZE
from rwrouter.routing.outcome import Route
from rwrouter.routing.routed import RoutedRequest, shard_hash
from rwrouter.routing.router import Router

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CACHE_MAX_AGE",
    "DEFAULT_CACHE_SIZE",
    "BudgetState",
    "BudgetedRouter",
    "Route",
    "RoutedRequest",
    "Router",
    "SeriesBudget",
    "budget_states",
    "build_router",
    "shard_hash",
]
