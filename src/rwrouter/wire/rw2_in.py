"""Remote write 2.0 in (pure): an ``io.prometheus.write.v2.Request`` turned into the RW1 form.

The receive path has one form inside, the RW1 form (a ``prometheus.WriteRequest``, RW 1.0
field numbers, docs/DEVELOPING.md "Remote write 1.0 and 2.0: one form inside"), which the
per-series loop (:mod:`rwrouter.routing.scan`) routes as it routes an RW 1.0 request. This module
converts a decompressed RW 2.0 request into it. Source of the field numbers: the RW 2.0 spec
(2.0-rc.4) and Prometheus ``prompb/io/prometheus/write/v2/types.proto``; of what is refused,
Prometheus ``storage/remote/write_handler.go`` (``appendV2``) and the spec.

- ``symbols`` (field 4) are collected first, wherever they are in the message; symbols[0]
  must be the empty string. The table and the series are held as offsets into the request
  (4 bytes each, a field being at least 2 bytes: memory at most twice the request's, where a
  bytes object per symbol cost 20 times). A symbol is used as bytes: the strings forwarded are UTF-8
  checked by the RW1 path (series labels by ``decode_labels`` when the routing cache misses,
  exemplar labels by ``check_exemplar``, metric names, help and unit by ``check_metadata``).
- Each ``timeseries`` (field 5) becomes one RW1 ``TimeSeries``, fields in RW1 order: its
  ``labels_refs`` (packed, or one varint per ref) resolved into ``Label`` messages
  (``0a len 0a nlen name 12 vlen value``) in the sender's order, so a series whose refs are
  sorted by name gets the bytes Prometheus's own RW 1.0 encoding gives it (the same routing
  cache key); its samples copied as they are (field 2 both ways; a start timestamp stays in
  the Sample as field 3); its exemplars rebuilt with ``Label`` messages (value and timestamp
  copied); its histograms copied with the tag moved from field 3 to field 4 (a start
  timestamp stays as field 17). Other TimeSeries fields (rc.3's ``created_timestamp`` = 6,
  reserved in rc.4) are dropped: their numbers mean nothing in RW 1.0.
- Per-series ``metadata`` (field 5) becomes request-level RW1 ``MetricMetadata`` entries
  (field 3 of the WriteRequest), one per distinct (family, type, help, unit) in order of
  first appearance; none for an empty one (type unspecified, no help, no unit) or a series
  without a metric name. The family is the metric name without the suffix of its type's
  series (Prometheus ``scrape/scrape.go`` ``isSeriesPartOfFamily``): ``_bucket``/``_sum``/
  ``_count`` for a histogram, ``_bucket``/``_gsum``/``_gcount`` for a gauge histogram,
  ``_sum``/``_count`` for a summary. The RW 2.0 type values equal RW 1.0's; an unknown value
  is UNKNOWN (0), as Prometheus's ``ToMetadata`` reads it.

Everything is checked as the RW1 path checks what it forwards (:mod:`rwrouter.wire.walk`,
:mod:`rwrouter.wire.validate`); anything malformed raises :class:`~rwrouter.errors.DecodeError`
(400) with a one-line reason naming the series, an RW1 form over the size limit
:class:`~rwrouter.errors.TooLargeError` (413). :func:`to_rw1` is the compiled accelerator's
``rw2_to_rw1`` (``_rw2in.h``) when it was built, else :func:`to_rw1_py` (the reference: same
result, same errors), selected by :func:`rwrouter.wire.accelerator.compiled`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import NamedTuple

from rwrouter.errors import DecodeError, TooLargeError
from rwrouter.protocol import Written
from rwrouter.wire.accelerator import compiled
from rwrouter.wire.validate import check_histogram, check_sample
from rwrouter.wire.walk import I64, LEN, VARINT, encode_varint, fields, read_varint

__all__ = ["ACCELERATED", "Converted", "to_rw1", "to_rw1_py"]

# RW 1.0 tags (field << 3 | wire type) of what the RW1 form is made of.
_SERIES, _LABEL, _NAME, _VALUE = b"\x0a", b"\x0a", b"\x0a", b"\x12"
_SAMPLE, _EXEMPLAR, _HISTOGRAM, _METADATA = b"\x12", b"\x1a", b"\x22", b"\x1a"
_EXEMPLAR_VALUE, _EXEMPLAR_TIMESTAMP = b"\x11", b"\x18"
_METRIC_NAME = b"__name__"
# Series-name suffixes of a family, by metric type (HISTOGRAM, GAUGEHISTOGRAM, SUMMARY).
_SUFFIXES = {
    3: (b"_bucket", b"_sum", b"_count"),
    4: (b"_bucket", b"_gsum", b"_gcount"),
    5: (b"_sum", b"_count"),
}
_MAX_TYPE = 7  # STATESET: the last metric type of both protocols


class Converted(NamedTuple):
    """An RW 2.0 request in the RW1 form.

    ``data``: a ``prometheus.WriteRequest`` (bytes, not compressed). ``samples``,
    ``histograms``, ``exemplars``: how many the request carried (the counts of its Written
    headers once accepted). ``start_timestamps``: some Sample (field 3) or Histogram (field
    17) carries a non-zero start timestamp (the queue records get ``FLAG_START_TIMESTAMPS``).
    """

    data: bytes
    samples: int
    histograms: int
    exemplars: int
    start_timestamps: bool

    @property
    def written(self) -> Written:
        """The counts as the RW 2.0 Written headers give them."""
        return Written(self.samples, self.histograms, self.exemplars)


def _len_field(tag: bytes, payload: bytes | bytearray) -> bytes:
    return tag + encode_varint(len(payload)) + payload


class _Budget:
    """The bytes the RW1 form may still take: every piece of the output is taken once,
    labels before they are written out (a few refs to a long symbol cannot blow the memory
    up first)."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.left = -1 if limit is None else limit

    def take(self, n: int) -> None:
        if self.limit is None:
            return
        self.left -= n
        if self.left < 0:
            raise TooLargeError(
                f"the RW 2.0 request is over {self.limit} bytes once its labels "
                f"are written out (server.max_decoded_bytes)"
            )


class _Symbols:
    """A Request's symbols table: (start, end) offsets of each symbol in ``data``;
    ``symbols[ref]`` is its bytes."""

    __slots__ = ("data", "spans")

    def __init__(self, data: bytes, spans: array[int]) -> None:
        self.data, self.spans = data, spans

    def __len__(self) -> int:
        return len(self.spans) // 2

    def __getitem__(self, ref: int) -> bytes:
        return self.data[self.spans[2 * ref] : self.spans[2 * ref + 1]]


def _request_parts(data: bytes) -> tuple[_Symbols, array[int]]:
    """The symbols table and the spans of the TimeSeries payloads of a Request (start, end
    pairs). Other fields (1-3 are reserved) are skipped once their framing is checked; a first
    symbol that is not empty is refused at once."""
    code = "I" if len(data) < 1 << 32 else "Q"
    symbols, series = array(code), array(code)
    for field, wire_type, _, start, end in fields(data, 0, len(data), "RW 2.0 Request"):
        if field != 4 and field != 5:
            continue
        if wire_type != LEN:
            what = "symbols" if field == 4 else "timeseries"
            raise DecodeError(
                f"bad protobuf: RW 2.0 Request field {field} ({what}) has wire type {wire_type}"
            )
        if field == 5:
            series.append(start)
            series.append(end)
            continue
        if not symbols and end > start:
            shown = data[start : min(end, start + 40)].decode("utf-8", "replace")
            raise DecodeError(f"symbols[0] must be the empty string (RW 2.0 spec), got {shown!r}")
        symbols.append(start)
        symbols.append(end)
    return _Symbols(data, symbols), series


def _refs(buf: bytes, wire_type: int, start: int, end: int) -> list[int]:
    """The refs of one ``labels_refs`` field: packed (LEN) or a single varint."""
    if wire_type == VARINT:
        return [read_varint(buf, start, end)[0]]
    if wire_type != LEN:
        raise DecodeError(f"bad protobuf: labels_refs has wire type {wire_type}")
    refs = []
    while start < end:
        ref, start = read_varint(buf, start, end)
        refs.append(ref)
    return refs


def _label_size(name: bytes, value: bytes) -> int:
    inner = 2 + len(encode_varint(len(name))) + len(name) + len(encode_varint(len(value)))
    inner += len(value)
    return 1 + len(encode_varint(inner)) + inner


def _labels(refs: list[int], symbols: _Symbols, budget: _Budget) -> tuple[bytes, bytes]:
    """The RW1 Label fields of ``refs`` (name, value pairs into ``symbols``), in order, and
    the value of the first ``__name__`` (b"" when there is none); taken from ``budget``."""
    if len(refs) % 2:
        raise DecodeError(
            f"odd number of labels_refs ({len(refs)}): they come in name, value pairs"
        )
    size = len(symbols)
    for ref in refs:
        if ref >= size:
            raise DecodeError(f"label ref {ref} is outside the symbols table (size {size})")
    pairs = [(symbols[refs[k]], symbols[refs[k + 1]]) for k in range(0, len(refs), 2)]
    budget.take(sum(_label_size(name, value) for name, value in pairs))
    out = bytearray()
    metric = b""
    for name, value in pairs:
        out += _len_field(_LABEL, _len_field(_NAME, name) + _len_field(_VALUE, value))
        if name == _METRIC_NAME and not metric:
            metric = value
    return bytes(out), metric


def _has_start(buf: bytes, start: int, end: int, field_number: int) -> bool:
    """Whether a (checked) Sample or Histogram has a non-zero ``field_number`` varint."""
    for field, wire_type, _, vstart, vend in fields(buf, start, end, "message"):
        if field == field_number and wire_type == VARINT and read_varint(buf, vstart, vend)[0]:
            return True
    return False


def _exemplar(buf: bytes, start: int, end: int, symbols: _Symbols, budget: _Budget) -> bytes:
    """One RW1 ``Exemplar`` field: labels from refs, then value and timestamp as they come
    (other fields dropped)."""
    refs: list[int] = []
    rest = bytearray()
    for field, wire_type, _, vstart, vend in fields(buf, start, end, "exemplar"):
        if field == 1:
            refs += _refs(buf, wire_type, vstart, vend)
        elif field == 2 or field == 3:
            expected = I64 if field == 2 else VARINT
            if wire_type != expected:
                raise DecodeError(f"bad protobuf: exemplar field {field} has wire type {wire_type}")
            rest += (_EXEMPLAR_VALUE if field == 2 else _EXEMPLAR_TIMESTAMP) + buf[vstart:vend]
    labels, _ = _labels(refs, symbols, budget)
    out = _len_field(_EXEMPLAR, labels + rest)
    budget.take(len(out) - len(labels))
    return out


def _metadata(buf: bytes, start: int, end: int, meta: list[int]) -> None:
    """Merge one ``metadata`` field into ``meta`` = [type, help_ref, unit_ref] (a later value
    replaces an earlier one, as protobuf merges a repeated message field)."""
    for field, wire_type, _, vstart, vend in fields(buf, start, end, "metadata"):
        if field == 1 or field == 3 or field == 4:
            if wire_type != VARINT:
                raise DecodeError(f"bad protobuf: metadata field {field} has wire type {wire_type}")
            meta[field - 2 if field > 1 else 0] = read_varint(buf, vstart, vend)[0]


def _family(metric: bytes, metric_type: int) -> bytes:
    for suffix in _SUFFIXES.get(metric_type, ()):
        if metric.endswith(suffix) and len(metric) > len(suffix):
            return metric[: -len(suffix)]
    return metric


def _metadata_entry(meta: list[int], metric: bytes, symbols: _Symbols) -> bytes | None:
    """The RW1 ``MetricMetadata`` payload of a series' metadata, or None (empty, or no metric
    name to name the family by)."""
    metric_type, help_ref, unit_ref = meta
    size = len(symbols)
    for what, ref in (("help_ref", help_ref), ("unit_ref", unit_ref)):
        if ref and ref >= size:
            raise DecodeError(f"metadata {what} {ref} is outside the symbols table (size {size})")
    help_text = symbols[help_ref] if help_ref else b""
    unit = symbols[unit_ref] if unit_ref else b""
    metric_type = metric_type if metric_type <= _MAX_TYPE else 0
    if not (metric_type or help_text or unit) or not metric:
        return None
    out = bytearray(b"\x08" + encode_varint(metric_type) if metric_type else b"")
    out += _len_field(b"\x12", _family(metric, metric_type))
    if help_text:
        out += _len_field(b"\x22", help_text)
    if unit:
        out += _len_field(b"\x2a", unit)
    return bytes(out)


class _Series(NamedTuple):
    frame: bytes  # the RW1 ``timeseries`` field
    metadata: bytes | None  # its MetricMetadata payload
    samples: int
    histograms: int
    exemplars: int
    start_timestamps: bool


def _series(buf: bytes, start: int, end: int, symbols: _Symbols, budget: _Budget) -> _Series:
    """One RW 2.0 TimeSeries payload in the RW1 form (its frame taken from ``budget``; its
    metadata entry is the caller's to take, once per distinct entry)."""
    refs: list[int] = []
    samples, exemplars, histograms = bytearray(), bytearray(), bytearray()
    counts = [0, 0, 0]  # samples, histograms, exemplars
    meta = [0, 0, 0]
    starts = False
    for field, wire_type, _, vstart, vend in fields(buf, start, end, "series"):
        if field == 1:
            refs += _refs(buf, wire_type, vstart, vend)
            continue
        if field > 5:  # unknown: dropped
            continue
        if wire_type != LEN:
            raise DecodeError(f"bad protobuf: series field {field} has wire type {wire_type}")
        if field == 2:
            check_sample(buf, vstart, vend)
            starts = starts or _has_start(buf, vstart, vend, 3)
            copied = _len_field(_SAMPLE, buf[vstart:vend])
            budget.take(len(copied))
            samples += copied
        elif field == 3:
            check_histogram(buf, vstart, vend)
            starts = starts or _has_start(buf, vstart, vend, 17)
            copied = _len_field(_HISTOGRAM, buf[vstart:vend])
            budget.take(len(copied))
            histograms += copied
        elif field == 4:
            try:
                exemplars += _exemplar(buf, vstart, vend, symbols, budget)
            except DecodeError as exc:
                raise DecodeError(f"exemplars[{counts[2]}]: {exc}") from None
        else:
            _metadata(buf, vstart, vend, meta)
            continue
        counts[field - 2 if field < 4 else 2] += 1
    labels, metric = _labels(refs, symbols, budget)
    inner = len(labels) + len(samples) + len(exemplars) + len(histograms)
    budget.take(1 + len(encode_varint(inner)))
    frame = _len_field(_SERIES, labels + samples + exemplars + histograms)
    entry = _metadata_entry(meta, metric, symbols)
    return _Series(frame, entry, counts[0], counts[1], counts[2], starts)


def to_rw1_py(data: bytes, *, max_bytes: int | None = None) -> Converted:
    """Convert a decompressed RW 2.0 ``io.prometheus.write.v2.Request`` into the RW1 form
    (see the module docstring); the reference of the compiled ``rw2_to_rw1``. ``max_bytes``:
    the largest RW1 form accepted (bytes; None: no limit). Labels are written out in full
    (typically 3-6 times the RW 2.0 request's size), and a few refs to a long symbol could
    make it as large as anyone likes.

    Raises DecodeError (400) for malformed framing or wire types, symbols[0] not empty, an
    odd number of label refs or a ref outside the symbols table (in a series, an exemplar or
    metadata), the reason naming the series by its index (``timeseries[3]: ...``);
    TooLargeError (413) when the RW1 form would be over ``max_bytes``.
    """
    symbols, spans = _request_parts(data)
    budget = _Budget(max_bytes)
    out = bytearray()
    metadata: dict[bytes, None] = {}
    samples = histograms = exemplars = 0
    starts = False
    for i in range(len(spans) // 2):
        try:
            series = _series(data, spans[2 * i], spans[2 * i + 1], symbols, budget)
        except DecodeError as exc:
            raise DecodeError(f"timeseries[{i}]: {exc}") from None
        out += series.frame
        if series.metadata is not None and series.metadata not in metadata:
            budget.take(len(_len_field(_METADATA, series.metadata)))
            metadata[series.metadata] = None
        samples += series.samples
        histograms += series.histograms
        exemplars += series.exemplars
        starts = starts or series.start_timestamps
    for payload in metadata:
        out += _len_field(_METADATA, payload)
    return Converted(bytes(out), samples, histograms, exemplars, starts)


Convert = Callable[..., Converted]  # (data, *, max_bytes=None), as to_rw1_py


def _select() -> tuple[Convert, bool]:
    convert = compiled("rw2_to_rw1")
    if convert is None:  # not built, disabled, or an accelerator built before RW 2.0
        return to_rw1_py, False

    def to_rw1_c(data: bytes, *, max_bytes: int | None = None) -> Converted:
        return Converted._make(convert(data, max_bytes))

    return to_rw1_c, True


to_rw1, ACCELERATED = _select()
"""The conversion in use (compiled when :data:`ACCELERATED`), with the contract of
:func:`to_rw1_py`."""
