"""The senders' timed waits (:func:`rwrouter.send.stopping.wait_event`, ``Stopping.sleep``):
they end when the event is set or the time is up, and never lose a cancellation — a stop sets
the senders' events and, with no time left to drain, cancels them in the next loop turns
(``asyncio.wait_for`` before Python 3.12 returned normally then: CPython issue #86296)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from rwrouter.send.stopping import Stopping, wait_event

pytestmark = pytest.mark.timeout(10)

# A waiter: (start waiting for up to ``seconds``, set the event).
Waiter = tuple[Callable[[float], Coroutine[Any, Any, None]], Callable[[], None]]


def event_waiter() -> Waiter:
    event = asyncio.Event()
    return (lambda seconds: wait_event(event, seconds)), event.set


def stopping_waiter() -> Waiter:
    stopping = Stopping()
    return stopping.sleep, lambda: stopping.set(handover=False)


WAITERS = pytest.mark.parametrize(
    "make_waiter", [event_waiter, stopping_waiter], ids=["wait_event", "stopping_sleep"]
)


async def started(waiter: Waiter, seconds: float) -> asyncio.Task[None]:
    task = asyncio.create_task(waiter[0](seconds))
    for _ in range(3):
        await asyncio.sleep(0)  # now waiting
    assert not task.done()
    return task


@WAITERS
@pytest.mark.parametrize(
    "cancel_turns",
    [None, 0, 1, 2, 3],
    ids=["waiting", "cancelled_with_the_set", "after_1_turn", "after_2_turns", "after_3_turns"],
)
async def test_a_cancellation_is_never_lost(
    make_waiter: Callable[[], Waiter], cancel_turns: int | None
) -> None:
    """``cancel_turns``: loop turns between setting the event and the cancellation (None: the
    event is never set); the stop's own sequence is "set, then ``asyncio.wait(timeout=0)``,
    then cancel", which lands within these turns."""
    waiter = make_waiter()
    task = await started(waiter, 10.0)
    if cancel_turns is not None:
        waiter[1]()
        for _ in range(cancel_turns):
            await asyncio.sleep(0)
    if task.done():  # the wait ended before the cancellation: nothing to lose
        assert task.exception() is None
        return
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@WAITERS
async def test_the_stop_sequence_cancels_the_waiter(make_waiter: Callable[[], Waiter]) -> None:
    """As ``Destination.stop_sending`` with no time left: set, wait 0 s, cancel what runs."""
    waiter = make_waiter()
    task = await started(waiter, 10.0)
    waiter[1]()
    _, running = await asyncio.wait([task], timeout=0)
    for pending in running:
        pending.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() or not running


@WAITERS
@pytest.mark.parametrize(
    ("set_it", "seconds"), [(True, 10.0), (False, 0.05)], ids=["event_set", "time_up"]
)
async def test_the_wait_ends_when_set_or_when_the_time_is_up(
    make_waiter: Callable[[], Waiter], set_it: bool, seconds: float
) -> None:
    waiter = make_waiter()
    task = await started(waiter, seconds)
    if set_it:
        waiter[1]()
    async with asyncio.timeout(2):
        await task  # returns normally (no TimeoutError)
