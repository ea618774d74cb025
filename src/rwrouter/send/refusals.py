"""What a destination refused for good, and where it goes: the vocabulary shared by the
deliverer (:mod:`rwrouter.send.delivery`), the shards and the dead-letter writer
(:mod:`rwrouter.deadletter.writer`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from rwrouter.reasons import DropReason
from rwrouter.wire.index import Item

__all__ = [
    "DeadLetterSink",
    "Item",
    "Kind",
    "Refusal",
    "RejectHook",
    "is_out_of_order",
    "reason_of",
]


class Kind(StrEnum):
    """What a batch carries: samples (framed series, RW1 form) or metadata (framed
    MetricMetadata entries, sent as RW 1.0); the ``kind`` of log lines and dead letters."""

    SAMPLES = "samples"
    METADATA = "metadata"


@dataclass(frozen=True, slots=True)
class Refusal:
    """The final answer for a part that was not delivered.

    ``status``: the HTTP status (None: no answer). ``text``: the head of the answer's body, or
    the error that prevented an answer. ``reason``: why it is final, the ``reason`` label of the
    dropped counters: ``retry_budget``, ``too_large`` (413 for a single item), else the status
    class (``4xx``, ``3xx``: :func:`reason_of`), or ``refused`` without a status.
    """

    status: int | None
    text: str
    reason: DropReason


RejectHook = Callable[[list[Item], Kind, Refusal, str | None], None]
"""Called with a part refused for good: its items, kind, the refusal and its tenant (None:
none)."""


class DeadLetterSink(Protocol):
    """Where refused parts go for good (:class:`rwrouter.deadletter.writer.DeadLetters`): a
    :data:`RejectHook` whose writes :meth:`flush` waits for."""

    def __call__(
        self, items: list[Item], kind: Kind, refusal: Refusal, tenant: str | None, /
    ) -> None: ...

    async def flush(self) -> None: ...


_STATUS_CLASSES = {
    0: DropReason.NOT_HTTP,
    1: DropReason.INFORMATIONAL,
    3: DropReason.REDIRECTION,
    4: DropReason.CLIENT_ERROR,
    5: DropReason.SERVER_ERROR,
}


def reason_of(status: int | None) -> DropReason:
    """The reason of a final refusal by its status class: ``4xx``, ``3xx``, ``1xx``, ``0xx``
    (below 100: not an HTTP status, which aiohttp still reads), ``5xx`` (600 and above too:
    both are retried until the budget is spent, so they end here only under another policy);
    ``refused`` for no answer (the deliverer's own reasons, ``retry_budget`` and
    ``too_large``, aside). Raises ValueError for a 2xx, which is no refusal."""
    if status is None:
        return DropReason.REFUSED
    reason = _STATUS_CLASSES.get(min(max(status, 0) // 100, 5))
    if reason is None:
        raise ValueError(f"a {status} answer is not a refusal")
    return reason


def is_out_of_order(status: int | None, text: str) -> bool:
    """Whether an answer says the samples are older than what the destination has: Prometheus
    and Cortex (the managed workspace) "out of order sample", Mimir "out-of-order samples are
    not allowed"."""
    lowered = text.lower()
    return status == 400 and ("out of order" in lowered or "out-of-order" in lowered)
