"""The Deliverer's protocol (rwrouter.send.delivery, .encoding): RW 1.0 as stored or with
start timestamps stripped, RW 2.0 built per part, the Written headers, and the fallback of an
RW 2.0 destination that does not speak it (415, or a 2xx that wrote nothing).

Rules: RW 2.0 spec ("Required Written Response Headers", 415), Prometheus
``sendV2SamplesWithBackoff`` (a 2xx that wrote nothing of a request with data is a failure),
rwrouter's fallback (docs/configuration.md). Fakes only, no sockets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from rwrouter.auth.schemes import Authenticator, NoAuth, SigV4
from rwrouter.doubles.sigv4_verify import Key, Verified, verify
from rwrouter.metrics import Metrics
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE, Written, message_of
from rwrouter.send.attempts import Attempts
from rwrouter.send.delivery import Deliverer
from rwrouter.send.metabook import MetadataBook
from rwrouter.send.refusals import Item, Kind, Refusal
from rwrouter.send.retry import RetryPolicy
from rwrouter.send.transport import Answer
from rwrouter.wire import compress, decompress, frame_metadata, remote_pb2, types_pb2, write_v2_pb2
from tests.support.clients import FakeClient
from tests.support.rw2_frames import Frame, decode_v2, frame_bytes, frames, series_of
from tests.unit.test_delivery import Clock, CountingSource

NAME = "dest"
WRITTEN = "X-Prometheus-Remote-Write-Samples-Written"


def sample(ts: int, start: int = 0) -> bytes:
    message = write_v2_pb2.Sample(value=float(ts), timestamp=ts, start_timestamp=start)
    return bytes(message.SerializeToString())


def series(i: int, start: int = 0) -> Frame:
    return Frame((("__name__", "up"), ("i", str(i))), (sample(1_000 + i, start),))


def items_of(given: list[Frame]) -> list[Item]:
    return [(frame_bytes(f), len(f.samples) + len(f.histograms) + len(f.exemplars)) for f in given]


@dataclass
class Sent:
    """One POST as the destination saw it."""

    message: str
    headers: dict[str, str]
    body: bytes  # compressed, as sent
    raw: bytes
    labels: list[str]  # the "i" label of each series, in order


Reply = tuple[int, Mapping[str, str]]


def rw2_ok(sent: Sent) -> Reply:
    """A Prometheus 3 receiver: 204 and exact Written counts."""
    request = decode_v2(sent.raw)
    return 204, Written(
        sum(len(t.samples) for t in request.timeseries),
        sum(len(t.histograms) for t in request.timeseries),
        sum(len(t.exemplars) for t in request.timeseries),
    ).headers()


def rw1_only(status: int, headers: Mapping[str, str] | None = None) -> Callable[[Sent], Reply]:
    """A 1.x receiver: RW 1.0 fine; RW 2.0 answered ``status`` (and ``headers``)."""
    return lambda sent: (status, headers or {}) if sent.message == RW2_MESSAGE else (200, {})


class ProtocolTransport(FakeClient):
    """Decodes each POST by its Content-Type and answers ``reply(sent)``."""

    def __init__(self, reply: Callable[[Sent], Reply]) -> None:
        super().__init__()
        self.reply = reply
        self.sent: list[Sent] = []

    async def post(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        message = message_of(headers.get("Content-Encoding"), headers.get("Content-Type"))
        raw = decompress(body, max_decoded_bytes=1 << 24)
        if message == RW2_MESSAGE:
            labels = [dict(f.labels).get("i", "?") for f in series_of(decode_v2(raw))]
        else:
            request = remote_pb2.WriteRequest.FromString(raw)
            labels = [
                next((lab.value for lab in ts.labels if lab.name == "i"), "?")
                for ts in request.timeseries
            ]
        sent = Sent(message, dict(headers), body, raw, labels)
        self.sent.append(sent)
        status, answer_headers = self.reply(sent)
        return Answer(status, answer_headers, b"answer")


@dataclass
class Rig:
    deliverer: Deliverer
    transport: ProtocolTransport
    metrics: Metrics
    protocols: list[str] = field(default_factory=list)
    rejected: list[tuple[list[Item], Refusal]] = field(default_factory=list)

    def value(self, metric: str, **labels: str) -> float:
        got = self.metrics.registry.get_sample_value(metric, {"destination": NAME, **labels})
        return got or 0.0


def rig(
    reply: Callable[[Sent], Reply],
    *,
    message: str = RW2_MESSAGE,
    book: MetadataBook | None = None,
    auth: Authenticator | None = None,
) -> Rig:
    clock = Clock()
    transport = ProtocolTransport(reply)
    metrics = Metrics()
    r = Rig(None, transport, metrics)  # type: ignore[arg-type]
    attempts = Attempts(
        name=NAME,
        transport=transport,
        auth=auth or NoAuth(),
        policy=RetryPolicy(min_backoff=1.0, max_backoff=4.0),
        metrics=metrics.send,
        headers={"X-Team": "gpu"},
        clock=clock,
        wall_clock=lambda: 1_700_000_000.0,
        rand=lambda: 0.0,
        sleep=clock.sleep,
    )
    r.deliverer = Deliverer(
        attempts=attempts,
        message=message,
        book=book,
        on_rejected=lambda items, _kind, refusal, _tenant: r.rejected.append((items, refusal)),
        on_protocol=r.protocols.append,
    )
    return r


# -- which encoding ---------------------------------------------------------------------------

ENCODING_CASES = [
    # id, configured message, flagged, start timestamp in the frames, sent message, stripped
    ("rw1_as_stored", RW1_MESSAGE, False, 0, RW1_MESSAGE, 0),
    ("rw1_flagged_without_any", RW1_MESSAGE, True, 0, RW1_MESSAGE, 0),
    ("rw1_flagged_stripped", RW1_MESSAGE, True, 77, RW1_MESSAGE, 3),
    ("rw2", RW2_MESSAGE, False, 0, RW2_MESSAGE, 0),
    ("rw2_keeps_start_timestamps", RW2_MESSAGE, True, 77, RW2_MESSAGE, 0),
]


@pytest.mark.parametrize(
    ("message", "flagged", "start", "sent_as", "stripped"),
    [c[1:] for c in ENCODING_CASES],
    ids=[c[0] for c in ENCODING_CASES],
)
async def test_encoding_follows_the_protocol(
    message: str, flagged: bool, start: int, sent_as: str, stripped: int
) -> None:
    r = rig(rw2_ok if message == RW2_MESSAGE else lambda _s: (204, {}), message=message)
    given = [series(i, start) for i in range(3)]
    items = items_of(given)
    assert await r.deliverer.deliver(items, Kind.SAMPLES, start_timestamps=flagged) == 3
    (sent,) = r.transport.sent
    assert sent.message == sent_as
    assert sent.headers["X-Prometheus-Remote-Write-Version"] == (
        "2.0.0" if sent_as == RW2_MESSAGE else "0.1.0"
    )
    assert sent.headers["X-Team"] == "gpu"
    if sent_as == RW2_MESSAGE:
        assert [f.samples for f in series_of(decode_v2(sent.raw))] == [f.samples for f in given]
    elif stripped:
        clean = [Frame(f.labels, (sample(1_000 + i),)) for i, f in enumerate(given)]
        assert sent.raw == frames(clean)
    else:
        assert sent.raw == frames(given)  # the frames exactly
    assert r.value("rwrouter_start_timestamps_dropped_total") == stripped
    assert r.value("rwrouter_samples_dropped_total", reason="not_written") == 0


def test_sends_stored_only_for_rw1_without_start_timestamps() -> None:
    rw1, rw2 = rig(rw2_ok, message=RW1_MESSAGE), rig(rw2_ok)
    assert rw1.deliverer.sends_stored(start_timestamps=False)
    assert not rw1.deliverer.sends_stored(start_timestamps=True)
    assert not rw2.deliverer.sends_stored(start_timestamps=False)


async def test_stored_body_goes_out_byte_for_byte() -> None:
    r = rig(lambda _s: (204, {}), message=RW1_MESSAGE)
    raw = frames([series(0), series(1)])
    stored = compress(raw)
    assert await r.deliverer.deliver_raw(b"", 2, lambda: [], compressed=stored) == 2
    assert r.transport.sent[0].body is stored


async def test_rw2_series_carry_their_metadata() -> None:
    book = MetadataBook()
    book.update(
        [
            frame_metadata(
                types_pb2.MetricMetadata(
                    type=types_pb2.MetricMetadata.GAUGE,
                    metric_family_name="up",
                    help="Up.",
                    unit="",
                ).SerializeToString()
            )
        ]
    )
    r = rig(rw2_ok, book=book)
    await r.deliverer.deliver(items_of([series(0)]), Kind.SAMPLES)
    assert [f.metadata for f in series_of(decode_v2(r.transport.sent[0].raw))] == [(2, "Up.", "")]


async def test_metadata_requests_are_rw1_even_for_an_rw2_destination() -> None:
    r = rig(rw2_ok)
    entry = frame_metadata(types_pb2.MetricMetadata(metric_family_name="up").SerializeToString())
    assert await r.deliverer.deliver([(entry, 1)], Kind.METADATA) == 1
    assert r.transport.sent[0].message == RW1_MESSAGE
    assert r.protocols == []


async def test_rw2_request_signed_as_sent() -> None:
    """SigV4 signs the RW 2.0 Content-Type and version the request carries."""
    r = rig(rw2_ok, auth=SigV4(CountingSource()))
    await r.deliverer.deliver(items_of([series(0)]), Kind.SAMPLES)
    sent = r.transport.sent[0]
    headers = {k.lower(): [v] for k, v in sent.headers.items()}
    assert headers["content-type"] == [f"application/x-protobuf;proto={RW2_MESSAGE}"]
    checked = verify(
        method="POST",
        raw_path="/workspaces/ws-1/api/v1/remote_write",
        raw_query="",
        headers=headers,
        body=sent.body,
        keys={"AKID0": Key("SECRET")},
        region="us-east-1",
        service="aps",
        now_s=time.time(),
    )
    assert isinstance(checked, Verified)
    assert {"content-type", "x-prometheus-remote-write-version"} <= set(checked.signed_headers)


# -- fallback ---------------------------------------------------------------------------------

FALLBACK_CASES = [
    ("415", rw1_only(415), "415"),
    ("2xx_without_written_headers", rw1_only(200), "nothing_written"),
    ("204_all_three_zero", rw1_only(204, Written(0, 0, 0).headers()), "nothing_written"),
    ("only_one_header_zero", rw1_only(204, {WRITTEN: "0"}), "nothing_written"),
]


@pytest.mark.parametrize(
    ("reply", "reason"), [c[1:] for c in FALLBACK_CASES], ids=[c[0] for c in FALLBACK_CASES]
)
async def test_fallback_resends_the_same_batch_as_rw1_at_once(
    reply: Callable[[Sent], Reply], reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    r = rig(reply)
    with caplog.at_level(logging.WARNING, logger="rwrouter.sending"):
        assert await r.deliverer.deliver(items_of([series(0), series(1)]), Kind.SAMPLES) == 2
        assert await r.deliverer.deliver(items_of([series(2)]), Kind.SAMPLES) == 1
    assert [(s.message, s.labels) for s in r.transport.sent] == [
        (RW2_MESSAGE, ["0", "1"]),
        (RW1_MESSAGE, ["0", "1"]),
        (RW1_MESSAGE, ["2"]),
    ]
    assert r.deliverer.message == RW1_MESSAGE
    assert r.protocols == [RW1_MESSAGE]
    assert r.value("rwrouter_protocol_fallbacks_total", reason=reason) == 1
    assert r.value("rwrouter_samples_dropped_total", reason="4xx") == 0
    assert r.rejected == []
    assert (
        sum("sending remote write 1.0 from now on until a reload" in m for m in caplog.messages)
        == 1
    )


async def test_concurrent_parts_fall_back_once() -> None:
    r = rig(rw1_only(415))
    done = await asyncio.gather(
        *(r.deliverer.deliver(items_of([series(i)]), Kind.SAMPLES) for i in range(4))
    )
    assert done == [1, 1, 1, 1]
    assert r.value("rwrouter_protocol_fallbacks_total", reason="415") == 1
    assert r.protocols == [RW1_MESSAGE]


async def test_use_tries_rw2_again() -> None:
    r = rig(rw1_only(415))
    await r.deliverer.deliver(items_of([series(0)]), Kind.SAMPLES)
    r.deliverer.use(RW2_MESSAGE)
    r.transport.reply = rw2_ok  # the destination was upgraded meanwhile
    await r.deliverer.deliver(items_of([series(1)]), Kind.SAMPLES)
    assert [s.message for s in r.transport.sent] == [RW2_MESSAGE, RW1_MESSAGE, RW2_MESSAGE]


async def test_rw1_415_is_a_refusal() -> None:
    r = rig(lambda _s: (415, {}), message=RW1_MESSAGE)
    assert await r.deliverer.deliver(items_of([series(0)]), Kind.SAMPLES) == 0
    assert r.value("rwrouter_samples_dropped_total", reason="4xx") == 1
    assert r.protocols == []


async def test_empty_written_of_an_rw2_request_without_data_is_no_fallback() -> None:
    """A part that carried nothing cannot tell (Prometheus checks "data sent > 0")."""
    r = rig(rw1_only(204, Written(0, 0, 0).headers()))
    empty = frame_bytes(Frame((("__name__", "up"),)))
    assert await r.deliverer.deliver([(empty, 0)], Kind.SAMPLES) == 0
    assert r.deliverer.message == RW2_MESSAGE


# -- Written headers --------------------------------------------------------------------------

WRITTEN_CASES = [
    # id, message, answer headers, delivered of 3, not written
    ("rw2_all_written", RW2_MESSAGE, Written(3, 0, 0).headers(), 3, 0),
    ("rw2_part_written", RW2_MESSAGE, Written(1, 0, 0).headers(), 1, 2),
    ("rw2_more_than_sent", RW2_MESSAGE, Written(9, 4, 4).headers(), 3, 0),
    ("rw1_without_headers", RW1_MESSAGE, {}, 3, 0),
    ("rw1_part_written", RW1_MESSAGE, Written(2, 0, 0).headers(), 2, 1),
    ("rw1_zero_written", RW1_MESSAGE, Written(0, 0, 0).headers(), 0, 3),
    ("rw1_empty_values", RW1_MESSAGE, dict.fromkeys(Written().headers(), ""), 3, 0),
]


@pytest.mark.parametrize(
    ("message", "headers", "delivered", "missing"),
    [c[1:] for c in WRITTEN_CASES],
    ids=[c[0] for c in WRITTEN_CASES],
)
async def test_written_headers_are_trusted(
    message: str, headers: dict[str, str], delivered: int, missing: int
) -> None:
    r = rig(lambda _s: (204, headers), message=message)
    got = await r.deliverer.deliver(items_of([series(i) for i in range(3)]), Kind.SAMPLES)
    assert got == delivered
    assert r.value("rwrouter_samples_dropped_total", reason="not_written") == missing
    assert r.deliverer.message == message
    assert r.rejected == []  # accepted: nothing to replay


async def test_not_written_logged_once_per_batch_and_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refused = {"3"}  # the destination refuses series 3 (400) and writes half of the rest

    def reply(sent: Sent) -> Reply:
        if refused & set(sent.labels):
            return 400, {}
        return 204, Written(len(sent.labels) // 2, 0, 0).headers()

    r = rig(reply)
    with caplog.at_level(logging.WARNING, logger="rwrouter.sending"):
        await r.deliverer.deliver(items_of([series(i) for i in range(8)]), Kind.SAMPLES)
        await r.deliverer.deliver(items_of([series(10 + i) for i in range(4)]), Kind.SAMPLES)
    assert sum("count less than was sent" in m for m in caplog.messages) == 1
    assert r.value("rwrouter_samples_dropped_total", reason="not_written") > 0


# -- split and replay -------------------------------------------------------------------------


async def test_a_refused_rw2_batch_is_split_and_each_half_encoded_again() -> None:
    def reply(sent: Sent) -> Reply:
        if "2" in sent.labels:
            return 400, {}
        return rw2_ok(sent)

    r = rig(reply)
    assert await r.deliverer.deliver(items_of([series(i) for i in range(4)]), Kind.SAMPLES) == 3
    assert [s.labels for s in r.transport.sent] == [
        ["0", "1", "2", "3"],
        ["0", "1"],
        ["2", "3"],
        ["2"],
        ["3"],
    ]
    for sent in r.transport.sent:  # every part a complete RW 2.0 request of its own
        assert sent.message == RW2_MESSAGE
        request = decode_v2(sent.raw)
        assert request.symbols[0] == "" and len(set(request.symbols)) == len(request.symbols)
    ((items, refusal),) = r.rejected
    assert items == items_of([series(2)]) and refusal.status == 400  # stored in the RW1 form


async def test_split_after_fallback_stays_rw1_and_strips() -> None:
    def reply(sent: Sent) -> Reply:
        if sent.message == RW2_MESSAGE:
            return 415, {}
        return (400, {}) if "1" in sent.labels else (204, {})

    r = rig(reply)
    given = [series(0, 5), series(1, 5)]
    assert await r.deliverer.deliver(items_of(given), Kind.SAMPLES, start_timestamps=True) == 1
    assert [(s.message, s.labels) for s in r.transport.sent] == [
        (RW2_MESSAGE, ["0", "1"]),
        (RW1_MESSAGE, ["0", "1"]),
        (RW1_MESSAGE, ["0"]),
        (RW1_MESSAGE, ["1"]),
    ]
    assert all(b"\x18\x05" not in s.raw for s in r.transport.sent[1:])
    assert r.value("rwrouter_start_timestamps_dropped_total") == 1  # only the delivered one


SEND_FRAMES_CASES = [
    ("rw2", RW2_MESSAGE, rw2_ok, [RW2_MESSAGE]),
    ("rw1_stripped", RW1_MESSAGE, lambda _s: (204, {}), [RW1_MESSAGE]),
    ("rw2_fallback", RW2_MESSAGE, rw1_only(415), [RW2_MESSAGE, RW1_MESSAGE]),
]


@pytest.mark.parametrize(
    ("message", "reply", "sent_as"),
    [c[1:] for c in SEND_FRAMES_CASES],
    ids=[c[0] for c in SEND_FRAMES_CASES],
)
async def test_send_frames_for_replay(message: str, reply: Any, sent_as: list[str]) -> None:
    r = rig(reply, message=message)
    assert await r.deliverer.send_frames(frames([series(0, 9)]), 1) is None
    assert [s.message for s in r.transport.sent] == sent_as
    last = r.transport.sent[-1]
    if last.message == RW1_MESSAGE:
        assert last.raw == frames([series(0)])  # no start timestamp for RW 1.0
