"""A remote-write sink process: answers 204 and counts what it received.

``python -m bench.sink --name A [--port 0]`` listens on 127.0.0.1 and prints one line
``SINK <name> LISTENING <port>`` on stdout once ready.

- ``POST /api/v1/write``: a snappy-compressed remote write 1.0 ``WriteRequest``; parsed with the
  generated protobuf class (upb), series and samples counted, answered 204. A body that does not
  decode is answered 400 and counted in ``errors``.
- ``GET /stats``: JSON ``{"name", "requests", "series", "samples", "bytes", "errors",
  "first_at", "last_at"}`` (counts since the last reset; ``bytes``: compressed body bytes;
  ``*_at``: ``time.monotonic()`` seconds of the first/last counted request, or null).
- ``POST /reset``: zero everything, answer 204.

Stops by itself on SIGTERM/SIGINT, or when its parent process dies (PR_SET_PDEATHSIG is set by the
runner), or after ``--max-seconds`` (default 3600).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import snappy
from aiohttp import web

from rwrouter.wire import remote_pb2


@dataclass(slots=True)
class Counts:
    """What a sink received since its last reset (counts; ``bytes`` compressed; times in
    ``time.monotonic()`` seconds)."""

    name: str
    requests: int = 0
    series: int = 0
    samples: int = 0
    bytes: int = 0
    errors: int = 0
    first_at: float | None = None
    last_at: float | None = None


def count_body(body: bytes) -> tuple[int, int]:
    """(series, samples) in one snappy-compressed ``WriteRequest`` body. Raises ValueError
    (or snappy's error) when it does not decode."""
    request = remote_pb2.WriteRequest()
    request.ParseFromString(snappy.uncompress(body))
    samples = 0
    for ts in request.timeseries:
        samples += len(ts.samples)
    return len(request.timeseries), samples


def make_app(name: str) -> web.Application:
    """The sink's aiohttp application."""
    counts = Counts(name=name)
    app = web.Application(client_max_size=64 * 1024 * 1024)

    async def write(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            series, samples = count_body(body)
        except Exception as exc:  # any decode error is the sender's fault: 400
            counts.errors += 1
            return web.Response(status=400, text=f"undecodable: {exc}")
        now = time.monotonic()
        counts.requests += 1
        counts.series += series
        counts.samples += samples
        counts.bytes += len(body)
        if counts.first_at is None:
            counts.first_at = now
        counts.last_at = now
        return web.Response(status=204)

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(asdict(counts))

    async def reset(_: web.Request) -> web.Response:
        nonlocal counts
        counts = Counts(name=name)
        return web.Response(status=204)

    app.router.add_post("/api/v1/write", write)
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)
    return app


async def serve(name: str, port: int, max_seconds: float) -> None:
    """Serve until SIGTERM/SIGINT or ``max_seconds``."""
    runner = web.AppRunner(make_app(name), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    server = site._server
    bound = server.sockets[0].getsockname()[1] if server and server.sockets else port
    print(f"SINK {name} LISTENING {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), timeout=max_seconds)
    except TimeoutError:
        print(f"sink {name}: --max-seconds reached, stopping", file=sys.stderr)
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.sink", description=__doc__)
    parser.add_argument("--name", required=True)
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.name, args.port, args.max_seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
