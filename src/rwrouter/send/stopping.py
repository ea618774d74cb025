"""A destination's stop, and the timed wait its tasks use.

:class:`Stopping` is made with the destination's parts (:mod:`rwrouter.pipeline.build`),
shared by its appends (:mod:`rwrouter.pipeline.destination`, which begins it), its reader
(:mod:`rwrouter.send.reader`) and its senders (:mod:`rwrouter.send.shards`).
:func:`wait_event`: a sender's wait for frames or for its batch deadline, which never loses
a cancellation.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress


class HandedOver(Exception):
    """A delivery stopped retrying because its destination is being handed over to a
    successor (a reload replaced it): the batch is not done, so it stays on disk and the
    successor sends it (:attr:`Stopping.handover`). Control flow, not an error."""


class Stopping:
    """A destination's stop, shared by its appends, reader and senders: ``closing`` once
    :meth:`~rwrouter.pipeline.destination.Destination.stop_sending` began; ``handover`` when
    it does not drain (a reload hands the queue to a successor)."""

    __slots__ = ("_event", "handover")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.handover = False

    @property
    def closing(self) -> bool:
        """Whether the stop began."""
        return self._event.is_set()

    def set(self, *, handover: bool) -> None:
        """Begin the stop (``handover``: without draining)."""
        self.handover = handover
        self._event.set()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less when the stop begins meanwhile."""
        await wait_event(self._event, seconds)


async def wait_event(event: asyncio.Event, seconds: float) -> None:
    """Wait until ``event`` is set or ``seconds`` have passed, whichever comes first.

    A cancellation is never lost, unlike with ``asyncio.wait_for(event.wait(), seconds)``
    before Python 3.12, which returns normally when its task is cancelled just as the event is
    set (CPython issue #86296). A stop sets the senders' events and, with no time left to
    drain, cancels them at once: a sender that lost that cancellation went on to send (and to
    retry a destination that is down for ever), and the stop never returned.
    """
    with suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
