"""``rwrouter capture``: a remote write receiver that records every request it accepts in a
capture file (:mod:`rwrouter.audit.capture`), for ``rwrouter audit --capture`` to count offline
under any configuration — the "audit first" step without rwrouter in the write path.

Point a Prometheus ``remote_write`` entry at it for a while (an hour of a fleet's traffic holds
every series that comes at least hourly). It takes remote write 1.0 and 2.0 as the router does
(:func:`rwrouter.protocol.message_of`) and answers like rwrouter's receive side, without
routing anything: 204; 415 for another encoding, content type or ``proto=``; 413 over
``server.max_request_bytes`` / ``max_decoded_bytes``; 408 for a slow body; 400 for a body that
is not a snappy block, or an RW 2.0 request that does not convert
(:mod:`rwrouter.wire.rw2_in`). Every answer to an RW 2.0 request carries the
``X-Prometheus-Remote-Write-*-Written`` headers (what it carried on 204, zeros otherwise). An
RW 2.0 request is recorded in its RW1 form (the form the router routes, snappy compressed
again), so a capture file has one format whichever protocol the senders speak, and files
written before RW 2.0 read as they did. Once the file holds ``max_bytes`` it answers 204 and
records nothing more (said once in the log), so the sender's queue does not back up; it stops
after ``duration`` seconds, or on SIGTERM / SIGINT. The file is appended to (a new one starts
with the magic line; one whose end is unreadable is refused); records are flushed to the OS as
they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from aiohttp import web

from rwrouter.audit.capture import MAGIC, CaptureError, CaptureReader, encode_record
from rwrouter.config import ServerConfig, parse_listen_address
from rwrouter.errors import RequestError
from rwrouter.logs import kv
from rwrouter.protocol import RW2_MESSAGE, Written, message_of
from rwrouter.server.app import WRITE_PATHS, named_message, written_headers
from rwrouter.server.bodies import BodyGate, ReadWaitTimeout, read_body
from rwrouter.wire import compress, decompress, to_rw1

log = logging.getLogger("rwrouter.capture")

__all__ = ["CaptureSummary", "CaptureWriter", "capture_app", "run_capture"]


@dataclass(slots=True)
class CaptureSummary:
    """What a capture recorded: ``requests`` and ``bytes`` written (record headers included),
    ``refused`` requests (4xx) and ``discarded`` ones (answered 204 after ``max_bytes``)."""

    requests: int = 0
    bytes: int = 0
    refused: int = 0
    discarded: int = 0


class CaptureWriter:
    """Appends records to a capture file, up to ``max_bytes`` (the file's size).

    Raises CaptureError when ``path`` exists and is not a capture file; OSError when it cannot
    be opened."""

    def __init__(self, path: Path, *, max_bytes: int) -> None:
        self.path, self.max_bytes = path, max_bytes
        self.created = not path.exists()
        self._file: BinaryIO = open(path, "ab")  # noqa: SIM115 (closed by close())
        try:
            if self._file.tell() == 0:
                self._file.write(MAGIC)
                self._file.flush()
            else:
                self._check_end(path)
        except BaseException:
            self._file.close()
            raise
        self.size = self._file.tell()
        self.summary = CaptureSummary()

    def _check_end(self, path: Path) -> None:
        """Records appended after an unreadable end (a capture killed mid-write, or a damaged
        length) could never be read: refuse, saying where the readable part ends (cutting it
        could destroy records behind a damaged length). Raises CaptureError, also for a file
        that is not a capture."""
        with open(path, "rb") as existing:
            reader = CaptureReader(existing)
            try:
                for _ in reader.records():
                    pass
            except CaptureError:
                raise CaptureError(f"{path} exists and is not an rwrouter capture file") from None
        if reader.torn:
            size = self._file.tell()
            raise CaptureError(
                f"{path} ends with {size - reader.end} unreadable bytes after its last whole "
                f"record (a capture killed mid-write?): capture to a new file, or keep the "
                f"readable part with `truncate -s {reader.end} {path}`"
            )

    def write(self, body: bytes, received_ms: int) -> bool:
        """Record ``body``; False (nothing written) once the file holds ``max_bytes``."""
        record = encode_record(body, received_ms)
        if self.size + len(record) > self.max_bytes:
            if not self.summary.discarded:
                why = "capture file full: requests are answered 204, not recorded"
                log.warning(kv(path=str(self.path), max_bytes=self.max_bytes, msg=why))
            self.summary.discarded += 1
            return False
        self._file.write(record)
        self._file.flush()
        self.size += len(record)
        self.summary.requests += 1
        self.summary.bytes += len(record)
        return True

    def close(self) -> None:
        self._file.close()


def capture_app(writer: CaptureWriter, settings: ServerConfig) -> web.Application:
    """The receiver: POST on :data:`~rwrouter.server.app.WRITE_PATHS` records the body."""

    gate = BodyGate.of(settings)

    async def handle(request: web.Request) -> web.Response:
        headers = request.headers
        message = named_message(headers.get("Content-Type"))
        try:
            message = message_of(headers.get("Content-Encoding"), headers.get("Content-Type"))
            body = await read_body(request, gate)
            gate.release(len(body))  # held below for as long as a decode, on the loop
            body, written = recorded_body(body, message, settings.max_decoded_bytes)
        except ReadWaitTimeout as exc:
            retry = {"Retry-After": str(max(1, round(settings.queue_full_retry_after)))}
            response = web.Response(
                status=503, text=f"{exc}; retry later\n", headers=written_headers(message) | retry
            )
            response.force_close()  # its body was not read
            return response
        except RequestError as exc:
            writer.summary.refused += 1
            log.info(kv(remote=request.remote, status=exc.status, reason=exc))
            return web.Response(
                status=exc.status, text=f"{exc}\n", headers=written_headers(message)
            )
        writer.write(body, int(time.time() * 1000))
        return web.Response(status=204, headers=written_headers(message, written))

    app = web.Application(client_max_size=settings.max_request_bytes)
    for path in WRITE_PATHS:
        app.router.add_post(path, handle)
    return app


def recorded_body(
    body: bytes, message: str, max_decoded_bytes: int
) -> tuple[bytes, Written | None]:
    """What a capture records of a request body carrying ``message``: an RW 1.0 body as it
    came (once it decompresses: a snappy block), an RW 2.0 one in its RW1 form, snappy
    compressed; and for RW 2.0 the counts of its Written headers. Raises DecodeError (400) /
    TooLargeError (413) as the router's receive side does."""
    data = decompress(body, max_decoded_bytes=max_decoded_bytes)
    if message != RW2_MESSAGE:
        return body, None
    converted = to_rw1(data, max_bytes=max_decoded_bytes)
    return compress(converted.data), converted.written


async def run_capture(
    output: Path,
    *,
    listen_address: str,
    duration: float | None,
    max_bytes: int,
    on_listening: Callable[[str], None] | None = None,
) -> CaptureSummary:
    """Serve until ``duration`` seconds passed (None: until SIGTERM/SIGINT), then close the
    file. ``on_listening`` gets the base URL once listening. Raises OSError (address in use,
    file not writable), CaptureError (an existing file that is not a capture), ConfigError (a
    listen address that is not host:port)."""
    settings = ServerConfig(listen_address=parse_listen_address(listen_address, "--listen"))
    writer = CaptureWriter(output, max_bytes=max_bytes)
    runner = web.AppRunner(
        capture_app(writer, settings), access_log=None, handle_signals=False, auto_decompress=False
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    try:
        await runner.setup()
        site = web.TCPSite(runner, settings.listen_host or None, settings.listen_port)
        try:
            await site.start()
        except OSError:  # e.g. the address is in use: leave no empty capture behind
            writer.close()
            if writer.created and writer.size == len(MAGIC):
                output.unlink(missing_ok=True)
            raise
        sockets = getattr(site._server, "sockets", None) or []  # the bound sockets
        port = sockets[0].getsockname()[1] if sockets else settings.listen_port
        host = settings.listen_host or "127.0.0.1"
        host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        url = f"http://{host}:{port}"
        log.info(kv(msg="capturing remote write", url=url, output=str(output)))
        if on_listening is not None:
            on_listening(url)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(duration):
                await stop.wait()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await runner.cleanup()
        writer.close()
    return writer.summary
