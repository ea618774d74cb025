"""Queue records: a destination's share of one write request, as the durable queue stores it
(pure: bytes in, bytes out).

A record holds whole framed ``timeseries`` fields (field 1 of ``prometheus.WriteRequest``, RW
1.0 spec) exactly as the router will send them, so the concatenated frames are a valid write
request body: ``body = snappy(frame_1 + ... + frame_n)``. Beside the body, an index gives each
frame's length, sample count and shard hash, so reading a record back never walks protobuf.

Layout (little-endian)::

    u32 length of what follows the checksum   u32 zlib.crc32 of what follows it
    u8 version (1)  u8 kind (0 = samples)  u16 flags
    i64 received_ms (unix milliseconds)  u32 series  u32 samples  u32 raw body length
    [u8 tenant length, the tenant's ASCII bytes]     only with FLAG_TENANT
    [u64 group]                                      only with FLAG_GROUP
    series x (u32 frame length, u32 samples, u32 shard hash)
    snappy block of the raw body

``flags`` (0 in records written before they existed): :data:`FLAG_START_TIMESTAMPS`, some
frame may carry what only remote write 2.0 can send (a start timestamp inside a Sample, field
3, or a Histogram, field 17: the RW 2.0 messages' numbers), so a remote write 1.0 sender
strips them instead of sending the stored block as it is. :data:`FLAG_TENANT`: the record
carries the tenant of its series (:mod:`rwrouter.config.tenant`: at most 150 ASCII bytes), for
a destination that sends it (``tenant_header``); records without a tenant are byte for byte
what they were before tenants existed. :data:`FLAG_GROUP`: the record carries the batch group
of its request (:func:`rwrouter.routing.ha.group_of`: the request is one replica's of an HA
pair), and records of different groups never share an outgoing request; a record without
one is byte for byte what it was before groups existed (a reader that predates the flag
cannot read a record with it: it changes where the index starts; so can a reader that
predates tenants not read one with a tenant: drain the queue before a downgrade,
docs/configuration.md "Upgrades and downgrades"). Bits 4 to 15
(:func:`record_shards`): the number of shards N the record was cut for, 0 for none: every
frame of such a record has the same shard hash modulo N, so while the destination runs N
shards the record goes to its shard whole, as it is stored (no decompressing and compressing
again to split it by shard). Readers that predate these bits ignore them, as they ignore any
flag they do not know.

A torn or corrupt record fails the length or checksum test (:func:`check_record`). A record's
raw body never exceeds the destination's ``max_request_bytes``: :func:`encode_share` splits a
share into as many records as needed, and refuses series that alone are larger.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from rwrouter.errors import DecodeError, TooLargeError
from rwrouter.routing import shard_hash
from rwrouter.wire import compress, declared_size, decompress
from rwrouter.wire.accelerator import crc32
from rwrouter.wire.index import INDEX, Frames, index_totals, split_shards

__all__ = [
    "FLAG_GROUP",
    "FLAG_START_TIMESTAMPS",
    "FLAG_TENANT",
    "HEADER",
    "MAX_ALIGNED_SHARDS",
    "MAX_RECORD_BYTES",
    "META_SIZE",
    "MIN_ALIGNED_SERIES",
    "EncodedShare",
    "Record",
    "check_record",
    "decode_record",
    "encode_share",
    "record_samples",
    "record_shards",
    "shard_hash",
]

VERSION = 1
KIND_SAMPLES = 0
FLAG_START_TIMESTAMPS = 1  # some frame has a start timestamp (RW 2.0 only): strip for RW 1.0
FLAG_TENANT = 2  # the tenant of the record's series follows the fixed part
FLAG_GROUP = 4  # the batch group (u64, HA pairs) follows the fixed part (and the tenant)
_GROUP = struct.Struct("<Q")
SHARDS_SHIFT = 4  # flags >> 4: the shard count the record was cut for (0: none)
MAX_ALIGNED_SHARDS = 0xFFF  # the most that fits those 12 bits
MIN_ALIGNED_SERIES = 128
"""A share is cut by shard only if each shard's records average at least this many series:
every record costs the queue and the sending side something of its own (a header, a checksum,
Python objects on the sending side), which a record of a few series would not save in
splitting (a judgement from the profiles, not a measured break-even)."""
HEADER = struct.Struct("<II")  # length of the rest, crc32 of the rest
_META = struct.Struct("<BBHqIII")  # version, kind, flags, received_ms, series, samples, raw
META_SIZE = _META.size  # bytes of the fixed part after the header
MAX_RECORD_BYTES = 1 << 30  # a length field above this is garbage, not a record (1 GiB)
_set = object.__setattr__  # Record is immutable, as Frames


@dataclass(slots=True)
class EncodedShare:
    """A destination's share of one request, ready to append: ``records`` (each a complete
    record, header included), and the totals over them. ``too_large`` counts the samples of
    series left out because their frame alone is over ``max_body_bytes`` (``too_large_series``
    of them, the largest ``too_large_bytes`` bytes): the fan-out refuses such a request (413)."""

    records: list[bytes] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)  # per record
    series: int = 0
    nbytes: int = 0  # bytes of all records, headers included
    too_large: int = 0
    too_large_series: int = 0
    too_large_bytes: int = 0  # the largest frame left out, bytes
    tenant: bytes = b""  # the tenant field of every record (FLAG_TENANT), or nothing
    group: bytes = b""  # the group field of every record (FLAG_GROUP), or nothing

    @property
    def total_samples(self) -> int:
        return sum(self.samples)


def encode_share(
    share: Frames,
    *,
    received_ms: int,
    max_body_bytes: int,
    flags: int = 0,
    tenant: str | None = None,
    shards: int = 1,
    group: int = 0,
) -> EncodedShare:
    """Pack a destination's share (:class:`~rwrouter.wire.index.Frames`: framed series and
    their index) into records whose raw body is at most ``max_body_bytes`` bytes each,
    keeping the frames' order. A frame alone over the limit is refused (counted in
    ``too_large``). ``received_ms``: milliseconds since the epoch; ``flags``: set on every
    record (:data:`FLAG_START_TIMESTAMPS`); ``tenant``: stored in every record
    (:data:`FLAG_TENANT`; a checked tenant ID, ASCII); ``group``: stored in every record
    when not 0 (:data:`FLAG_GROUP`, a u64). ``shards``: the destination's shard
    count now: with more than one (up to :data:`MAX_ALIGNED_SHARDS`, and
    :data:`MIN_ALIGNED_SERIES` series a shard on average), the frames are cut by shard (their
    shard hash modulo ``shards``, in order within each) into records marked with that count
    (:func:`record_shards`). Raises ValueError for a tenant longer than 255 bytes or not ASCII
    (tenant IDs are at most 150)."""
    out = EncodedShare()
    if not share.index:
        return out
    if tenant is not None:
        flags |= FLAG_TENANT
        out.tenant = _tenant_field(tenant)
    if group:
        flags |= FLAG_GROUP
        out.group = _GROUP.pack(group)
    if 1 < shards <= MAX_ALIGNED_SHARDS and share.series >= MIN_ALIGNED_SERIES * shards:
        aligned = flags | shards << SHARDS_SHIFT
        for body, index, samples, series in split_shards(share.body, share.index, shards):
            if series:
                _pack(
                    out, Frames(body, index, samples, series), received_ms, max_body_bytes, aligned
                )
        return out
    _pack(out, share, received_ms, max_body_bytes, flags)
    return out


def _pack(
    out: EncodedShare, share: Frames, received_ms: int, max_body_bytes: int, flags: int
) -> None:
    """:func:`encode_share`'s records of ``share`` (one shard's frames, or all) into ``out``."""
    body, index = share.body, share.index
    if len(body) <= max_body_bytes:  # the usual case: one record, no per-frame work
        _emit(out, body, index, share.series, share.samples, received_ms, flags)
        return
    start = size = pos = 0  # frames [start, i) wait; size: their bytes; pos: offset of frame i
    samples = 0
    first_at = 0  # body offset of frame start
    entries = list(INDEX.iter_unpack(index))
    for i, (n, count, _) in enumerate(entries):
        if n > max_body_bytes:
            _emit_range(
                out, body, index, entries, start, i, first_at, size, samples, received_ms, flags
            )
            out.too_large += count
            out.too_large_series += 1
            out.too_large_bytes = max(out.too_large_bytes, n)
            start, size, samples, first_at = i + 1, 0, 0, pos + n
            pos += n
            continue
        if size + n > max_body_bytes:
            _emit_range(
                out, body, index, entries, start, i, first_at, size, samples, received_ms, flags
            )
            start, size, samples, first_at = i, 0, 0, pos
        size += n
        samples += count
        pos += n
    _emit_range(
        out, body, index, entries, start, len(entries), first_at, size, samples, received_ms, flags
    )


def _emit_range(
    out: EncodedShare,
    body: bytes,
    index: bytes,
    entries: list[tuple[int, int, int]],
    start: int,
    end: int,
    offset: int,
    size: int,
    samples: int,
    received_ms: int,
    flags: int,
) -> None:
    if start < end:
        raw = body[offset : offset + size]
        _emit(
            out,
            raw,
            index[start * INDEX.size : end * INDEX.size],
            end - start,
            samples,
            received_ms,
            flags,
        )


def _emit(
    out: EncodedShare,
    raw: bytes,
    index: bytes,
    series: int,
    samples: int,
    received_ms: int,
    flags: int = 0,
) -> None:
    rest = b"".join(
        (
            _META.pack(VERSION, KIND_SAMPLES, flags, received_ms, series, samples, len(raw)),
            out.tenant,
            out.group,
            index,
            compress(raw),
        )
    )
    record = HEADER.pack(len(rest), crc32(rest)) + rest
    out.records.append(record)
    out.samples.append(samples)
    out.series += series
    out.nbytes += len(record)


def _tenant_field(tenant: str) -> bytes:
    """The stored form of a tenant: its length (u8) and its ASCII bytes."""
    data = tenant.encode("ascii")  # UnicodeEncodeError is a ValueError
    if not data or len(data) > 255:
        raise ValueError(f"a tenant of {len(data)} bytes cannot be stored (1 to 255)")
    return bytes((len(data),)) + data


def check_record(header: bytes, rest: bytes) -> bool:
    """Whether ``rest`` is the intact body of the record whose 8-byte ``header`` precedes it."""
    length, crc = HEADER.unpack(header)
    return bool(len(rest) == length and length >= _META.size and crc32(rest) == crc)


def record_samples(rest: bytes) -> tuple[int, int]:
    """(received_ms, samples) of a record body, from its fixed part only (no checksum test)."""
    _, _, _, received_ms, _, samples, _ = _META.unpack_from(rest)
    return received_ms, samples


def record_shards(rest: bytes) -> int:
    """The shard count a record body was cut for (see the module docstring; 0: none), from
    its fixed part only."""
    flags: int = _META.unpack_from(rest)[2]
    return flags >> SHARDS_SHIFT


class Record(Frames):
    """A record read back (:func:`decode_record`): its frames
    (:class:`~rwrouter.wire.index.Frames`: the index, the totals, and the body, or only the
    stored snappy block, ``compressed``, until the body is first used), when it was received
    (``received_ms``, milliseconds since the epoch), its ``flags``
    (:data:`FLAG_START_TIMESTAMPS`, :data:`FLAG_TENANT`) and ``tenant`` (None: none stored)."""

    __slots__ = ("flags", "group", "received_ms", "tenant")

    flags: int
    group: int
    received_ms: int
    tenant: str | None

    def __init__(
        self,
        body: bytes | None,
        index: bytes,
        samples: int,
        series: int,
        *,
        received_ms: int,
        compressed: bytes | None = None,
        nbytes: int | None = None,
        flags: int = 0,
        tenant: str | None = None,
        group: int = 0,
    ) -> None:
        super().__init__(body, index, samples, series, compressed=compressed, nbytes=nbytes)
        _set(self, "received_ms", received_ms)
        _set(self, "flags", flags)
        _set(self, "tenant", tenant)
        _set(self, "group", group)

    @property
    def shards(self) -> int:
        """The shard count the record was cut for (:func:`record_shards`; 0: none)."""
        return self.flags >> SHARDS_SHIFT

    @property
    def first_hash(self) -> int:
        """The shard hash of its first frame (u32; 0 without frames): in a record cut for N
        shards, every frame's hash modulo N is this one's."""
        return INDEX.unpack_from(self.index)[2] if self.index else 0

    def _compared(self) -> tuple[object, ...]:
        return (*super()._compared(), self.received_ms, self.flags, self.tenant, self.group)


def decode_record(rest: bytes, *, decompress_body: bool = True) -> Record:
    """Read back a checked record body (:func:`check_record`). With ``decompress_body``
    false, the snappy block is checked only by its declared size (the record's checksum
    already covers it) and decompressed when first needed.

    Raises DecodeError when the record is intact but inconsistent (another version, an index
    that does not match the body): the queue treats that like corruption.
    """
    version, kind, flags, received_ms, series, samples, raw_len = _META.unpack_from(rest)
    if version != VERSION or kind != KIND_SAMPLES:
        raise DecodeError(f"queue record of version {version} kind {kind} is not supported")
    index_start, tenant, group = _META.size, None, 0
    if flags & FLAG_TENANT:
        index_start, tenant = _read_tenant(rest)
    if flags & FLAG_GROUP:
        if index_start + _GROUP.size > len(rest):
            raise DecodeError("queue record group runs past its end")
        (group,) = _GROUP.unpack_from(rest, index_start)
        index_start += _GROUP.size
    index_end = index_start + series * INDEX.size
    if index_end > len(rest):
        raise DecodeError("queue record index runs past its end")
    index = rest[index_start:index_end]
    if index_totals(index) != (raw_len, samples):
        raise DecodeError("queue record index does not match its body")
    compressed = rest[index_end:]
    if not decompress_body:
        if declared_size(compressed) != raw_len:
            raise DecodeError("queue record body length does not match its header")
        return Record(
            None,
            index,
            samples,
            series,
            received_ms=received_ms,
            compressed=compressed,
            nbytes=raw_len,
            flags=flags,
            tenant=tenant,
            group=group,
        )
    try:
        raw = decompress(compressed, max_decoded_bytes=raw_len)
    except TooLargeError:  # a RequestError, not a DecodeError: callers catch DecodeError
        raise DecodeError("queue record body is longer than its header says") from None
    if len(raw) != raw_len:
        raise DecodeError("queue record body length does not match its header")
    return Record(
        raw,
        index,
        samples,
        series,
        received_ms=received_ms,
        compressed=compressed,
        flags=flags,
        tenant=tenant,
        group=group,
    )


def _read_tenant(rest: bytes) -> tuple[int, str]:
    """Where a record's index starts, and its tenant (:data:`FLAG_TENANT`). Raises
    DecodeError when the tenant field is cut short, empty or not ASCII."""
    start = _META.size
    if start >= len(rest) or not rest[start]:
        raise DecodeError("queue record tenant is missing")
    end = start + 1 + rest[start]
    if end > len(rest):
        raise DecodeError("queue record tenant runs past its end")
    try:
        return end, rest[start + 1 : end].decode("ascii")
    except UnicodeDecodeError:
        raise DecodeError("queue record tenant is not ASCII") from None
