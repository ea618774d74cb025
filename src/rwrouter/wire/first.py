"""The labels of a write request's first series (pure), without routing the request: what an
HA tracker decides by (:mod:`rwrouter.routing.ha`).

Wire schemas: RW 1.0 ``prometheus.WriteRequest`` (field 1: TimeSeries, whose field 1 is a
Label {name = 1, value = 2}) and RW 2.0 ``io.prometheus.write.v2.Request`` (field 4: the
symbols table, field 5: TimeSeries, whose field 1 is ``labels_refs``, pairs of symbol refs).
"""

from __future__ import annotations

from rwrouter.errors import DecodeError
from rwrouter.wire.validate import decode_label
from rwrouter.wire.walk import LEN, VARINT, fields, read_varint

__all__ = ["first_series_labels", "frame_labels"]


def first_series_labels(data: bytes, *, rw2: bool = False) -> dict[str, str]:
    """The labels (name -> value, empty values left out) of the first series of a
    decompressed write request: RW 1.0, or RW 2.0 with ``rw2``. ``{}`` when it has no series.
    Cost: RW 1.0 reads one series; RW 2.0 walks the symbols that precede the first series
    (Prometheus writes the symbols first: the whole table, a few microseconds per hundred).

    Raises DecodeError for malformed framing, a ref outside the symbols table or bad UTF-8
    (a request the router has routed already passed those checks)."""
    if not rw2:
        for field, wire_type, _, start, end in fields(data, 0, len(data), "WriteRequest"):
            if field == 1 and wire_type == LEN:
                return _rw1_labels(data, start, end)
        return {}
    symbols: list[tuple[int, int]] = []
    refs: list[int] | None = None
    for field, wire_type, _, start, end in fields(data, 0, len(data), "RW 2.0 Request"):
        if wire_type != LEN:
            continue
        if field == 4:
            symbols.append((start, end))
        elif field == 5 and refs is None:
            refs = _refs(data, start, end)
        if refs is not None and (not refs or max(refs) < len(symbols)):
            break
    if refs is None:
        return {}
    if refs and max(refs) >= len(symbols):
        raise DecodeError("labels_refs of the first series point outside the symbols table")
    texts = [data[a:b].decode("utf-8") for a, b in (symbols[r] for r in refs)]
    return {n: v for n, v in zip(texts[::2], texts[1::2], strict=True) if v}


def frame_labels(frame: bytes) -> dict[str, str]:
    """The labels of one framed RW 1.0 series (``0a <len> TimeSeries``, as a queue record or a
    share holds it). Raises DecodeError when malformed."""
    for field, wire_type, _, start, end in fields(frame, 0, len(frame), "frame"):
        if field == 1 and wire_type == LEN:
            return _rw1_labels(frame, start, end)
    return {}


def _rw1_labels(buf: bytes, start: int, end: int) -> dict[str, str]:
    labels = {}
    for field, wire_type, _, vstart, vend in fields(buf, start, end, "series"):
        if field == 1 and wire_type == LEN:
            name, value = decode_label(buf, vstart, vend)
            if value:
                labels[name] = value
    return labels


def _refs(buf: bytes, start: int, end: int) -> list[int]:
    """The ``labels_refs`` of one RW 2.0 TimeSeries payload (packed or not)."""
    refs: list[int] = []
    for field, wire_type, _, vstart, vend in fields(buf, start, end, "series"):
        if field != 1:
            continue
        if wire_type == VARINT:
            refs.append(read_varint(buf, vstart, vend)[0])
        elif wire_type == LEN:
            pos = vstart
            while pos < vend:
                ref, pos = read_varint(buf, pos, vend)
                refs.append(ref)
    if len(refs) % 2:
        raise DecodeError("labels_refs of the first series has an odd length")
    return refs
