"""Where request bodies are decoded and routed: on the event loop when that is quick, else in
worker threads.

Decompressing, parsing and routing a body is CPU-bound; on the event loop a large request would
freeze health probes and every other answer. With the compiled accelerator, a body of up to
``inline_body`` decoded bytes (what Prometheus sends: about a millisecond of work) is decoded
right on the event loop: handing it to a thread and back costs more than the work (measured:
about 9% more throughput inline). An inline decode that takes more than :data:`INLINE_SLOW`
seconds of the loop thread's CPU time (a cold cache with heavy rules; CPU time, so a process
the kernel set aside for a while on a busy machine does not count) turns inline decoding off
for :data:`INLINE_PAUSE` seconds, so the event loop keeps answering. Everything else goes to two
single-thread lanes: one for
ordinary bodies (up to :data:`LARGE_BODY` bytes once decoded, as the snappy header declares)
and one for larger ones, so ordinary requests never queue behind a huge one (the GIL
interleaves the two lanes). Within a lane requests run in arrival order. Each lane admits at
most ``backlog`` requests (running or waiting); more get :class:`Busy` (the server answers
503: the sender retries), so waiting bodies cannot pile up in memory. A remote write 2.0 body
is placed by the size of its RW1 form (:func:`work_size`), which is what gets routed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from rwrouter.protocol import RW2_MESSAGE

T = TypeVar("T")

INLINE_SLOW = 0.02  # CPU seconds: an inline decode costing more turns inline decoding off...
INLINE_PAUSE = 10.0  # ...for this many seconds (the event loop must answer probes and sends)
LARGE_BODY = 1024 * 1024  # decoded bytes; a Prometheus batch of 2000 samples is ~0.5-0.7 MiB
BACKLOG = 8  # requests per lane, running or waiting
RW2_EXPANSION = 5
"""An RW 2.0 request's RW1 form over its decoded size: the labels written out in full instead
of refs into the symbols table (5.2 measured on the benchmark workload, metadata included)."""


def work_size(decoded: int, message: str) -> int:
    """The bytes of RW1 form a body of ``decoded`` bytes (as its snappy header declares)
    carrying ``message`` comes to, about: what :meth:`Decoders.run` places it by."""
    return decoded * RW2_EXPANSION if message == RW2_MESSAGE else decoded


class Busy(Exception):
    """The lane already holds ``backlog`` requests."""


class Decoders:
    """The two decoding lanes. ``shutdown()`` when the server stops."""

    def __init__(
        self, *, large_body: int = LARGE_BODY, backlog: int = BACKLOG, inline_body: int = 0
    ) -> None:
        self.large_body = large_body
        self.inline_body = inline_body
        self._inline_off_until = 0.0  # monotonic seconds: decode in the lanes until then
        self.backlog = backlog
        self._lanes = {
            lane: ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"rwrouter-decode-{lane}")
            for lane in ("ordinary", "large")
        }
        self._load = dict.fromkeys(self._lanes, 0)

    async def run(self, size: int, work: Callable[[], T]) -> T:
        """Run ``work`` for a body of ``size`` bytes (decoded): on the event loop up to
        ``inline_body`` bytes, else in its lane; raises :class:`Busy` when the lane is full,
        else whatever ``work`` raises."""
        if size <= self.inline_body and time.monotonic() >= self._inline_off_until:
            started = time.thread_time()
            try:
                return work()
            finally:
                if time.thread_time() - started > INLINE_SLOW:  # e.g. a cold cache, heavy rules
                    self._inline_off_until = time.monotonic() + INLINE_PAUSE
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
