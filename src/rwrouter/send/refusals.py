"""What a destination refused for good, and where it goes: the vocabulary shared by the
deliverer (:mod:`rwrouter.send.delivery`), the shards and the dead-letter writer
(:mod:`rwrouter.deadletter.writer`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from rwrouter.wire.index import Item

__all__ = ["DeadLetterSink", "Item", "Refusal", "RejectHook", "is_out_of_order", "reason_of"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """The final answer for a part that was not delivered.

    ``status``: the HTTP status (None: no answer). ``text``: the head of the answer's body, or
    the error that prevented an answer. ``reason``: why it is final, the ``reason`` label of the
    dropped counters: ``retry_budget``, ``too_large`` (413 for a single item), else the status
    class (``4xx``, ``3xx``), or ``refused`` without a status.
    """

    status: int | None
    text: str
    reason: str


RejectHook = Callable[[list[Item], str, Refusal], None]


class DeadLetterSink(Protocol):
    """Where refused parts go for good (:class:`rwrouter.deadletter.writer.DeadLetters`): a
    :data:`RejectHook` whose writes :meth:`flush` waits for."""

    def __call__(self, items: list[Item], kind: str, refusal: Refusal, /) -> None: ...

    async def flush(self) -> None: ...


def reason_of(status: int | None) -> str:
    """The reason of a final refusal by its status: ``4xx``, ``3xx``, ...; ``refused`` for no
    answer (the deliverer's own reasons, ``retry_budget`` and ``too_large``, aside)."""
    return f"{status // 100}xx" if status is not None else "refused"


def is_out_of_order(status: int | None, text: str) -> bool:
    """Whether an answer says the samples are older than what the destination has: Prometheus
    and Cortex (the managed workspace) "out of order sample", Mimir "out-of-order samples are
    not allowed"."""
    lowered = text.lower()
    return status == 400 and ("out of order" in lowered or "out-of-order" in lowered)
