"""A remote-write sink process: answers 204 and counts what it received.

``python -m bench.sink --name A [--port 0] [--digest]`` listens on 127.0.0.1 and prints one
line ``SINK <name> LISTENING <port>`` on stdout once ready.

- ``POST /api/v1/write``: a snappy-compressed remote write 1.0 ``WriteRequest``; parsed with the
  generated protobuf class (upb), series and samples counted, answered 204. A body that does not
  decode is answered 400 and counted in ``errors``; a request whose headers name another
  message (:func:`rwrouter.protocol.message_of`: an RW 2.0 ``Content-Type``, another
  encoding) is answered 415, as a remote write 1.0 receiver answers it, and counted in
  ``errors`` too. With ``--digest`` every sample is also hashed (:func:`sample_digest`; about
  2 us per sample: for checking content, not for timing runs).
- ``GET /stats``: JSON ``{"name", "requests", "series", "samples", "bytes", "errors",
  "content_types", "digest", "first_at", "last_at"}`` (counts since the last reset;
  ``bytes``: compressed body bytes; ``content_types``: requests by their ``Content-Type``;
  ``digest``: :func:`sample_digest` summed over the samples counted, as 16 hex digits, or
  null without ``--digest``; ``*_at``: ``time.monotonic()`` seconds of the first/last counted
  request, or null).
- ``POST /reset``: zero everything, answer 204. ``POST /reset?digest=1`` (or ``0``) also turns
  the hashing on (off) from then on, whatever ``--digest`` said.

Stops by itself on SIGTERM/SIGINT, or when its parent process dies (PR_SET_PDEATHSIG is set by the
runner), or after ``--max-seconds`` (default 3600).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import signal
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import cast

import snappy  # type: ignore[import-untyped,unused-ignore]
from aiohttp import web

from rwrouter.errors import UnsupportedError
from rwrouter.protocol import RW1_MESSAGE, message_of
from rwrouter.wire import remote_pb2, types_pb2

DIGEST_MASK = 2**64 - 1
_SAMPLE = struct.Struct("<dq")


def sample_digest(ts: types_pb2.TimeSeries) -> int:
    """Sum (mod 2**64) over the samples of ``ts`` of a 64-bit BLAKE2b of (its label set sorted
    by name, the sample's value bits, its timestamp): the same multiset of (labels, sample)
    gives the same sum whatever the order of requests, series, labels and samples, or how the
    samples are grouped into series."""
    key = repr(sorted((label.name, label.value) for label in ts.labels)).encode()
    total = 0
    for sample in ts.samples:
        h = hashlib.blake2b(key + _SAMPLE.pack(sample.value, sample.timestamp), digest_size=8)
        total += int.from_bytes(h.digest(), "little")
    return total & DIGEST_MASK


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
    content_types: dict[str, int] = field(default_factory=dict)
    digest: str | None = None
    first_at: float | None = None
    last_at: float | None = None


def count_body(body: bytes, digest: bool = False) -> tuple[int, int, int]:
    """(series, samples, digest) of one snappy-compressed ``WriteRequest`` body; the digest is
    the :func:`sample_digest` sum when ``digest``, else 0. Raises ValueError (or snappy's
    error) when it does not decode."""
    request = remote_pb2.WriteRequest()
    request.ParseFromString(snappy.uncompress(body))
    samples = total = 0
    for ts in request.timeseries:
        samples += len(ts.samples)
        if digest:
            total += sample_digest(ts)
    return len(request.timeseries), samples, total & DIGEST_MASK


def refusal(content_encoding: str | None, content_type: str | None) -> str | None:
    """Why a request with these headers is not remote write 1.0 with snappy (the 415 reason),
    or None when it is (:func:`rwrouter.protocol.message_of`)."""
    try:
        message = message_of(content_encoding, content_type)
    except UnsupportedError as exc:
        return f"remote write 1.0 only: {exc}"
    if message != RW1_MESSAGE:
        return f"remote write 1.0 only, not {message}"
    return None


def make_app(name: str, digest: bool = False) -> web.Application:
    """The sink's aiohttp application (``digest``: hash every sample, see the module
    docstring)."""

    hashing = digest

    def fresh() -> Counts:
        return Counts(name=name, digest=f"{0:016x}" if hashing else None)

    counts = fresh()
    app = web.Application(client_max_size=64 * 1024 * 1024)

    async def write(request: web.Request) -> web.Response:
        body = await request.read()
        content_type = request.headers.get("Content-Type", "")
        counts.content_types[content_type] = counts.content_types.get(content_type, 0) + 1
        refused = refusal(request.headers.get("Content-Encoding"), content_type)
        if refused:
            counts.errors += 1
            return web.Response(status=415, text=refused)
        try:
            series, samples, total = count_body(body, hashing)
        except Exception as exc:  # any decode error is the sender's fault: 400
            counts.errors += 1
            return web.Response(status=400, text=f"undecodable: {exc}")
        now = time.monotonic()
        if counts.digest is not None:
            counts.digest = f"{(int(counts.digest, 16) + total) & DIGEST_MASK:016x}"
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

    async def reset(request: web.Request) -> web.Response:
        nonlocal counts, hashing
        if "digest" in request.query:
            hashing = request.query["digest"] == "1"
        counts = fresh()
        return web.Response(status=204)

    app.router.add_post("/api/v1/write", write)
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)
    return app


async def serve(name: str, port: int, max_seconds: float, digest: bool = False) -> None:
    """Serve until SIGTERM/SIGINT or ``max_seconds``."""
    runner = web.AppRunner(make_app(name, digest), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    server = cast("asyncio.Server | None", site._server)  # what TCPSite.start() made
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
    parser.add_argument("--digest", action="store_true", help="hash every sample")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.name, args.port, args.max_seconds, args.digest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
