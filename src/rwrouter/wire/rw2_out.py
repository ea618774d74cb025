"""Remote write 2.0 out (pure): the ``io.prometheus.write.v2.Request`` of a batch held in the
RW1 form, and the RW1 form without what only RW 2.0 can carry.

The queue holds series in the RW1 form (docs/DEVELOPING.md "Remote write 1.0 and 2.0: one
form inside"): frames ``0a <len> TimeSeries`` with the RW 1.0 field numbers (labels 1,
samples 2, exemplars 3, histograms 4), where a Sample may carry a start timestamp (field 3)
and a Histogram one in field 17, the RW 2.0 messages' numbers.

:func:`encode_request` (RW 2.0 spec 2.0-rc.4; ``prompb/io/prometheus/write/v2/types.proto``)
turns such frames into one Request, written as gogo marshals it (fields in field-number
order, zero scalars and empty packed fields left out, the non-nullable ``metadata`` always
present):

- ``symbols`` (4): one table per request, ``""`` first, then each distinct string once in
  first-use order. Per series, in this order: its label names and values, its exemplars'
  label names and values, its metadata help and unit (Prometheus ``writev2.SymbolsTable``).
- per series, ``timeseries`` (5): ``labels_refs`` (1, packed pairs), the samples (2) copied as
  they are (an RW 2.0 Sample is RW 1.0's plus ``start_timestamp`` = 3), the histograms with
  their tag moved from 4 to 3 (RW 2.0's is RW 1.0's plus ``start_timestamp`` = 17), the
  exemplars (4) with their Label messages turned into ``labels_refs`` (other fields copied),
  and ``metadata`` (5) from ``resolve`` of the series' metric name; nothing found: an empty
  Metadata (``2a 00``), as Prometheus 3 sends (``populateV2TimeSeries``). Unknown TimeSeries
  fields are dropped (their numbers mean something else in RW 2.0).
- A series with samples and histograms becomes two (samples first; RW 2.0 spec: a TimeSeries
  MUST NOT carry both); its exemplars go with the first.
- A series carrying only exemplars (Prometheus's RW 1.0 and 2.0 senders put each exemplar in
  a TimeSeries of its own) is sent inside the first series of the request with the same labels
  that has samples or histograms: Prometheus 3's receiver answers 400 to an exemplar-only
  series (prometheus#17247, #17857; the spec asks for a sample or a histogram). Without such a
  series in the request (an "orphan": its series went in an earlier batch) it is left out and
  counted (``orphan_exemplars``): sent alone it would make that receiver refuse the whole
  request after writing the rest of it, and the refusal split the batch down to each orphan.

:func:`strip_start_timestamps` gives RW1-clean frames for an RW 1.0 destination.

Both are the compiled accelerator's (``rwrouter.wire._scan``, ``_rw2out.h``) when built,
else, or with ``RWROUTER_NO_EXTENSIONS`` set, the ``*_py`` references here: the same output
and the same errors (malformed input: the compiled code hands it to the reference).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from rwrouter.errors import DecodeError
from rwrouter.wire.accelerator import compiled
from rwrouter.wire.walk import LEN, encode_varint, fields

__all__ = [
    "ACCELERATED",
    "Encoded",
    "Meta",
    "Resolve",
    "encode_request",
    "encode_request_py",
    "strip_start_timestamps",
    "strip_start_timestamps_py",
]

Meta = tuple[int, bytes, bytes]
"""A series' metadata: (type, help, unit); type as the RW 1.0 ``MetricMetadata`` enum, whose
values RW 2.0's ``Metadata.MetricType`` shares (0 unknown .. 7 stateset)."""
Resolve = Callable[[bytes], Meta | None]
"""The metadata of a metric name (UTF-8 bytes), or None when unknown."""

_NAME = b"__name__"
_SAMPLE_START = 3  # Sample.start_timestamp (RW 2.0)
_HISTOGRAM_START = 17  # Histogram.start_timestamp (RW 2.0)


class Encoded(NamedTuple):
    """An encoded Request (uncompressed bytes) and what it carries: samples, native
    histograms and exemplars (what the ``X-Prometheus-Remote-Write-*-Written`` headers of
    the answer count)."""

    request: bytes
    samples: int
    histograms: int
    exemplars: int
    orphan_exemplars: int = 0
    """Exemplars of exemplar-only series left out (no series of their labels in the
    request)."""


class _Symbols:
    """The symbols table of one request: ``""`` is ref 0."""

    __slots__ = ("refs", "strings")

    def __init__(self) -> None:
        self.refs: dict[bytes, int] = {b"": 0}
        self.strings: list[bytes] = [b""]

    def ref(self, text: bytes) -> int:
        ref = self.refs.get(text)
        if ref is None:
            ref = self.refs[text] = len(self.strings)
            self.strings.append(text)
        return ref


@dataclass(slots=True)
class _Series:
    """One RW1 frame, parsed: label refs, samples (whole fields), histogram and converted
    exemplar payloads, the encoded Metadata payload, and adopted exemplar-only frames."""

    refs: list[int]
    samples: list[bytes] = field(default_factory=list)
    histograms: list[bytes] = field(default_factory=list)
    exemplars: list[bytes] = field(default_factory=list)
    meta: bytes = b""
    adopted: list[_Series] = field(default_factory=list)


def _label(buf: bytes, start: int, end: int) -> tuple[bytes, bytes]:
    """(name, value) of a Label payload (RW 1.0: name 1, value 2; the last one counts)."""
    name = value = b""
    for number, wire_type, _, vstart, vend in fields(buf, start, end, "label"):
        if number in (1, 2):
            if wire_type != LEN:
                raise DecodeError(f"bad protobuf: label field {number} has wire type {wire_type}")
            if number == 1:
                name = buf[vstart:vend]
            else:
                value = buf[vstart:vend]
    return name, value


def _packed(refs: list[int]) -> bytes:
    """A packed ``labels_refs`` field (1), or nothing when empty."""
    if not refs:
        return b""
    payload = b"".join(encode_varint(ref) for ref in refs)
    return b"\x0a" + encode_varint(len(payload)) + payload


def _exemplar(buf: bytes, start: int, end: int, symbols: _Symbols) -> bytes:
    """An RW 1.0 Exemplar payload as RW 2.0's: labels as refs first, other fields as they are."""
    refs: list[int] = []
    rest: list[bytes] = []
    for number, wire_type, head, vstart, vend in fields(buf, start, end, "exemplar"):
        if number == 1:
            if wire_type != LEN:
                raise DecodeError(f"bad protobuf: exemplar field 1 has wire type {wire_type}")
            name, value = _label(buf, vstart, vend)
            refs += (symbols.ref(name), symbols.ref(value))
        else:
            rest.append(buf[head:vend])
    return _packed(refs) + b"".join(rest)


def _metadata(meta: Meta | None, symbols: _Symbols) -> bytes:
    """The Metadata payload: type 1, help_ref 3, unit_ref 4 (each left out when 0)."""
    if meta is None:
        return b""
    kind, help_text, unit = meta
    help_ref = symbols.ref(help_text) if help_text else 0
    unit_ref = symbols.ref(unit) if unit else 0
    out = b"\x08" + encode_varint(kind) if kind else b""
    if help_ref:
        out += b"\x18" + encode_varint(help_ref)
    if unit_ref:
        out += b"\x20" + encode_varint(unit_ref)
    return out


def _lookup(name: bytes | None, memo: dict[bytes, Meta | None], resolve: Resolve) -> Meta | None:
    if name is None:
        return None
    if name in memo:
        return memo[name]
    return resolve(name)


def _parse(
    buf: bytes,
    start: int,
    end: int,
    symbols: _Symbols,
    memo: dict[bytes, Meta | None],
    resolve: Resolve,
) -> _Series:
    """One TimeSeries payload (RW1 form) as a :class:`_Series` (symbols in first-use order)."""
    series = _Series([])
    name: bytes | None = None
    exemplars: list[tuple[int, int]] = []
    for number, wire_type, head, vstart, vend in fields(buf, start, end, "series"):
        if number in (1, 2, 3, 4) and wire_type != LEN:
            raise DecodeError(f"bad protobuf: series field {number} has wire type {wire_type}")
        if number == 1:
            label, value = _label(buf, vstart, vend)
            series.refs += (symbols.ref(label), symbols.ref(value))
            if label == _NAME and name is None:
                name = value
        elif number == 2:
            series.samples.append(buf[head:vend])
        elif number == 3:
            exemplars.append((vstart, vend))
        elif number == 4:
            series.histograms.append(buf[vstart:vend])
    series.exemplars = [_exemplar(buf, s, e, symbols) for s, e in exemplars]
    series.meta = _metadata(_lookup(name, memo, resolve), symbols)
    return series


def _exemplars_only(series: _Series) -> bool:
    return bool(series.exemplars) and not (series.samples or series.histograms)


def _adopt(parsed: list[_Series]) -> tuple[list[_Series], int]:
    """The series to send: exemplar-only ones moved into the first series with the same
    labels that has samples or histograms, or left out when there is none (see the module
    docstring); and how many exemplars were left out."""
    if not any(_exemplars_only(s) for s in parsed):
        return parsed, 0
    targets: dict[tuple[int, ...], _Series] = {}
    for series in parsed:
        if series.samples or series.histograms:
            targets.setdefault(tuple(series.refs), series)
    out, orphans = [], 0
    for series in parsed:
        if not _exemplars_only(series):
            out.append(series)
        elif (target := targets.get(tuple(series.refs))) is not None:
            target.adopted.append(series)
        else:
            orphans += len(series.exemplars)
    return out, orphans


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + encode_varint(len(payload)) + payload


def _emit(series: _Series, out: bytearray) -> None:
    """Append the ``timeseries`` field(s) of one series to ``out``."""
    refs = _packed(series.refs)
    meta = _field(b"\x2a", series.meta)
    exemplars = [_field(b"\x22", e) for s in (series, *series.adopted) for e in s.exemplars]
    parts: list[list[bytes]] = []
    if series.samples:
        parts.append([refs, *series.samples, *exemplars, meta])
        exemplars = []
    if series.histograms:
        parts.append([refs, *(_field(b"\x1a", h) for h in series.histograms), *exemplars, meta])
    elif not series.samples:
        parts.append([refs, *exemplars, meta])
    for part in parts:
        out += _field(b"\x2a", b"".join(part))


def encode_request_py(body: bytes, memo: dict[bytes, Meta | None], resolve: Resolve) -> Encoded:
    """The RW 2.0 Request (uncompressed) of ``body``, RW1-form frames concatenated (see the
    module docstring). ``memo``: metadata already resolved by metric name (looked up first);
    ``resolve(name)`` for a name not in it (it may fill ``memo``). Top-level fields other
    than ``timeseries`` (1) are skipped.

    Raises DecodeError for malformed framing or the wrong wire type of a known field.
    """
    symbols = _Symbols()
    parsed: list[_Series] = []
    for number, wire_type, _, start, end in fields(body, 0, len(body), "WriteRequest"):
        if number != 1:
            continue
        if wire_type != LEN:
            raise DecodeError("bad protobuf: WriteRequest field 1 is not a message")
        parsed.append(_parse(body, start, end, symbols, memo, resolve))
    out = bytearray()
    for text in symbols.strings:
        out += _field(b"\x22", text)
    samples = histograms = exemplars = 0
    sent, orphans = _adopt(parsed)
    for series in sent:
        samples += len(series.samples)
        histograms += len(series.histograms)
        exemplars += sum(len(s.exemplars) for s in (series, *series.adopted))
        _emit(series, out)
    return Encoded(bytes(out), samples, histograms, exemplars, orphans)


def _without(buf: bytes, start: int, end: int, number: int, what: str) -> tuple[bytes, int]:
    """A message payload without its fields ``number`` (any wire type), and how many."""
    kept: list[bytes] = []
    removed = 0
    for field_number, _, head, _, vend in fields(buf, start, end, what):
        if field_number == number:
            removed += 1
        else:
            kept.append(buf[head:vend])
    return b"".join(kept), removed


def _strip_series(buf: bytes, start: int, end: int) -> tuple[bytes, int]:
    """A TimeSeries payload without start timestamps, and how many it had."""
    parts: list[bytes] = []
    removed = 0
    for number, wire_type, head, vstart, vend in fields(buf, start, end, "series"):
        if number in (2, 4) and wire_type == LEN:
            drop, what = (
                (_SAMPLE_START, "sample") if number == 2 else (_HISTOGRAM_START, "histogram")
            )
            inner, n = _without(buf, vstart, vend, drop, what)
            if n:
                removed += n
                parts.append(_field(b"\x12" if number == 2 else b"\x22", inner))
                continue
        parts.append(buf[head:vend])
    return b"".join(parts), removed


def strip_start_timestamps_py(body: bytes) -> tuple[bytes, int]:
    """``body`` (RW1-form frames concatenated) without start timestamps, for an RW 1.0
    destination: every Sample field 3 and Histogram field 17 (RW 2.0 numbers) removed, all
    other bytes as they were (``body`` itself when there was none); and how many were removed.

    Raises DecodeError for malformed framing.
    """
    parts: list[bytes] = []
    removed = 0
    for number, wire_type, head, start, end in fields(body, 0, len(body), "WriteRequest"):
        if number == 1 and wire_type == LEN:
            inner, n = _strip_series(body, start, end)
            if n:
                removed += n
                parts.append(_field(b"\x0a", inner))
                continue
        parts.append(body[head:end])
    return (b"".join(parts), removed) if removed else (body, 0)


Encoder = Callable[[bytes, dict[bytes, Meta | None], Resolve], Encoded]
Stripper = Callable[[bytes], tuple[bytes, int]]


def _select() -> tuple[Encoder, Stripper, bool]:
    encode_c = compiled("encode_v2")
    strip_c = compiled("strip_start_timestamps")
    if encode_c is None or strip_c is None:  # not built, disabled, or an older build
        return encode_request_py, strip_start_timestamps_py, False

    def encode_request_c(body: bytes, memo: dict[bytes, Meta | None], resolve: Resolve) -> Encoded:
        return Encoded._make(encode_c(body, memo, resolve))

    return encode_request_c, strip_c, True


encode_request, strip_start_timestamps, ACCELERATED = _select()
"""The encoder and the stripper in use (compiled when :data:`ACCELERATED`), with the
contracts of :func:`encode_request_py` and :func:`strip_start_timestamps_py`."""
