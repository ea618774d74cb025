"""The loopback attacks of issue 14 as regression tests, against rwrouter as a subprocess:
a memory flood (bodies held but their last byte), slowloris (half-sent headers), idle
keep-alive connections, more connections than ``server.max_connections``, and file-descriptor
exhaustion under a low ``RLIMIT_NOFILE``. Each is bounded in time (short timeouts configured),
polls instead of sleeping, and prints its figure (``pytest -s`` shows it)."""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.attack import (
    Pump,
    Router,
    closed_by_peer,
    connect,
    held,
    small_body,
    upload_head,
)
from tests.support.capture import CaptureServer
from tests.support.polling import wait_for

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def sink() -> Iterator[str]:
    with CaptureServer() as server:
        yield server.url("/sink")


@pytest.fixture
def router_factory(tmp_path: Path) -> Iterator[list[Router]]:
    started: list[Router] = []
    yield started
    for router in started:
        router.stop()


def start(started: list[Router], tmp: Path, sink: str, server: str, **kw: int) -> Router:
    router = Router(tmp, server=server, destination=sink, **kw)
    started.append(router)
    return router


FLOOD_CONNECTIONS = 40
FLOOD_BODY = 30_000_000  # bytes declared; each connection sends all but the last one
FLOOD_BUFFERED = 64 * MIB  # server.max_buffered_body_bytes: two flood bodies fit


def test_memory_flood_holds_rss_flat(
    tmp_path: Path, sink: str, router_factory: list[Router]
) -> None:
    router = start(
        router_factory,
        tmp_path,
        sink,
        f"""
max_concurrent_reads: 2
max_buffered_body_bytes: {FLOOD_BUFFERED}
read_wait_timeout: 6s
read_timeout: 60s
""",
    )
    baseline = router.rss()
    head = upload_head(FLOOD_BODY)
    with held([connect(router.port) for _ in range(FLOOD_CONNECTIONS)]) as socks:
        pump = Pump(socks, [head + bytes(FLOOD_BODY - 1)] * FLOOD_CONNECTIONS)
        pump.run_for(1.0)
        wait_for(
            lambda: router.metric("rwrouter_body_reads_waiting") == FLOOD_CONNECTIONS - 2,
            timeout=10,
            what="the uploads beyond max_buffered_body_bytes waiting",
        )
        pump.run_for(0.5)  # the two being read get their bytes; the others stay unread
        peak = router.rss()
        reads = router.metric("rwrouter_body_reads")
        # The next write waits for a read while the two hold theirs: 503 + Retry-After.
        status, headers = router.write(small_body())
        bound = baseline + FLOOD_BUFFERED * 5 // 4 + FLOOD_CONNECTIONS * MIB + 32 * MIB
        print(
            f"\nmemory flood: {FLOOD_CONNECTIONS} x {FLOOD_BODY} bytes minus 1 sent "
            f"{sum(pump.sent) / MIB:.0f} MiB in all; RSS {baseline / MIB:.0f} MiB -> "
            f"{peak / MIB:.0f} MiB (bound {bound / MIB:.0f} MiB); bodies being read {reads:.0f}; "
            f"next write while they hold: {status} Retry-After={headers.get('Retry-After')}"
        )
        assert peak < bound
        assert reads == 2
        assert (status, headers.get("Retry-After")) == (503, "5")
    wait_for(
        lambda: router.metric("rwrouter_body_buffered_bytes") == 0,
        timeout=10,
        what="the flood's bodies released once its connections closed",
    )
    assert router.write(small_body())[0] == 204
    refused = router.metric("rwrouter_refused_requests_total", reason="read_wait")
    print(f"memory flood: after: 204; refused read_wait {refused:.0f}")
    assert refused >= FLOOD_CONNECTIONS - 2


SLOWLORIS = [
    # id, bytes sent on each connection, after a first complete write on it
    ("partial_headers", b"POST /api/v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: ", False),
    ("silent", b"", False),
    ("keep_alive_partial_headers", b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\n", True),
]


@pytest.mark.parametrize(
    ("sent", "after_write"), [c[1:] for c in SLOWLORIS], ids=[c[0] for c in SLOWLORIS]
)
def test_slowloris_connections_are_closed(
    tmp_path: Path, sink: str, router_factory: list[Router], sent: bytes, after_write: bool
) -> None:
    router = start(router_factory, tmp_path, sink, "header_read_timeout: 1s\nidle_timeout: 30s")
    count = 50
    body = small_body()
    with held([connect(router.port) for _ in range(count)]) as socks:
        opened = time.monotonic()
        for sock in socks:
            if after_write:
                sock.setblocking(True)
                sock.sendall(upload_head(len(body)) + body)
                sock.recv(4096)  # the 204
                sock.setblocking(False)
            sock.send(sent)
        # A byte a while does not keep them open: the deadline runs from the request's start.
        for sock in socks:
            if sent:
                sock.send(b"b")
        wait_for(
            lambda: all(closed_by_peer(s) for s in socks),
            timeout=8,
            what="slowloris connections closed",
            interval=0.05,
        )
        took = time.monotonic() - opened
    closed = router.metric("rwrouter_connections_closed_total", reason="header_timeout")
    print(f"\nslowloris: {count} connections closed within {took:.1f} s; counted {closed:.0f}")
    assert closed == count
    assert router.write(body)[0] == 204


def test_idle_keep_alive_connection_is_closed(
    tmp_path: Path, sink: str, router_factory: list[Router]
) -> None:
    router = start(router_factory, tmp_path, sink, "idle_timeout: 1s\nheader_read_timeout: 10s")
    body = small_body()
    sock = socket.create_connection(("127.0.0.1", router.port), timeout=5)
    with held([sock]):
        sock.sendall(upload_head(len(body)) + body)
        assert sock.recv(4096).startswith(b"HTTP/1.1 204")
        answered = time.monotonic()
        sock.setblocking(False)
        wait_for(lambda: closed_by_peer(sock), timeout=6, what="idle close", interval=0.05)
        idle = time.monotonic() - answered
    closed = router.metric("rwrouter_connections_closed_total", reason="idle_timeout")
    print(f"\nidle keep-alive connection closed after {idle:.1f} s (idle_timeout 1s)")
    assert 0.8 <= idle < 5 and closed == 1


def test_connections_over_max_are_closed_and_counted(
    tmp_path: Path, sink: str, router_factory: list[Router]
) -> None:
    router = start(router_factory, tmp_path, sink, "max_connections: 10\nheader_read_timeout: 30s")
    with held([connect(router.port) for _ in range(15)]) as socks:
        wait_for(
            lambda: sum(closed_by_peer(s) for s in socks) >= 5,
            timeout=5,
            what="5 connections over max_connections closed",
            interval=0.05,
        )
        # Held open: the probe below is refused as the sixth one over the bound.
        assert sum(closed_by_peer(s) for s in socks) == 5
        with pytest.raises((ConnectionError, OSError)):
            router.get("/-/healthy")
        socks[-1].close()
        open_ones = [s for s in socks if s.fileno() != -1 and not closed_by_peer(s)]
        for sock in open_ones:
            sock.close()
    wait_for(lambda: router.metric("rwrouter_connections") == 1, timeout=5, what="all closed")
    refused = router.metric("rwrouter_connections_refused_total", reason="max_connections")
    print(f"\nmax_connections 10: 15 opened -> 5 closed at once; refused counted {refused:.0f}")
    assert refused == 6  # the 5 and the probe
    assert router.write(small_body())[0] == 204


NOFILE = 160  # RLIMIT_NOFILE of the router in the fd exhaustion test


def test_fd_exhaustion_is_logged_once_per_episode(
    tmp_path: Path, sink: str, router_factory: list[Router]
) -> None:
    router = start(
        router_factory,
        tmp_path,
        sink,
        "max_connections: 1000\nheader_read_timeout: 60s",
        nofile=NOFILE,
    )
    lines_before = router.log().count("\n")
    episodes = 2
    for episode in range(episodes):
        with held([connect(router.port) for _ in range(NOFILE + 40)]):
            wait_for(
                functools.partial(_logged, router, "cannot accept connections", episode),
                timeout=10,
                what="the accept failure logged",
            )
            # The attack lasts a few of asyncio's accept retries (one a second); nothing of
            # the router can be observed meanwhile (no descriptor for a scrape).
            time.sleep(2.5)
        wait_for(
            lambda: (
                router.log().count("accepting connections again")
                == router.log().count("cannot accept connections")
            ),
            timeout=10,
            what="accepts working again",
        )
    log = router.log()
    failures = router.metric("rwrouter_accept_errors_total")
    started = log.count("cannot accept connections")
    lines = log.count("\n") - lines_before
    print(
        f"\nfd exhaustion (RLIMIT_NOFILE {NOFILE}): {episodes} episodes, {failures:.0f} failed "
        f"accepts, {started} 'cannot accept' lines, {lines} log lines in all"
    )
    assert started == episodes and "out of system resource" not in log
    assert failures > episodes
    assert router.write(small_body())[0] == 204


def _logged(router: Router, text: str, times: int) -> bool:
    return router.log().count(text) > times
