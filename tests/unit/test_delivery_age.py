"""Delivery with a sample age limit (rwrouter.send.delivery, ``queue_config.sample_age_limit``):
samples too old when a batch is sent, or when it is retried, are dropped (``too_old``) and
never sent; the rest goes as usual; without a limit the batch's bytes are sent untouched.

Rule: Prometheus ``storage/remote/queue_manager.go`` (``isSampleOld`` on build and on every
retry of ``sendSamplesWithBackoff``). Fakes only, no sockets: the clocks move only when the
deliverer sleeps.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from rwrouter.auth.schemes import NoAuth
from rwrouter.errors import InvariantError
from rwrouter.metrics import Metrics
from rwrouter.send.age import SampleAgeLimit
from rwrouter.send.attempts import Attempts
from rwrouter.send.delivery import Deliverer
from rwrouter.send.refusals import Item
from rwrouter.send.retry import RetryPolicy
from rwrouter.send.transport import Answer
from rwrouter.wire import compress, decompress, remote_pb2
from tests.support.clients import FakeClient

NAME = "workspace"
WALL = 1_700_000_000.0  # unix seconds at the first attempt
NOW_MS = int(WALL * 1000)
LIMIT = 10.0  # seconds


class Clocks:
    """Monotonic and wall clocks that advance together, only by the deliverer's sleeps."""

    def __init__(self) -> None:
        self.mono, self.wall = 1_000.0, WALL

    async def sleep(self, delay: float) -> None:
        self.mono += delay
        self.wall += delay


class Scripted(FakeClient):
    """Answers the attempts with ``statuses`` in order, then 200; keeps each body's
    timestamps (per series, the samples')."""

    def __init__(self, *statuses: int) -> None:
        super().__init__()
        self._statuses = list(statuses)
        self.sent: list[list[int]] = []

    async def post(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        self.posts.append((body, dict(headers)))
        request = remote_pb2.WriteRequest.FromString(decompress(body, max_decoded_bytes=1 << 20))
        self.sent.append([s.timestamp for ts in request.timeseries for s in ts.samples])
        status = self._statuses.pop(0) if self._statuses else 200
        return Answer(status, {}, b"answer")


def frame(name: str, *timestamps: int) -> Item:
    request = remote_pb2.WriteRequest()
    ts = request.timeseries.add()
    ts.labels.add(name="__name__", value=name)
    for t in timestamps:
        ts.samples.add(value=1.0, timestamp=t)
    return request.SerializeToString(), len(timestamps)


def deliverer(transport: Scripted, clocks: Clocks, metrics: Metrics, limit: float) -> Deliverer:
    attempts = Attempts(
        name=NAME,
        transport=transport,
        auth=NoAuth(),
        policy=RetryPolicy(min_backoff=4.0, max_backoff=4.0),  # rand 0: 2 s a retry
        metrics=metrics.send,
        clock=lambda: clocks.mono,
        wall_clock=lambda: clocks.wall,
        rand=lambda: 0.0,
        sleep=clocks.sleep,
    )
    return Deliverer(attempts=attempts, age=SampleAgeLimit(limit))


def too_old(metrics: Metrics) -> float:
    labels = {"destination": NAME, "reason": "too_old"}
    return metrics.registry.get_sample_value("rwrouter_samples_dropped_total", labels) or 0.0


OLD, EDGE, NEW = NOW_MS - 11_000, NOW_MS - 7_000, NOW_MS - 1_000

# (id, frames (name, timestamps), statuses answered, bodies sent (timestamps), delivered,
#  too_old)
CASES = [
    ("nothing_old", [("a", (NEW,)), ("b", (NEW + 1,))], [], [[NEW, NEW + 1]], 2, 0),
    ("old_samples_dropped", [("a", (OLD, NEW)), ("b", (OLD,))], [], [[NEW]], 1, 2),
    ("everything_old_nothing_sent", [("a", (OLD,)), ("b", (OLD - 1,))], [], [], 0, 2),
    (
        # attempts 2 s apart: the third starts 4 s on, when EDGE (7 s old then) is 11 s old
        "retried_until_a_sample_is_too_old",
        [("a", (EDGE,)), ("b", (NEW,))],
        [503, 503, 503],
        [[EDGE, NEW], [EDGE, NEW], [NEW], [NEW]],
        1,
        1,
    ),
    (
        "retried_until_everything_is_too_old",
        [("a", (EDGE,))],
        [503, 503, 503, 503],
        [[EDGE], [EDGE]],
        0,
        1,
    ),
]


@pytest.mark.parametrize(
    ("frames", "statuses", "sent", "delivered", "dropped"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
@pytest.mark.parametrize("stored", [False, True], ids=["frames", "stored_block"])
async def test_too_old_samples_are_dropped_not_sent(
    frames: list[tuple[str, tuple[int, ...]]],
    statuses: list[int],
    sent: list[list[int]],
    delivered: int,
    dropped: int,
    stored: bool,
) -> None:
    clocks, metrics, transport = Clocks(), Metrics(), Scripted(*statuses)
    items = [frame(name, *ts) for name, ts in frames]
    raw = b"".join(f for f, _ in items)
    count = sum(n for _, n in items)
    got = await deliverer(transport, clocks, metrics, LIMIT).deliver_raw(
        raw, count, lambda: items, compressed=compress(raw) if stored else None
    )
    assert (transport.sent, got, too_old(metrics)) == (sent, delivered, dropped)


async def test_without_a_limit_the_stored_block_goes_as_it_is() -> None:
    clocks, metrics, transport = Clocks(), Metrics(), Scripted()
    raw, _ = frame("a", 0)  # the oldest sample there is
    block = compress(raw)
    sender = deliverer(transport, clocks, metrics, 0.0)
    assert not sender.ages
    assert await sender.deliver_raw(b"", 1, list, compressed=block) == 1
    assert transport.posts[0][0] is block and too_old(metrics) == 0


async def test_split_halves_are_filtered_too() -> None:
    # A 400 splits the batch; by the time the halves go, one more sample is too old.
    clocks, metrics, transport = Clocks(), Metrics(), Scripted(400)
    items = [frame("a", EDGE), frame("b", NEW)]
    sender = deliverer(transport, clocks, metrics, LIMIT)
    original = transport.post

    async def late(body: bytes, headers: Mapping[str, str]) -> Answer:
        answer = await original(body, headers)
        clocks.wall += 5.0  # the refusal took 5 s: EDGE is now 12 s old
        return answer

    transport.post = late  # type: ignore[method-assign]
    raw = b"".join(f for f, _ in items)
    assert await sender.deliver_raw(raw, 2, lambda: items) == 1
    assert transport.sent == [[EDGE, NEW], [NEW]]
    assert too_old(metrics) == 1


async def test_an_age_limit_needs_the_frames_of_a_stored_batch() -> None:
    clocks, metrics, transport = Clocks(), Metrics(), Scripted()
    sender = deliverer(transport, clocks, metrics, LIMIT)
    with pytest.raises(InvariantError):
        await sender.deliver_raw(b"", 1, list, compressed=compress(frame("a", NEW)[0]))
