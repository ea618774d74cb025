"""The metadata queue forwards an identical entry at most once per ``resend_after`` seconds
(half of ``metadata_config.send_interval``), a changed one at once."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from rwrouter.metrics import Metrics
from rwrouter.send import metadata as metadata_module
from rwrouter.send.metadata import MetadataQueue

A1, A2, B = b"\x1a\x03a-1", b"\x1a\x03a-2", b"\x1a\x01b"

CASES = [
    # (name, [(seconds, entries added)], entries queued in order)
    ("first_time_queued", [(0, [A1, B])], [A1, B]),
    ("repeat_within_the_interval_skipped", [(0, [A1]), (1, [A1]), (29.9, [A1])], [A1]),
    ("repeat_after_the_interval_queued", [(0, [A1]), (30, [A1]), (45, [A1])], [A1, A1]),
    ("changed_entry_at_once", [(0, [A1]), (1, [A2])], [A1, A2]),
    ("duplicates_in_one_request_once", [(0, [A1, A1, B, A1])], [A1, B]),
    ("rw2_sender_every_request", [(t / 10, [A1, B]) for t in range(700)], [A1, B] * 3),
]


@pytest.mark.parametrize(("name", "adds", "queued"), CASES, ids=[c[0] for c in CASES])
def test_identical_entries_once_per_resend_interval(
    name: str, adds: list[tuple[float, list[bytes]]], queued: list[bytes]
) -> None:
    now = [0.0]
    queue = MetadataQueue(
        name="d",
        batch_size=500,
        max_bytes=1 << 20,
        metrics=Metrics(CollectorRegistry()).send,
        resend_after=30.0,
        clock=lambda: now[0],
    )
    for at, entries in adds:
        now[0] = at
        queue.add(entries)
    assert [entry for entry, _ in queue.queued()] == queued
    assert queue.nbytes == sum(map(len, queued))


def test_the_memory_of_queued_entries_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_module, "RECENT_LIMIT", 3)
    queue = MetadataQueue(
        name="d",
        batch_size=500,
        max_bytes=1 << 20,
        metrics=Metrics(CollectorRegistry()).send,
        clock=lambda: 0.0,
    )
    entries = [bytes([0x1A, 1, n]) for n in range(5)]
    queue.add(entries[:3])
    queue.add(entries[3:4])  # the memory is full: forgotten, then this one remembered
    queue.add(entries[:1])  # forgotten: queued once more
    assert queue._remembered <= 3
    assert [entry for entry, _ in queue.queued()] == [*entries[:4], entries[0]]
