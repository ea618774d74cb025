"""Reading a destination's disk queue from the test, with the router's own record format
(:mod:`rwrouter.queue.records`) and position file (:mod:`rwrouter.queue.diskqueue`):
what a restart will send first, and where the last record lies (to tear it)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rwrouter.deadletter.store import safe_dirname
from rwrouter.queue.diskqueue import POSITION, SUFFIX
from rwrouter.queue.records import HEADER, check_record, decode_record
from rwrouter.wire import remote_pb2
from tests.support.ledger import SampleKey
from tests.support.series import label_set


@dataclass(frozen=True)
class QueuedRecord:
    """A record of a destination's disk queue: its segment file, offset of its header, length
    of what follows the header, its samples and their keys."""

    path: Path
    offset: int
    length: int
    samples: int
    keys: frozenset[SampleKey]


def queue_dir(storage: Path, destination: str) -> Path:
    return storage / "queue" / safe_dirname(destination)


def queue_records(directory: Path, *, from_position: bool = True) -> list[QueuedRecord]:
    """The intact records of a disk queue, in order, from the committed position (``position``
    file) unless ``from_position`` is False; reading a segment stops at a torn record."""
    segment, offset = 0, 0
    position = directory / "position"
    if from_position and position.exists():
        segment, offset, *_ = POSITION.unpack_from(position.read_bytes())
    out: list[QueuedRecord] = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        seq = int(path.name[: -len(SUFFIX)])
        if seq < segment:
            continue
        out.extend(_segment_records(path, offset if seq == segment else 0))
    return out


def _segment_records(path: Path, start: int) -> Iterable[QueuedRecord]:
    data = path.read_bytes()
    pos = start
    while pos + HEADER.size <= len(data):
        header = data[pos : pos + HEADER.size]
        length, _ = HEADER.unpack(header)
        rest = data[pos + HEADER.size : pos + HEADER.size + length]
        if not check_record(header, rest):
            return
        block = decode_record(rest)
        request = remote_pb2.WriteRequest.FromString(b"".join(block.frames))
        keys = frozenset(
            (label_set((lb.name, lb.value) for lb in ts.labels), sample.timestamp)
            for ts in request.timeseries
            for sample in ts.samples
        )
        yield QueuedRecord(path, pos, length, block.samples, keys)
        pos += HEADER.size + length
