"""Load driver: replays pre-encoded remote write requests to a URL (a separate process).

``python -m bench.driver --url URL --workload CACHE --senders N --out RESULT.json [--go-stdin]
[--input rw1|rw2]``

Closed loop: ``N`` connections (aiohttp client, keep-alive); each sends the next request in
order as soon as its previous one was answered. A 503 or 429 answer is retried by the same
connection after its ``Retry-After`` (seconds; 1 s when absent or unreadable), counted in
``retries``, so nothing is lost; connection errors and other 5xx answers are retried after a
short backoff and counted in ``errors``; another status (4xx) is final and counted in ``lost``.

With ``--go-stdin`` the driver loads the bodies, opens its session, prints ``DRIVER READY`` and
waits for a line on stdin before sending (so the runner can take its CPU baseline just before
the load starts). With ``--pause-after N`` it sends the first N bodies (all answered), prints
``DRIVER PAUSED`` and waits for another line before the rest (the runner reads the router's
CPU between the two phases: a first scrape that primes the router, then the measured ones).

The result (JSON, times in seconds unless the key says ``_ms``): ``requests`` (answered 2xx),
``attempts``, ``retries`` (503/429), ``errors`` (connection errors, other 5xx), ``lost`` (final
refusals), ``samples`` (in 2xx-answered requests), ``p50_ms``, ``p90_ms``, ``p99_ms``,
``max_ms`` (latency of every attempt, from sending the request to reading the answer),
``wall_seconds`` (first send to last answer), ``started_unix``, ``ended_unix``, ``phases``
(per phase: ``requests``, ``p50_ms``, ``p99_ms``, ``wall_seconds``; one phase without a pause).

``--input`` names the protobuf message of the bodies (``rw1``: ``prometheus.WriteRequest``,
the default; ``rw2``: ``io.prometheus.write.v2.Request``); the fixed headers are
:func:`rwrouter.protocol.request_headers` of it. The ``X-Prometheus-Remote-Write-*-Written``
headers of every 2xx answer are checked against what the body carried (its samples, no
histograms, no exemplars): ``written_exact`` counts the answers that had them exact,
``written_missing`` the 2xx answers without them and ``written_wrong`` those with other
counts. An RW 2.0 sender treats a 2xx without them as a failure (RW 2.0 spec, "Required
Written Response Headers"); for RW 1.0 they are optional (absent is fine, present must be
exact). Each of these answers still counts as answered (``requests``); the runner fails the
run on them.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path

import aiohttp

from bench.workload import load
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE, Written, request_headers

MESSAGES = {"rw1": RW1_MESSAGE, "rw2": RW2_MESSAGE}
USER_AGENT = "rwrouter-bench-driver/1"
MAX_ATTEMPTS = 50  # per request, for errors other than 503/429
MAX_RETRY_AFTER = 30.0  # seconds: cap of a Retry-After we honour


@dataclass(slots=True)
class Result:
    """What the driver did (see the module docstring for units)."""

    url: str
    senders: int
    message: str = RW1_MESSAGE
    requests: int = 0
    attempts: int = 0
    retries: int = 0
    errors: int = 0
    lost: int = 0
    samples: int = 0
    written_exact: int = 0
    written_missing: int = 0
    written_wrong: int = 0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    wall_seconds: float = 0.0
    started_unix: float = 0.0
    ended_unix: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    phases: list[dict[str, float]] = field(default_factory=list)  # one, or two with a pause


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of already sorted values; 0 when empty."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def retry_after_seconds(value: str | None) -> float:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or HTTP date); 1 s when
    absent or unreadable; capped at :data:`MAX_RETRY_AFTER`."""
    if not value:
        return 1.0
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return 1.0
    return min(MAX_RETRY_AFTER, max(0.0, seconds))


def headers_for(message: str) -> dict[str, str]:
    """The request headers of a body carrying ``message`` (a :data:`MESSAGES` value)."""
    return {**request_headers(message), "User-Agent": USER_AGENT}


def check_written(result: Result, answered: Written | None, samples: int) -> None:
    """Count one 2xx answer's Written headers (``answered``; None when absent) against the
    ``samples`` its body carried (see the module docstring)."""
    if answered is None:
        if result.message == RW2_MESSAGE:
            result.written_missing += 1
    elif answered == Written(samples=samples):
        result.written_exact += 1
    else:
        result.written_wrong += 1


async def run(
    url: str,
    bodies: Sequence[bytes],
    samples_per_body: Sequence[int],
    senders: int,
    go_stdin: bool,
    request_timeout: float,
    message: str = RW1_MESSAGE,
    pause_after: int | None = None,
) -> Result:
    """Send every body once (retrying as described), ``senders`` at a time, with the headers
    of ``message``; with ``pause_after`` N, the first N bodies, then ``DRIVER PAUSED`` on
    stdout and a line on stdin before the rest (two phases in ``Result.phases``)."""
    result = Result(url=url, senders=senders, message=message)
    headers = headers_for(message)
    latencies: list[float] = []
    timeout = aiohttp.ClientTimeout(total=request_timeout)
    connector = aiohttp.TCPConnector(limit=senders, force_close=False)
    cuts = (
        [0, len(bodies)] if pause_after is None else [0, min(pause_after, len(bodies)), len(bodies)]
    )
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if go_stdin:
            print("DRIVER READY", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        result.started_unix = time.time()
        t_start = time.perf_counter()
        for phase, (lo, hi) in enumerate(itertools.pairwise(cuts)):
            if phase:
                print("DRIVER PAUSED", flush=True)
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            t_phase, first = time.perf_counter(), len(latencies)
            queue = iter(range(lo, hi))
            await asyncio.gather(
                *(
                    _sender(
                        session, url, headers, bodies, samples_per_body, queue, result, latencies
                    )
                    for _ in range(senders)
                )
            )
            result.phases.append(_phase(latencies[first:], hi - lo, time.perf_counter() - t_phase))
        result.wall_seconds = time.perf_counter() - t_start
        result.ended_unix = time.time()
    latencies.sort()
    result.p50_ms = percentile(latencies, 50) * 1000
    result.p90_ms = percentile(latencies, 90) * 1000
    result.p99_ms = percentile(latencies, 99) * 1000
    result.max_ms = (latencies[-1] if latencies else 0.0) * 1000
    return result


def _phase(latencies: list[float], requests: int, wall: float) -> dict[str, float]:
    """One phase's figures: requests, p50/p99 ms of its attempts, wall seconds."""
    ordered = sorted(latencies)
    return {
        "requests": requests,
        "p50_ms": percentile(ordered, 50) * 1000,
        "p99_ms": percentile(ordered, 99) * 1000,
        "wall_seconds": wall,
    }


async def _sender(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    bodies: Sequence[bytes],
    samples_per_body: Sequence[int],
    queue: Iterator[int],
    result: Result,
    latencies: list[float],
) -> None:
    """One connection's closed loop: the next body of ``queue`` until it is empty."""
    for i in queue:
        failures = 0
        while True:
            result.attempts += 1
            t0 = time.perf_counter()
            try:
                async with session.post(url, data=bodies[i], headers=headers) as resp:
                    await resp.read()
                    status = resp.status
                    retry_after = resp.headers.get("Retry-After")
                    written = Written.parse(resp.headers)
            except (aiohttp.ClientError, TimeoutError):
                status, retry_after, written = 0, None, None
            latencies.append(time.perf_counter() - t0)
            key = str(status)
            result.statuses[key] = result.statuses.get(key, 0) + 1
            if 200 <= status < 300:
                result.requests += 1
                result.samples += samples_per_body[i]
                check_written(result, written, samples_per_body[i])
                break
            if status in (429, 503):
                result.retries += 1
                await asyncio.sleep(retry_after_seconds(retry_after))
                continue
            if status == 0 or status >= 500:
                result.errors += 1
                failures += 1
                if failures < MAX_ATTEMPTS:
                    await asyncio.sleep(min(2.0, 0.05 * 2**failures))
                    continue
            result.lost += 1
            break


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; exit status 0 when every request was answered 2xx and no
    answer's Written headers were wrong (or, for RW 2.0, missing)."""
    parser = argparse.ArgumentParser(prog="python -m bench.driver", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--workload", type=Path, required=True, help="cache file (workload.py)")
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--go-stdin", action="store_true")
    parser.add_argument("--request-timeout", type=float, default=60.0, help="seconds")
    parser.add_argument(
        "--input",
        choices=sorted(MESSAGES),
        default="rw1",
        help="protobuf message of the bodies (default rw1)",
    )
    parser.add_argument(
        "--pause-after",
        type=int,
        default=None,
        help="send this many bodies, print DRIVER PAUSED, wait for a line on stdin, send the rest",
    )
    args = parser.parse_args(argv)
    workload = load(args.workload)
    result = asyncio.run(
        run(
            args.url,
            workload.bodies,
            workload.samples_per_body,
            args.senders,
            args.go_stdin,
            args.request_timeout,
            MESSAGES[args.input],
            args.pause_after,
        )
    )
    args.out.write_text(json.dumps(asdict(result), indent=2))
    bad = result.lost + result.written_missing + result.written_wrong
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
