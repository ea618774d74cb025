"""Samples older than a cutoff, dropped from framed series (pure).

The body is RW1-form frames concatenated (``timeseries`` fields of ``prometheus.WriteRequest``,
what a queue record and a batch hold). A "sample" is a ``Sample``, an ``Exemplar`` or a
native ``Histogram`` of a series, as rwrouter counts them everywhere; each carries its own
timestamp (milliseconds since the epoch, int64): ``Sample`` field 2, ``Exemplar`` field 3,
``Histogram`` field 15 (prompb ``types.proto``; a missing timestamp is 0). Only what is
needed is decoded: each series' fields are walked, the labels skipped, and a series is
written anew only when some of its samples go; the others keep their bytes as they were.
The usual case, nothing too old, costs one scan of the frames for their oldest timestamp
(:func:`sample_ages`: compiled in ``rwrouter.wire._scan`` when built, about a
microsecond per series in Python), then nothing more.

Source of the rule: Prometheus ``storage/remote/queue_manager.go`` (``isSampleOld``: a
sample is too old when its timestamp is before ``now - sample_age_limit``); the cutoff itself
is computed by :mod:`rwrouter.send.age`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rwrouter.errors import DecodeError
from rwrouter.wire.accelerator import compiled
from rwrouter.wire.index import Item
from rwrouter.wire.walk import LEN, VARINT, encode_varint, fields, read_varint

__all__ = ["Recent", "drop_older", "sample_ages", "sample_ages_py"]

_TIMESTAMP_FIELD = {2: 2, 3: 3, 4: 15}  # TimeSeries field -> its timestamp field (prompb)
_INT64 = 1 << 64


@dataclass(frozen=True, slots=True)
class Recent:
    """What :func:`drop_older` left of a body.

    ``body``: the frames left, concatenated (the body given, unchanged, when nothing went);
    ``items``: each frame left and its samples (``None`` when nothing went: the caller's
    index still holds); ``kept`` and ``dropped``: samples (all kinds) left and gone;
    ``oldest_ms``: the oldest timestamp left (ms since the epoch), None when nothing is left.
    """

    body: bytes
    items: list[Item] | None
    kept: int
    dropped: int
    oldest_ms: int | None


def _timestamp(buf: bytes, start: int, end: int, number: int) -> int:
    """The timestamp (ms, signed) of the Sample/Exemplar/Histogram at ``buf[start:end]``
    (``number`` its field number in TimeSeries); 0 when it has none (proto3 default)."""
    if number == 2 and end - start >= 11 and buf[start] == 0x09 and buf[start + 9] == 0x10:
        value, _ = read_varint(buf, start + 10, end)  # the usual Sample: value, timestamp
    else:
        wanted, value = _TIMESTAMP_FIELD[number], 0
        for field, wire_type, _, vstart, vend in fields(buf, start, end, "sample"):
            if field == wanted and wire_type == VARINT:
                value, _ = read_varint(buf, vstart, vend)
    return value - _INT64 if value >= 1 << 63 else value


def sample_ages_py(body: bytes) -> tuple[int | None, int]:
    """The oldest timestamp (ms, None when there is none) of the samples, exemplars and
    histograms of the frames in ``body``, and how many there are.

    Raises DecodeError for malformed framing."""
    oldest: int | None = None
    samples = 0
    for number, wire_type, _, start, end in fields(body, 0, len(body), "WriteRequest"):
        if number != 1 or wire_type != LEN:
            raise DecodeError(f"bad protobuf: field {number} in framed series")
        for field, wt, _, vstart, vend in fields(body, start, end, "series"):
            if field in _TIMESTAMP_FIELD and wt == LEN:
                ts = _timestamp(body, vstart, vend, field)
                samples += 1
                if oldest is None or ts < oldest:
                    oldest = ts
    return oldest, samples


sample_ages: Callable[[bytes], tuple[int | None, int]] = compiled("sample_ages") or sample_ages_py
"""The scan in use (compiled when built), with the contract of :func:`sample_ages_py`."""


def drop_older(body: bytes, cutoff_ms: int) -> Recent:
    """``body`` without the samples, exemplars and histograms whose timestamp is before
    ``cutoff_ms`` (ms since the epoch); a series left with none of them goes whole. Other
    fields (labels, start timestamps, unknown fields) are kept as they were.

    Raises DecodeError for malformed framing (a damaged queue record)."""
    oldest, samples = sample_ages(body)
    if oldest is None or oldest >= cutoff_ms:
        return Recent(body, None, samples, 0, oldest)
    frames: list[tuple[int, int, int, int, int]] = []  # head, start, end, kept, dropped
    kept = dropped = 0
    oldest = None
    for _, _, head, start, end in fields(body, 0, len(body), "WriteRequest"):
        count = gone = 0
        for field, wt, _, vstart, vend in fields(body, start, end, "series"):
            if field in _TIMESTAMP_FIELD and wt == LEN:
                ts = _timestamp(body, vstart, vend, field)
                if ts < cutoff_ms:
                    gone += 1
                    continue
                count += 1
                if oldest is None or ts < oldest:
                    oldest = ts
        kept += count
        dropped += gone
        frames.append((head, start, end, count, gone))
    items = [
        (_without_old(body, start, end, cutoff_ms) if gone else body[head:end], count)
        for head, start, end, count, gone in frames
        if count or not gone
    ]
    return Recent(b"".join(frame for frame, _ in items), items, kept, dropped, oldest)


def _without_old(buf: bytes, start: int, end: int, cutoff_ms: int) -> bytes:
    """The ``timeseries`` field of the TimeSeries payload ``buf[start:end]`` without its
    samples before ``cutoff_ms``: every other field's bytes as they were, in order."""
    kept = [
        buf[head:vend]
        for field, wt, head, vstart, vend in fields(buf, start, end, "series")
        if not (
            field in _TIMESTAMP_FIELD
            and wt == LEN
            and _timestamp(buf, vstart, vend, field) < cutoff_ms
        )
    ]
    inner = b"".join(kept)
    return b"\x0a" + encode_varint(len(inner)) + inner
