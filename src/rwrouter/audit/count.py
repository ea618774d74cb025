"""The audit's count of one routed share into an active-series state (pure): the loop every
audited series goes through, with a compiled twin in the accelerator (the same results and
state changes, tested so) that walks the share in place.

A series' key is its metric name's id shifted left by :data:`HASH_BITS` and or-ed with its
shard hash (:mod:`rwrouter.audit.active` explains why a hash and not the labels).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rwrouter.wire.accelerator import compiled
from rwrouter.wire.index import named_frames_list

__all__ = ["HASH_BITS", "AddName", "CountShare", "count_share", "count_share_py"]

HASH_BITS = 32  # a series key: name id << 32 | shard hash (u32)


AddName = Callable[[bytes], tuple[int, int | None]]
"""``add_name(raw)``: the id a name new to the counts gets, and the id of
:data:`~rwrouter.audit.active.OTHER` after it (None: names have not run out)."""


def count_share_py(
    body: bytes,
    index: bytes,
    ids: Mapping[bytes, int],
    newest: dict[int, int],
    older: Sequence[dict[int, int]],
    counted: list[int],
    active: list[int],
    other: int | None,
    held: int,
    max_series: int,
    add_name: AddName,
) -> tuple[int, int, bool]:
    """Count the frames of a share (``body`` + its :data:`~rwrouter.wire.index.INDEX`, names
    as :func:`~rwrouter.wire.index.named_frames` finds them) into an
    :class:`~rwrouter.audit.active.ActiveSeries`'s state: names by raw bytes ``ids``; series
    keys by generation, ``newest`` and the ``older`` ones most recent first; per name id the
    samples ``counted`` and the series ``active``; the id of the names past the bound
    (:data:`~rwrouter.audit.active.OTHER`) or None; the series ``held`` and their bound
    ``max_series``. A name ``ids`` does not know gets its id from ``add_name``, which may add
    it to ``ids``, grow the lists and make OTHER. Returns (samples counted, series held now,
    whether a series was left out for the bound). The reference of the compiled
    ``count_share``; raises ValueError for an index that is not a whole number of entries."""
    total = 0
    capped = False
    for raw, samples, hashed in named_frames_list(body, index):
        nid = ids.get(raw)
        if nid is None:
            nid, other = add_name(raw)
        counted[nid] += samples
        total += samples
        key = nid << HASH_BITS | hashed
        if key in newest or nid == other:
            continue
        for generation in older:
            if generation.pop(key, None) is not None:
                newest[key] = nid
                break
        else:
            if held >= max_series:
                capped = True
                continue
            newest[key] = nid
            active[nid] += 1
            held += 1
    return total, held, capped


CountShare = Callable[
    [
        bytes,
        bytes,
        Mapping[bytes, int],
        dict[int, int],
        Sequence[dict[int, int]],
        list[int],
        list[int],
        int | None,
        int,
        int,
        AddName,
    ],
    tuple[int, int, bool],
]
count_share: CountShare = compiled("count_share") or count_share_py
"""The counting loop in use (compiled when :data:`rwrouter.wire.accelerator.ACCELERATED`:
it walks the frames in place, no tuple per frame), with the contract of
:func:`count_share_py`."""
