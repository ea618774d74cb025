"""Where request bodies are decoded and routed: worker threads, off the event loop.

Decompressing, parsing and routing a body is CPU-bound; on the event loop a large request would
freeze health probes and every other answer. Two single-thread lanes run it instead: one for
ordinary bodies (what Prometheus sends: up to :data:`LARGE_BODY` bytes once decoded, as the
snappy header declares) and one for larger ones, so ordinary requests never queue behind a
huge one (the GIL interleaves the two lanes). Within
a lane requests run in arrival order. Each lane admits at most ``backlog`` requests (running or
waiting); more get :class:`Busy` (the server answers 503: the sender retries), so waiting
bodies cannot pile up in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

LARGE_BODY = 1024 * 1024  # decoded bytes; a Prometheus batch of 2000 samples is ~0.5-0.7 MiB
BACKLOG = 8  # requests per lane, running or waiting


class Busy(Exception):
    """The lane already holds ``backlog`` requests."""


class Decoders:
    """The two decoding lanes. ``shutdown()`` when the server stops."""

    def __init__(self, *, large_body: int = LARGE_BODY, backlog: int = BACKLOG) -> None:
        self.large_body = large_body
        self.backlog = backlog
        self._lanes = {
            lane: ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"rwrouter-decode-{lane}")
            for lane in ("ordinary", "large")
        }
        self._load = dict.fromkeys(self._lanes, 0)

    async def run(self, size: int, work: Callable[[], T]) -> T:
        """Run ``work`` for a body of ``size`` bytes (decoded) in its lane; raises
        :class:`Busy` when the lane is full, else whatever ``work`` raises."""
        lane = "large" if size > self.large_body else "ordinary"
        if self._load[lane] >= self.backlog:
            raise Busy(lane)
        self._load[lane] += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._lanes[lane], work)
        finally:
            self._load[lane] -= 1

    def shutdown(self) -> None:
        """Let the running decodes finish; drop the waiting ones (their senders retry)."""
        for executor in self._lanes.values():
            executor.shutdown(wait=True, cancel_futures=True)
