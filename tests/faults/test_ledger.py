"""The fault tests' sender holds RW 2.0 answers to the spec's Written headers (RW 2.0 spec,
"Required Written Response Headers"; Prometheus 3's storage/remote/queue_manager.go), so the
``rw2`` fault tests can fail on a router that answers without them.

A scripted receiver on 127.0.0.1 (stdlib ``http.server``, a thread) decodes each request as
the message its ``Content-Type`` names (so the ledger's RW 2.0 bodies are checked to be RW 2.0)
and gives the answers of its script in turn, the last one again and again. ``EXACT`` in a
script stands for the Written headers of exactly what the request carried.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]

from rwrouter.protocol import (
    RW1_MESSAGE,
    RW2_MESSAGE,
    SAMPLES_WRITTEN,
    Written,
    message_of,
    request_headers,
)
from rwrouter.wire import remote_pb2, write_v2_pb2
from tests.faults.harness import wait_for
from tests.support.ledger import Ledger, WrittenError, make_streams

pytestmark = pytest.mark.timeout(30)

EXACT = "exact"  # the Written headers of what the request carried
Answer = tuple[int, dict[str, str] | str]  # status, headers (or EXACT)
ZERO = Written().headers()
SERIES = 4  # per request: one sample each
CARRIED = Written(samples=SERIES)


class ScriptedReceiver(ThreadingHTTPServer):
    """Answers ``script`` in turn (the last one repeated) and keeps each request's message,
    sample count and the headers that name its message."""

    def __init__(self, script: Sequence[Answer]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = list(script)
        self.received: list[tuple[str, int, dict[str, str]]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(
        self, message: str, samples: int, fixed: dict[str, str]
    ) -> tuple[int, dict[str, str]]:
        with self.lock:
            turn = min(len(self.received), len(self.script) - 1)
            self.received.append((message, samples, fixed))
        status, headers = self.script[turn]
        if isinstance(headers, str):  # EXACT
            return status, Written(samples=samples).headers()
        return status, dict(headers)


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedReceiver

    def do_POST(self) -> None:
        body = snappy.uncompress(self.rfile.read(int(self.headers["Content-Length"])))
        message = message_of(self.headers["Content-Encoding"], self.headers["Content-Type"])
        parse = write_v2_pb2.Request if message == RW2_MESSAGE else remote_pb2.WriteRequest
        samples = sum(len(ts.samples) for ts in parse.FromString(body).timeseries)
        fixed = {name: self.headers[name] for name in request_headers(message)}
        status, headers = self.server.answer(message, samples, fixed)
        self.send_response(status)
        for name, value in {**headers, "Content-Length": "0"}.items():
            self.send_header(name, value)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: no line per request on stderr."""


def run_ledger(
    script: Sequence[Answer], message: str, *, attempts: int
) -> tuple[Ledger, ScriptedReceiver]:
    """Send with one stream of :data:`SERIES` series until the receiver got ``attempts``."""
    receiver = ScriptedReceiver(script)
    thread = threading.Thread(target=receiver.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    ledger = Ledger(
        receiver.url,
        streams=make_streams("ledger", streams=1, series=SERIES),
        message=message,
        min_backoff_s=0.01,
        retry_after_cap_s=0.05,
    )
    try:
        with ledger:
            wait_for(
                lambda: len(receiver.received) >= attempts or None,
                timeout_s=10,
                interval_s=0.02,
                what=f"{attempts} requests at the receiver",
            )
    finally:
        receiver.shutdown()
        receiver.server_close()
    return ledger, receiver


# (id, message, script, attempts waited for, acknowledged: some | none, written errors)
CASES = [
    ("rw2_204_exact", RW2_MESSAGE, [(204, EXACT)], 3, True, []),
    (
        "rw2_204_without_headers",
        RW2_MESSAGE,
        [(204, {})],
        2,
        False,
        [WrittenError(204, CARRIED, None)],
    ),
    (
        "rw2_204_fewer_written",
        RW2_MESSAGE,
        [(204, {SAMPLES_WRITTEN: str(SERIES - 1)})],
        2,
        False,
        [WrittenError(204, CARRIED, Written(samples=SERIES - 1))],
    ),
    (
        "rw2_204_more_written",
        RW2_MESSAGE,
        [(204, {SAMPLES_WRITTEN: str(SERIES + 1)})],
        1,
        False,
        [WrittenError(204, CARRIED, Written(samples=SERIES + 1))],
    ),
    ("rw2_503_zero_then_204", RW2_MESSAGE, [(503, ZERO), (204, EXACT)], 3, True, []),
    (
        "rw2_503_without_headers_then_204",
        RW2_MESSAGE,
        [(503, {}), (204, EXACT)],
        3,
        True,
        [WrittenError(503, CARRIED, None)],
    ),
    (
        "rw2_503_says_written_then_204",
        RW2_MESSAGE,
        [(503, EXACT), (204, EXACT)],
        3,
        True,
        [WrittenError(503, CARRIED, CARRIED)],
    ),
    ("rw2_400_zero", RW2_MESSAGE, [(400, ZERO)], 2, False, []),
    (
        "rw2_400_without_headers",
        RW2_MESSAGE,
        [(400, {})],
        1,
        False,
        [WrittenError(400, CARRIED, None)],
    ),
    ("rw1_204_without_headers", RW1_MESSAGE, [(204, {})], 3, True, []),
]


@pytest.mark.parametrize(
    ("message", "script", "attempts", "acked", "errors"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_ledger_checks_the_written_headers_of_rw2_answers(
    message: str, script: list[Answer], attempts: int, acked: bool, errors: list[WrittenError]
) -> None:
    ledger, receiver = run_ledger(script, message, attempts=attempts)
    assert [(m, n) for m, n, _ in receiver.received] == [(message, SERIES)] * len(receiver.received)
    assert all(fixed == request_headers(message) for _, _, fixed in receiver.received)
    assert bool(ledger.acknowledged) is acked
    assert ledger.written_errors[: len(errors)] == errors
    assert set(ledger.written_errors) == set(errors)


def test_ledger_refuses_an_unknown_message() -> None:
    with pytest.raises(ValueError, match="unknown protobuf message"):
        Ledger("http://127.0.0.1:1", streams=[], message="prometheus.Other")
