"""Faulty peers for the delivery-guarantee tests (loopback only).

- :class:`BlackholeProxy`: a TCP front of a real destination. While ``hanging`` it accepts
  connections and reads everything sent, but never writes a byte (a destination that never
  answers); once switched off it forwards bytes both ways to the destination behind it.
- :class:`StsRecorder`: an HTTP front of moto's STS server that records the web identity
  tokens presented and hands every key STS issues to a callback (so the workspace double can
  accept keys it could not know in advance).
- :class:`SizeRecordingDouble`: the workspace double, also recording the compressed and the
  declared (uncompressed) size of every signed request body it examines.
- :class:`Sink`: a plain remote write receiver that can fail on demand (a status for every
  request) or roll back requests carrying a poison series (400), storing what it accepts.
- :func:`points`, :func:`capture_points`, :func:`double_points`: what was sent or stored, as
  unique (label set, timestamp ms) pairs, to count delivery without double counting.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import parse_qs

import aiohttp
from aiohttp import web

from rwrouter.doubles.sigv4_verify import Rejection
from rwrouter.doubles.workspace import WorkspaceDouble
from rwrouter.doubles.workspace_store import Outcome
from rwrouter.wire import declared_size
from tests.support.capture import CaptureServer
from tests.support.series import LabelSet, Series, decode, label_set

Point = tuple[LabelSet, int]  # (sorted label set, timestamp ms)


def points(series: Iterable[Series]) -> set[Point]:
    """The (label set, timestamp) pairs of series built for sending."""
    return {(label_set(s.labels), ts) for s in series for ts, _ in s.samples}


def capture_points(capture: CaptureServer, path: str) -> list[Point]:
    """Every (label set, timestamp) a capture server accepted (2xx) on ``path``, repeats kept."""
    return [
        (tuple((lb.name, lb.value) for lb in ts.labels), sample.timestamp)
        for received in capture.requests(path)
        if received.request is not None and received.status < 300
        for ts in received.request.timeseries
        for sample in ts.samples
    ]


def double_points(double: WorkspaceDouble, workspace_id: str = "ws-1") -> set[Point]:
    """Every (label set, timestamp) the workspace double stored (float samples)."""
    return {
        (labels, ts)
        for labels, stored in double.series(workspace_id).items()
        for ts in stored.samples
    }


class BlackholeProxy:
    """TCP proxy on 127.0.0.1 to ``backend_port`` that swallows requests while ``hanging``.

    ``hung``: connections accepted while hanging; ``swallowed``: bytes read from them (the
    request bytes that were never answered). ``forwarded``: connections passed through.
    """

    def __init__(self, *, backend_port: int, hanging: bool = True) -> None:
        self.backend_port = backend_port
        self.hanging = hanging
        self.hung = self.swallowed = self.forwarded = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()
        self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            if self.hanging:
                self.hung += 1
                while data := await reader.read(65536):
                    self.swallowed += len(data)
                return
            self.forwarded += 1
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.backend_port)
            self._writers.add(up_writer)
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                self._writers.discard(up_writer)
                up_writer.close()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy bytes until end of file, then half-close ``sink``."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()


_STS_NS = "{https://sts.amazonaws.com/doc/2011-06-15/}"


@dataclass(frozen=True)
class Issued:
    """Temporary keys STS handed out; ``expires_at`` in unix seconds."""

    access_key: str
    secret_key: str
    session_token: str
    expires_at: float


class StsRecorder:
    """HTTP front of an STS endpoint (moto's server) on 127.0.0.1: forwards every request,
    records the ``WebIdentityToken`` of each call (``tokens``) and the keys issued (``issued``),
    and calls ``on_issued`` with each new key before answering (on the event loop)."""

    def __init__(self, *, sts_url: str, on_issued: Callable[[Issued], None]) -> None:
        self.sts_url = sts_url
        self.on_issued = on_issued
        self.tokens: list[str] = []
        self.issued: list[Issued] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        assert self._session is not None
        body = await request.read()
        form = parse_qs(body.decode())
        self.tokens.extend(form.get("WebIdentityToken", []))
        headers = {"Content-Type": request.headers.get("Content-Type", "")}
        async with self._session.post(self.sts_url + "/", data=body, headers=headers) as resp:
            answer = await resp.read()
            status, content_type = resp.status, resp.headers.get("Content-Type", "text/xml")
        if status == 200:
            issued = _issued(answer)
            if issued is not None:
                self.issued.append(issued)
                self.on_issued(issued)
        return web.Response(status=status, body=answer, headers={"Content-Type": content_type})


def _issued(xml: bytes) -> Issued | None:
    """The Credentials element of an STS answer, if it has one."""
    root = ET.fromstring(xml)
    found = root.find(f".//{_STS_NS}Credentials")
    if found is None:
        return None

    def text(name: str) -> str:
        value = found.findtext(f"{_STS_NS}{name}")
        assert value, f"STS answer without {name}"
        return value

    expires = dt.datetime.fromisoformat(text("Expiration").replace("Z", "+00:00"))
    return Issued(
        text("AccessKeyId"), text("SecretAccessKey"), text("SessionToken"), expires.timestamp()
    )


class SizeRecordingDouble(WorkspaceDouble):
    """The workspace double, recording ``(compressed, declared uncompressed)`` body sizes in
    bytes of every request that passed the signature checks (``body_sizes``, arrival order)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.body_sizes: list[tuple[int, int]] = []

    def _ingest(self, workspace_id: str, body: bytes, content_type: str) -> Rejection | Outcome:
        self.body_sizes.append((len(body), declared_size(body)))
        return super()._ingest(workspace_id, body, content_type)


class Sink:
    """A remote write receiver on 127.0.0.1, on the test's event loop.

    It answers ``fail_status`` (with ``fail_text``) while ``failing`` is true; else 400 for a
    request carrying any series with the label ``poison`` (the whole request is rolled back,
    as Prometheus does for one bad sample); else it stores the request and answers 200.
    ``stored``: accepted (label set, timestamp) pairs, repeats kept; ``attempts``: (monotonic
    time, status) of every request.
    """

    def __init__(self, *, fail_status: int = 503, fail_text: str = "unavailable") -> None:
        self.failing = False
        self.fail_status, self.fail_text = fail_status, fail_text
        self.stored: list[Point] = []
        self.attempts: list[tuple[float, int]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/api/v1/write"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        decoded, _ = decode(await request.read())
        if self.failing:
            return self._answer(self.fail_status, self.fail_text)
        received = [
            (tuple((lb.name, lb.value) for lb in ts.labels), sample.timestamp)
            for ts in decoded.timeseries
            for sample in ts.samples
        ]
        if any("poison" in dict(labels) for labels, _ in received):
            return self._answer(400, "out of bounds: poison series")
        self.stored.extend(received)
        return self._answer(200, "")

    def _answer(self, status: int, text: str) -> web.Response:
        self.attempts.append((time.monotonic(), status))
        return web.Response(status=status, text=text)
