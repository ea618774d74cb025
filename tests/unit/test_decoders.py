"""Decoding lanes (rwrouter.server.decoders): lanes by body size, bounded backlog."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from rwrouter.server.decoders import Busy, Decoders


async def test_a_full_lane_refuses_and_the_other_lane_still_works() -> None:
    decoders = Decoders(large_body=100, backlog=1)
    release = threading.Event()
    try:
        blocked = asyncio.create_task(decoders.run(1_000, release.wait))
        await asyncio.sleep(0.05)
        with pytest.raises(Busy):
            await decoders.run(2_000, lambda: None)  # the large lane is full
        assert await decoders.run(10, lambda: "ordinary") == "ordinary"
        release.set()
        assert await blocked is True
        assert await decoders.run(2_000, lambda: "large again") == "large again"
    finally:
        release.set()
        decoders.shutdown()


async def test_errors_of_the_work_reach_the_caller_and_free_the_lane() -> None:
    decoders = Decoders(backlog=1)

    def fail() -> None:
        raise ValueError("bad body")

    try:
        with pytest.raises(ValueError, match="bad body"):
            await decoders.run(1, fail)
        assert await decoders.run(1, lambda: 42) == 42
    finally:
        decoders.shutdown()


# (name, inline_body, body size, runs on the event loop's thread)
INLINE_CASES = [
    ("small_body_inline", 100, 100, True),
    ("over_the_inline_size_in_a_lane", 100, 101, False),
    ("inline_off", 0, 1, False),
]


@pytest.mark.parametrize(
    ("inline_body", "size", "inline"),
    [c[1:] for c in INLINE_CASES],
    ids=[c[0] for c in INLINE_CASES],
)
async def test_small_bodies_are_decoded_on_the_event_loop(
    inline_body: int, size: int, inline: bool
) -> None:
    decoders = Decoders(inline_body=inline_body)
    try:
        thread = await decoders.run(size, threading.get_ident)
        assert (thread == threading.get_ident()) == inline
    finally:
        decoders.shutdown()


def _burn_cpu(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


SLOW_CASES = [
    # id, what the inline decode does for 20 ms, the next decode goes to a lane
    ("burns_cpu", _burn_cpu, True),
    ("waits_without_cpu", time.sleep, False),  # e.g. the kernel set the process aside
]


@pytest.mark.parametrize(
    ("spend", "to_lane"), [c[1:] for c in SLOW_CASES], ids=[c[0] for c in SLOW_CASES]
)
async def test_a_slow_inline_decode_sends_the_next_ones_to_a_lane(
    monkeypatch: pytest.MonkeyPatch, spend: Callable[[float], None], to_lane: bool
) -> None:
    from rwrouter.server import decoders as module

    monkeypatch.setattr(module, "INLINE_SLOW", 0.01)
    decoders = Decoders(inline_body=100)
    try:
        loop_thread = threading.get_ident()

        def slow() -> int:
            spend(0.02)
            return threading.get_ident()

        assert await decoders.run(10, slow) == loop_thread  # inline, but maybe too costly...
        assert (await decoders.run(10, threading.get_ident) != loop_thread) == to_lane
        decoders._inline_off_until = 0.0  # the pause is over
        assert await decoders.run(10, threading.get_ident) == loop_thread
    finally:
        decoders.shutdown()
