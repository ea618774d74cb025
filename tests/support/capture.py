"""A remote write capture server for tests: records what a sender (Prometheus, rwrouter) sent.

Design choice: the aiohttp server runs **in its own thread with its own event loop**, so the same
object serves sync tests (e.g. the conformance test driving a real Prometheus) and async tests
(the recording methods are thread-safe and never touch the caller's loop). Use it as a context
manager or call ``start()`` / ``stop()``; a session- or module-scoped fixture is the usual shape::

    with CaptureServer() as capture:
        url = capture.url("/ruleset_a")       # POST remote write bodies here
        ...
        capture.label_sets("/ruleset_a")      # what arrived, in order

It binds 127.0.0.1 on a free port, accepts POSTs on any path, answers 200 unless statuses were
scripted for that path (``script(path, [500, 500])`` answers 500 twice, then 200). Every request
is recorded with its path, headers, raw body and — if it decodes as snappy + ``WriteRequest`` —
the decoded request, the raw protobuf and the exact 8 bytes of each sample value.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from rwrouter.wire import remote_pb2, types_pb2
from tests.support.series import LabelSet, decode, raw_sample_values


@dataclass(frozen=True)
class Received:
    """One request as received. ``request``/``raw`` are ``None`` if the body did not decode."""

    path: str
    headers: dict[str, str]
    body: bytes
    request: remote_pb2.WriteRequest | None
    raw: bytes | None
    status: int
    error: str | None = None
    values: list[list[bytes]] = field(default_factory=list)

    def label_sets(self) -> list[LabelSet]:
        if self.request is None:
            return []
        return [tuple((lb.name, lb.value) for lb in ts.labels) for ts in self.request.timeseries]


class CaptureServer:
    """Remote write receiver that records requests per path (see the module docstring)."""

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        self._host = host
        self._lock = threading.Lock()
        self._received: dict[str, list[Received]] = defaultdict(list)
        self._scripts: dict[str, deque[int]] = defaultdict(deque)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # lifecycle -----------------------------------------------------------------------------
    def start(self, *, timeout: float = 10.0) -> CaptureServer:
        started = threading.Event()
        errors: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._run, args=(started, errors), name="capture-server", daemon=True
        )
        self._thread.start()
        if not started.wait(timeout):
            raise RuntimeError("capture server did not start")
        if errors:
            raise errors[0]
        return self

    def _run(self, started: threading.Event, errors: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._start_site())
        except BaseException as exc:  # reported to start()
            errors.append(exc)
            started.set()
            loop.close()
            return
        started.set()
        loop.run_forever()
        loop.close()

    async def _start_site(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = self._runner = None

    def __enter__(self) -> CaptureServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # handling ------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        path = request.path
        with self._lock:
            script = self._scripts[path]
            status = script.popleft() if script else 200
        decoded: remote_pb2.WriteRequest | None = None
        raw: bytes | None = None
        error = None
        values: list[list[bytes]] = []
        try:
            decoded, raw = decode(body)
            values = raw_sample_values(raw)
        except Exception as exc:  # record undecodable bodies too
            error = f"{type(exc).__name__}: {exc}"
        record = Received(path, dict(request.headers), body, decoded, raw, status, error, values)
        with self._lock:
            self._received[path].append(record)
        return web.Response(status=status, text="" if status < 300 else f"scripted {status}")

    # scripting and inspection -------------------------------------------------------------
    def url(self, path: str = "/") -> str:
        """Absolute URL of ``path`` on this server."""
        return f"http://{self._host}:{self.port}/{path.lstrip('/')}"

    def script(self, path: str, statuses: list[int]) -> None:
        """Answer the next requests on ``path`` with ``statuses`` in order, then 200."""
        with self._lock:
            self._scripts[path].extend(statuses)

    def requests(self, path: str) -> list[Received]:
        with self._lock:
            return list(self._received.get(path, ()))

    def paths(self) -> list[str]:
        with self._lock:
            return sorted(self._received)

    def label_sets(self, path: str, *, accepted_only: bool = True) -> list[LabelSet]:
        """Label sets of every series received on ``path``, in order (2xx answers only)."""
        return [
            labels
            for received in self.requests(path)
            if not accepted_only or received.status < 300
            for labels in received.label_sets()
        ]

    def sample_count(self, path: str, *, accepted_only: bool = True) -> int:
        return sum(
            len(ts.samples)
            for received in self.requests(path)
            if received.request is not None and (not accepted_only or received.status < 300)
            for ts in received.request.timeseries
        )

    def metadata(self, path: str) -> list[types_pb2.MetricMetadata]:
        return [
            md
            for received in self.requests(path)
            if received.request is not None
            for md in received.request.metadata
        ]

    def clear(self) -> None:
        with self._lock:
            self._received.clear()
            self._scripts.clear()

    def wait_for(
        self, predicate: Callable[[], bool], *, timeout: float = 10.0, interval: float = 0.02
    ) -> None:
        """Poll ``predicate`` until it is true; ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            time.sleep(interval)
