"""The receive path's per-series loop (pure): one pass over a decoded write request that splits
it into each destination's share, ready to queue.

:func:`scan_request` is the compiled accelerator's (:mod:`rwrouter.wire.accelerator`) when it
was built and :func:`scan_request_py` otherwise; both take the same arguments and give the
same result (tested on the benchmark workload, random series and malformed bodies). The same
holds for :func:`signature` (the routing cache's shortcut for canonical label sets).

The loop never decodes samples, exemplars or histograms: a series is split into the raw bytes
of its labels (the routing cache key) and the raw bytes of everything else, which go out bit for
bit behind the destination's encoded labels (see :mod:`rwrouter.wire.codec`). Routing itself is
the caller's: a cache of outcomes keyed by raw label bytes (:mod:`rwrouter.routing.cache`), in
two generations (``young``, then ``old``; a hit in ``old`` is copied to ``young``), and a
``miss`` callable for label sets in neither.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from rwrouter.errors import DecodeError
from rwrouter.reasons import DropReason
from rwrouter.routing.cache import Cache, Entry, Slot, entry_bytes, unpack_entry
from rwrouter.wire.accelerator import compiled
from rwrouter.wire.codec import RawSeries, split_series
from rwrouter.wire.index import INDEX
from rwrouter.wire.rw2_in import to_rw1
from rwrouter.wire.validate import check_metadata
from rwrouter.wire.walk import LEN, encode_varint, fields, read_varint

__all__ = [
    "Scan",
    "ScanRw2",
    "scan_request",
    "scan_request_py",
    "scan_rw2",
    "scan_rw2_py",
    "signature",
    "signature_py",
]

Miss = Callable[[bytes], Entry]
Review = tuple[int, Callable[[bytes, Entry], Entry]]
"""A review of misses: (mask: bit ``i`` set for destination ``i``, ``review(raw_labels, entry)
-> entry``), the caller's decision over an outcome that keeps the series at one of those
destinations (a series budget: :class:`rwrouter.routing.BudgetedRouter`)."""
Templates = dict[tuple[bytes | None, ...], tuple[bytes, ...]]
"""The miss path's templates: values of the labels the rules read -> entry pieces around
the shard hash (``hash.join(pieces)`` is the entry)."""
Signature = Callable[[bytes, tuple[bytes, ...], bool], tuple[bytes | None, ...] | None]
Filter = Callable[[int, RawSeries], tuple[bytes, int]]


class Scan(NamedTuple):
    """One write request split per destination (lists in config order).

    ``bodies[i]``: framed ``timeseries`` fields (field 1 of ``prometheus.WriteRequest``)
    concatenated, so ``snappy(bodies[i])`` is a valid write request. ``indexes[i]``: per frame,
    :data:`INDEX` = (frame bytes, samples, shard hash). ``samples[i]``/``series[i]``: totals.
    ``dropped``: samples not sent, by (destination index, reason: a
    :class:`~rwrouter.reasons.DropReason` value, a plain str from the compiled loop, which the
    router turns into the member). ``samples_in``: samples +
    exemplars + histograms received, ``series_in``: series received. ``metadata``: the raw
    MetricMetadata payloads (checked), in order. ``hits``: cache lookups answered by ``young``
    or ``old``; ``promoted``/``promoted_bytes``: entries copied from ``old`` to ``young`` and
    their size (key and encoded labels, bytes). ``misses``/``miss_bytes``: label sets not
    cached that the loop routed itself from ``templates`` (then ``miss`` was not called);
    ``miss_bytes`` also counts the copy the compiled RW 2.0 loop caches under a series'
    folded digest of an outcome ``miss`` gave (and cached under the bytes' digest).
    """

    bodies: list[bytes]
    indexes: list[bytes]
    samples: list[int]
    series: list[int]
    dropped: dict[tuple[int, str], int]
    samples_in: int
    series_in: int
    metadata: list[bytes]
    hits: int
    promoted: int
    promoted_bytes: int
    misses: int = 0  # misses answered by the loop itself from a template (compiled loop only)
    miss_bytes: int = 0  # what those added to ``young`` (key and entry bytes)


def scan_request_py(
    data: bytes,
    young: Cache,
    old: Cache,
    miss: Miss,
    filters: tuple[bool, ...],
    filt: Filter,
    reasons: tuple[str, ...],
    templates: Templates | None = None,
    names: tuple[bytes, ...] = (),
    legacy: bool = False,
    plan: tuple[object, object, object] | None = None,
    review: Review | None = None,
) -> Scan:
    """Split a decompressed write request (RW 1.0) into per-destination shares.

    ``young``/``old``: the routing cache (read; ``young`` also gets what ``old`` answered).
    ``miss(raw_labels)``: the outcome of a label set in neither (the caller caches it).
    ``reasons``: the drop reasons an :data:`Entry` refers to by index.
    ``templates``/``names``/``legacy``: the miss path's template shortcut
    (:meth:`rwrouter.routing.Router._from_template`, with :func:`signature` ``(raw, names,
    legacy)``), which the compiled loop applies itself; this loop leaves it to ``miss`` (same
    entries). ``plan``: ``route_labels``' arguments after the key (``Router._route_raw``):
    the compiled loop then routes a miss itself without the template shortcut, caching and
    counting it; ``miss`` must give the same entry. This loop calls ``miss``.
    ``review``: None, or (mask, ``review(raw_labels, entry)``): the compiled loop gives an
    entry it made itself (template shortcut, plan) that keeps the series at a destination of
    ``mask`` (:func:`~rwrouter.routing.cache.keeps_at`) to ``review`` and caches and applies
    what it returns (a series budget's decision, per label set); ``miss`` must give the entry
    so reviewed. This loop calls ``miss`` for every miss, so it does not call ``review``.
    ``filters[i]``: destination ``i`` takes only some of exemplars/histograms; then
    ``filt(i, raw_series)`` gives (the series' remaining raw fields, samples left). A series
    without samples, exemplars or histograms is looked up (its labels are checked) but not
    sent. Unknown top-level fields are skipped; unknown series fields travel with the samples.

    Raises DecodeError (a 400) for malformed framing, wire types or metadata, or whatever
    ``miss`` raises for invalid labels (the whole request is refused).
    """
    shares = _Shares(len(filters))
    for field, wire_type, _, start, end in fields(data, 0, len(data), "WriteRequest"):
        if field != 1 and field != 3:
            continue
        if wire_type != LEN:
            raise DecodeError(f"bad protobuf: WriteRequest field {field} is not a message")
        if field == 3:
            shares.metadata.append(check_metadata(data, start, end))
            continue
        shares.series_in += 1
        raw = split_series(data[start:end])
        entry, found, copied = _lookup(raw.labels, young, old, miss)
        shares.hits += found
        shares.promoted += copied > 0
        shares.promoted_bytes += copied
        n = raw.samples + raw.exemplars + raw.histograms
        if n:
            shares.samples_in += n
            shares.apply(raw, n, unpack_entry(raw.labels, entry), filters, filt, reasons)
    return shares.scan()


class ScanRw2(NamedTuple):
    """An RW 2.0 request split per destination: ``scan`` as :func:`scan_request` gives it for
    the request's RW1 form, and what the request carried (its Written headers' counts, and
    whether some Sample or Histogram has a start timestamp), as
    :class:`~rwrouter.wire.rw2_in.Converted` counts them."""

    scan: Scan
    samples: int
    histograms: int
    exemplars: int
    start_timestamps: bool


def scan_rw2_py(data: bytes, max_bytes: int | None, *args: object) -> ScanRw2:
    """Split a decompressed RW 2.0 request (``io.prometheus.write.v2.Request``) into
    per-destination shares: :func:`~rwrouter.wire.rw2_in.to_rw1` (``max_bytes``: the largest
    RW1 form, bytes; None: no limit), then :func:`scan_request` with ``args`` (its arguments
    after ``data``). The reference of the compiled ``scan_rw2``, which routes the series
    without writing the RW1 form out (same result).

    Raises what ``to_rw1`` raises (DecodeError, TooLargeError), then what :func:`scan_request`
    raises.
    """
    converted = to_rw1(data, max_bytes=max_bytes)
    scan = scan_request(converted.data, *args)
    return ScanRw2(
        scan,
        converted.samples,
        converted.histograms,
        converted.exemplars,
        converted.start_timestamps,
    )


def _lookup(key: bytes, young: Cache, old: Cache, miss: Miss) -> tuple[Entry, bool, int]:
    """The routing outcome of the raw labels ``key``: (entry, answered by the cache, bytes
    copied from ``old`` to ``young``: 0 when not copied)."""
    entry = young.get(key)
    if entry is not None:
        return entry, True, 0
    entry = old.get(key)
    if entry is not None:
        young[key] = entry
        return entry, True, entry_bytes(key, entry)
    return miss(key), False, 0


class _Shares:
    """The per-destination shares and counters of :func:`scan_request_py` as they are built."""

    def __init__(self, ndest: int) -> None:
        self.bodies = [bytearray() for _ in range(ndest)]
        self.indexes = [bytearray() for _ in range(ndest)]
        self.samples, self.series = [0] * ndest, [0] * ndest
        self.dropped: dict[tuple[int, str], int] = {}
        self.metadata: list[bytes] = []
        self.samples_in = self.series_in = self.hits = self.promoted = self.promoted_bytes = 0

    def scan(self) -> Scan:
        """What was built, as the :class:`Scan` of the request."""
        return Scan(
            [bytes(b) for b in self.bodies],
            [bytes(x) for x in self.indexes],
            self.samples,
            self.series,
            self.dropped,
            self.samples_in,
            self.series_in,
            self.metadata,
            self.hits,
            self.promoted,
            self.promoted_bytes,
        )

    def _drop(self, i: int, reason: str, n: int) -> None:
        self.dropped[(i, reason)] = self.dropped.get((i, reason), 0) + n

    def apply(
        self,
        raw: RawSeries,
        n: int,
        slots: list[Slot],
        filters: tuple[bool, ...],
        filt: Filter,
        reasons: tuple[str, ...],
    ) -> None:
        """Add the series ``raw`` (``n`` samples, exemplars and histograms) to the shares its
        entry's ``slots`` keep, and count it where they drop it."""
        for i, slot in enumerate(slots):
            if slot is None:
                continue
            if isinstance(slot, int):
                self._drop(i, reasons[slot], n)
                continue
            labels, hashed = slot
            rest, kept = raw.rest, n
            if filters[i] and (raw.exemplars or raw.histograms):
                rest, kept = filt(i, raw)
                if not kept:
                    self._drop(i, DropReason.FILTERED, n)
                    continue
            inner = len(labels) + len(rest)
            head = b"\x0a" + encode_varint(inner)
            body = self.bodies[i]
            body += head
            body += labels
            body += rest
            self.indexes[i] += INDEX.pack(len(head) + inner, kept, hashed)
            self.samples[i] += kept
            self.series[i] += 1


_LEGACY_LABEL = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789")
_LEGACY_METRIC = _LEGACY_LABEL | {ord(":")}
_DIGITS = frozenset(b"0123456789")


def _legacy(text: bytes, allowed: frozenset[int]) -> bool:
    """Whether ``text`` (non-empty) is a legacy name of the character set ``allowed``: no
    digit first (the RW 1.0 label rules)."""
    return text[0] not in _DIGITS and all(byte in allowed for byte in text)


def signature_py(
    raw: bytes, names: tuple[bytes, ...], legacy: bool = False
) -> tuple[bytes | None, ...] | None:
    """The values of the labels ``names`` (sorted by byte order) in ``raw``, the raw Label
    fields of a series, if ``raw`` is canonical: every Label exactly ``0a len 0a len name 12
    len value`` with minimal varints, names and values non-empty ASCII, names strictly
    increasing, and with ``legacy`` every name a legacy label name
    (``[a-zA-Z_][a-zA-Z0-9_]*``) and the ``__name__`` value a legacy metric name
    (``[a-zA-Z_:][a-zA-Z0-9_:]*``: no escaping scheme changes such a set). Then
    :func:`decode_labels` of ``raw`` gives its labels in order and :func:`encode_labels` of
    those gives ``raw`` back. None when not canonical (the caller decodes it the full way). An
    absent name has the value None."""
    values: list[bytes | None] = [None] * len(names)
    wanted = {name: i for i, name in enumerate(names)}
    pos, end, previous = 0, len(raw), b""
    try:
        while pos < end:
            if raw[pos] != 0x0A:
                return None
            length, start = read_varint(raw, pos + 1, end)
            stop = start + length
            if start - pos - 1 != len(encode_varint(length)) or stop > end:
                return None
            if start >= stop or raw[start] != 0x0A:
                return None
            nlen, at = read_varint(raw, start + 1, stop)
            if at - start - 1 != len(encode_varint(nlen)) or not nlen or at + nlen > stop:
                return None
            name = raw[at : at + nlen]
            at += nlen
            if at >= stop or raw[at] != 0x12:
                return None
            vlen, vat = read_varint(raw, at + 1, stop)
            if vat - at - 1 != len(encode_varint(vlen)) or not vlen or vat + vlen != stop:
                return None
            value = raw[vat:stop]
            if not (name.isascii() and value.isascii()) or (previous and name <= previous):
                return None
            if legacy and not _legacy(name, _LEGACY_LABEL):
                return None
            if legacy and name == b"__name__" and not _legacy(value, _LEGACY_METRIC):
                return None
            previous = name
            if name in wanted:
                values[wanted[name]] = value
            pos = stop
    except DecodeError:
        return None
    return tuple(values)


def _scan_request() -> Callable[..., Scan]:
    compiled_scan = compiled("scan_request")
    if compiled_scan is None:
        return scan_request_py

    def scan_request_c(*args: object) -> Scan:  # the arguments of scan_request_py
        return Scan._make(compiled_scan(*args))

    return scan_request_c


scan_request: Callable[..., Scan] = _scan_request()


def _scan_rw2() -> Callable[..., ScanRw2]:
    compiled_scan = compiled("scan_rw2")
    if compiled_scan is None:
        return scan_rw2_py

    def scan_rw2_c(data: bytes, max_bytes: int | None, *args: object) -> ScanRw2:
        result = compiled_scan(data, max_bytes, *args)
        if result is None:  # malformed, unusual or refused: the reference decides
            return scan_rw2_py(data, max_bytes, *args)
        scan, *counts = result
        return ScanRw2(Scan._make(scan), *counts)

    return scan_rw2_c


scan_rw2: Callable[..., ScanRw2] = _scan_rw2()
signature: Signature = compiled("signature") or signature_py
"""The per-series loops (RW 1.0, RW 2.0) and the signature in use (compiled when
:data:`rwrouter.wire.accelerator.ACCELERATED`), with the contracts of :func:`scan_request_py`,
:func:`scan_rw2_py` and :func:`signature_py`."""
