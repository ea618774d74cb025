"""The bound on request bodies in memory: at most ``server.max_concurrent_reads`` bodies being
read at once and ``server.max_buffered_body_bytes`` held at once, from their read until their
answer (:class:`BodyGate`); :func:`read_body` reads a write request's body under it.

An upload beyond the bound waits before its body is read. aiohttp's payload stream stops
reading the socket once it buffers twice its chunk size (2 x 64 KiB:
``aiohttp.streams.StreamReader``, its high-water mark) and nobody reads it, so a waiting
upload holds about 128 KiB here and the sender's TCP window fills: TCP pushes back, as vmagent's
``-maxConcurrentInserts`` does (``lib/writeconcurrencylimiter``). A body's bytes are reserved
before it is read: its ``Content-Length``, or ``max_request_bytes`` without one (chunked),
cut to its length once read. Waiting is first come, first served, for at most
``server.read_wait_timeout`` seconds (:class:`ReadWaitTimeout`: the server answers 503 with
``Retry-After``). No task or lock per request: an upload that fits goes through at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from aiohttp import web

from rwrouter.config import ServerConfig
from rwrouter.errors import SlowBodyError, TooLargeError

__all__ = ["BodyGate", "ClientGone", "ReadWaitTimeout", "read_body"]


class ReadWaitTimeout(Exception):
    """No read within ``server.read_wait_timeout``: nothing of the request was read."""


class ClientGone(Exception):
    """The sender closed the connection before it got its answer: nothing is kept."""


class BodyGate:
    """Admission of bodies: at most ``max_reads`` being read and ``max_bytes`` held at once
    (bytes); an upload waits at most ``wait`` seconds; a body is at most ``limit`` bytes and
    takes at most ``timeout`` seconds to arrive (:func:`read_body`). Counters: ``reads``
    (bodies being read), ``held`` (bytes reserved or held), ``waiting`` (uploads waiting)."""

    def __init__(
        self, *, max_reads: int, max_bytes: int, wait: float, limit: int, timeout: float
    ) -> None:
        self.max_reads = max_reads
        self.max_bytes = max_bytes
        self.wait = wait
        self.limit = limit
        self.timeout = timeout
        self.reads = 0
        self.held = 0
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()

    @classmethod
    def of(cls, settings: ServerConfig) -> BodyGate:
        """The gate of the ``server`` section's bounds."""
        return cls(
            max_reads=settings.max_concurrent_reads,
            max_bytes=settings.max_buffered_body_bytes,
            wait=settings.read_wait_timeout,
            limit=settings.max_request_bytes,
            timeout=settings.read_timeout,
        )

    @property
    def waiting(self) -> int:
        return len(self._queue)

    async def enter(self, size: int) -> None:
        """Take a read and reserve ``size`` bytes, waiting behind earlier uploads for at most
        ``wait`` seconds; raises :class:`ReadWaitTimeout` then. Pair with :meth:`read_done`
        or :meth:`abandon`."""
        if not self._queue and self._fits(size):
            self.reads += 1
            self.held += size
            return
        entry = (size, asyncio.get_running_loop().create_future())
        self._queue.append(entry)
        try:
            async with asyncio.timeout(self.wait):
                await entry[1]
        except BaseException as exc:  # timed out, or the handler was cancelled
            self._withdraw(entry)
            if isinstance(exc, TimeoutError):
                raise ReadWaitTimeout(f"no read within {self.wait:g} s") from None
            raise

    def read_done(self, reserved: int, size: int) -> None:
        """A body read: its read is free, its ``reserved`` bytes cut to ``size`` (held until
        :meth:`release`)."""
        self.reads -= 1
        self.held -= reserved - size
        self._wake()

    def abandon(self, reserved: int) -> None:
        """A read that failed: its read and its ``reserved`` bytes are free."""
        self.reads -= 1
        self.held -= reserved
        self._wake()

    def release(self, size: int) -> None:
        """A body of ``size`` bytes answered: its bytes are free."""
        self.held -= size
        self._wake()

    def _fits(self, size: int) -> bool:
        return self.reads < self.max_reads and self.held + size <= self.max_bytes

    def _withdraw(self, entry: tuple[int, asyncio.Future[None]]) -> None:
        """An upload that stopped waiting: out of the queue, or its read given back if it
        was granted meanwhile."""
        future = entry[1]
        if future.done() and not future.cancelled():
            self.abandon(entry[0])
            return
        future.cancel()
        with contextlib.suppress(ValueError):  # already granted and out of the queue
            self._queue.remove(entry)
        self._wake()  # the next one may fit now

    def _wake(self) -> None:
        """Grant reads in arrival order while the first waiting upload fits."""
        queue = self._queue
        while queue:
            size, future = queue[0]
            if future.done():  # withdrawn
                queue.popleft()
                continue
            if not self._fits(size):
                return
            queue.popleft()
            self.reads += 1
            self.held += size
            future.set_result(None)


async def read_body(request: web.Request, gate: BodyGate) -> bytes:
    """The request body, read under ``gate`` (the caller calls ``gate.release(len(body))``
    once answered). Refuses (413, :class:`~rwrouter.errors.TooLargeError`) more than
    ``gate.limit`` bytes before reading when ``Content-Length`` says so, else while reading;
    (408, :class:`~rwrouter.errors.SlowBodyError`) a body that takes more than
    ``gate.timeout`` seconds to arrive once its read began. Raises :class:`ReadWaitTimeout`
    when no read came within ``gate.wait`` seconds, :class:`ClientGone` when the sender went
    away."""
    length, limit = request.content_length, gate.limit
    if length is not None and length > limit:
        raise TooLargeError(f"body of {length} bytes is over the limit of {limit}")
    reserved = limit if length is None else length
    await gate.enter(reserved)
    try:
        async with asyncio.timeout(gate.timeout):
            body = await request.read()
    except BaseException as exc:
        gate.abandon(reserved)
        if isinstance(exc, web.HTTPRequestEntityTooLarge):
            raise TooLargeError(f"body is over the limit of {limit} bytes") from None
        if isinstance(exc, TimeoutError):
            raise SlowBodyError(f"body not received within {gate.timeout:g} s") from None
        if isinstance(exc, ConnectionResetError):  # the sender went away
            raise ClientGone from None
        raise
    gate.read_done(reserved, len(body))
    return body
