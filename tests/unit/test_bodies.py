"""The bound on bodies (rwrouter.server.bodies.BodyGate): reads and bytes admitted at once,
waiting first come first served, the wait bounded, the counters back to zero whatever
happens. No sockets: uploads are coroutines entering the gate."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from rwrouter.config import ServerConfig
from rwrouter.server.bodies import BodyGate, ReadWaitTimeout


def gate(*, reads: int = 2, bytes_: int = 100, wait: float = 5.0) -> BodyGate:
    return BodyGate(max_reads=reads, max_bytes=bytes_, wait=wait, limit=100, timeout=1.0)


async def entered(g: BodyGate, size: int) -> asyncio.Task[None]:
    """An upload of ``size`` bytes entering ``g``, run until it waits or is admitted."""
    task = asyncio.create_task(g.enter(size))
    await asyncio.sleep(0)  # one loop turn: admitted at once, or queued
    return task


ADMITTED = [
    # id, max reads, max bytes, sizes entered one after the other, how many get in at once
    ("under_both", 2, 100, [40, 40], 2),
    ("reads_full", 2, 100, [10, 10, 10], 2),
    ("bytes_full", 4, 100, [60, 60], 1),
    ("exactly_the_bytes", 4, 100, [50, 50], 2),
    ("fifo_small_behind_large", 4, 100, [60, 60, 10], 1),
]


@pytest.mark.parametrize(
    ("reads", "bytes_", "sizes", "admitted"),
    [c[1:] for c in ADMITTED],
    ids=[c[0] for c in ADMITTED],
)
async def test_what_gets_in_at_once(
    reads: int, bytes_: int, sizes: list[int], admitted: int
) -> None:
    g = gate(reads=reads, bytes_=bytes_)
    tasks = [await entered(g, size) for size in sizes]
    assert [t.done() for t in tasks] == [True] * admitted + [False] * (len(sizes) - admitted)
    assert (g.reads, g.held, g.waiting) == (admitted, sum(sizes[:admitted]), len(sizes) - admitted)
    for task in tasks[admitted:]:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert g.waiting == 0


async def test_a_finished_read_lets_the_next_one_in() -> None:
    g = gate(reads=1)
    await g.enter(30)
    waiting = await entered(g, 20)
    assert not waiting.done()
    g.read_done(30, 25)  # read: 25 bytes held until answered
    await waiting
    assert (g.reads, g.held) == (1, 25 + 20)
    g.release(25)
    g.abandon(20)
    assert (g.reads, g.held, g.waiting) == (0, 0, 0)


async def test_released_bytes_let_the_next_one_in() -> None:
    g = gate(reads=4, bytes_=100)
    await g.enter(80)
    g.read_done(80, 80)
    waiting = await entered(g, 50)
    assert not waiting.done()
    g.release(80)
    await waiting
    assert (g.reads, g.held) == (1, 50)


async def test_the_wait_is_bounded() -> None:
    g = gate(reads=1, wait=0.05)
    await g.enter(10)
    with pytest.raises(ReadWaitTimeout, match=r"no read within 0\.05 s"):
        await g.enter(10)
    assert (g.reads, g.held, g.waiting) == (1, 10, 0)


async def test_a_timed_out_head_lets_those_behind_it_in() -> None:
    g = gate(reads=4, bytes_=100, wait=0.2)
    await g.enter(60)
    large = asyncio.create_task(g.enter(60))  # does not fit: waits, then times out
    await asyncio.sleep(0.1)  # the small one comes later: its own wait ends later
    small = await entered(g, 10)  # fits, but waits behind the large one
    assert not small.done()
    with pytest.raises(ReadWaitTimeout):
        await large
    await small
    assert (g.reads, g.held, g.waiting) == (2, 70, 0)


async def test_a_cancelled_upload_leaves_no_trace() -> None:
    g = gate(reads=1)
    await g.enter(10)
    waiting = await entered(g, 10)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    g.abandon(10)
    assert (g.reads, g.held, g.waiting) == (0, 0, 0)


def test_the_gate_of_the_server_section() -> None:
    settings = ServerConfig(max_concurrent_reads=3, max_buffered_body_bytes=1 << 30)
    g = BodyGate.of(settings)
    assert (g.max_reads, g.max_bytes, g.wait, g.limit, g.timeout) == (
        3,
        1 << 30,
        settings.read_wait_timeout,
        settings.max_request_bytes,
        settings.read_timeout,
    )


def test_aiohttp_still_has_what_the_connection_bounds_read() -> None:
    # rwrouter.server.connections.BoundedHandler reads two attributes of aiohttp's connection
    # protocol and wraps one of its methods: an aiohttp upgrade that renames them fails here.
    assert {"_waiter", "_request_count"} <= set(web.RequestHandler.__slots__)
    assert callable(web.RequestHandler._process_keepalive)
