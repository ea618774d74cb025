"""Queue records (rwrouter.queue.records): encode a destination's share into records whose raw
body stays under the request limit, check them for damage, and read them back."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.errors import DecodeError
from rwrouter.queue.records import (
    FLAG_GROUP,
    FLAG_START_TIMESTAMPS,
    HEADER,
    MAX_ALIGNED_SHARDS,
    META_SIZE,
    MIN_ALIGNED_SERIES,
    EncodedShare,
    check_record,
    decode_record,
    encode_share,
    record_samples,
    record_shards,
    shard_hash,
)
from rwrouter.wire import compress
from rwrouter.wire.accelerator import crc32
from rwrouter.wire.index import Frames
from tests.support.frames import pack_frames

META = struct.Struct("<BBHqIII")  # the documented layout: version .. raw body length
INDEX = struct.Struct("<III")  # frame length, samples, shard hash


def frames_of(sizes: list[int]) -> list[bytes]:
    """Distinct frames of the given sizes (each starts with its index, padded)."""
    return [bytes([i % 251]) * size for i, size in enumerate(sizes)]


def keys_of(n: int) -> list[bytes]:
    return [f"series-{i}".encode() for i in range(n)]


def share_of(sizes: list[int], *, limit: int, counts: list[int] | None = None) -> EncodedShare:
    counts = counts if counts is not None else [i + 1 for i in range(len(sizes))]
    return encode_share(
        pack_frames(frames_of(sizes), keys_of(len(sizes)), counts),
        received_ms=1_700_000_000_123,
        max_body_bytes=limit,
    )


def split(record: bytes) -> tuple[bytes, bytes]:
    return record[: HEADER.size], record[HEADER.size :]


def sealed(rest: bytes) -> tuple[bytes, bytes]:
    """A header that makes ``rest`` pass :func:`check_record` (to test what decoding catches)."""
    return HEADER.pack(len(rest), zlib.crc32(rest)), rest


# ---------------------------------------------------------------------------------------------
# round trip


def test_round_trip_of_one_record() -> None:
    frames = [b"\x0a\x03abc", b"", b"\x0a\x01z" * 40]
    keys = [b"k1", b"k2", b"k3"]
    share = encode_share(pack_frames(frames, keys, [2, 0, 7]), received_ms=-5, max_body_bytes=1000)
    assert len(share.records) == 1
    assert share.samples == [9] and share.total_samples == 9
    assert share.series == 3 and (share.too_large, share.too_large_series) == (0, 0)
    assert share.nbytes == len(share.records[0])
    header, rest = split(share.records[0])
    assert check_record(header, rest)
    assert record_samples(rest) == (-5, 9)
    block = decode_record(rest)
    assert block.received_ms == -5
    assert block.frames == frames
    assert block.counts == [2, 0, 7]
    assert block.hashes == [shard_hash(k) for k in keys]
    assert block.samples == 9
    assert block.nbytes == sum(len(f) for f in frames)


def test_record_layout_is_the_documented_one() -> None:
    share = encode_share(
        pack_frames([b"xy", b"z"], [b"a", b"b"], [3, 4]), received_ms=42, max_body_bytes=10
    )
    header, rest = split(share.records[0])
    assert HEADER.unpack(header) == (len(rest), zlib.crc32(rest))
    assert META.unpack_from(rest) == (1, 0, 0, 42, 2, 7, 3)
    assert META.size == META_SIZE
    index = [INDEX.unpack_from(rest, META_SIZE + i * INDEX.size) for i in range(2)]
    assert index == [(2, 3, shard_hash(b"a")), (1, 4, shard_hash(b"b"))]
    assert rest[META_SIZE + 2 * INDEX.size :] == compress(b"xyz")


@pytest.mark.parametrize("lazy", [False, True], ids=["decompressed", "lazy"])
@pytest.mark.parametrize("flags", [0, FLAG_START_TIMESTAMPS], ids=["no_flags", "start_ts"])
def test_flags_are_kept_on_every_record(flags: int, lazy: bool) -> None:
    frames = [b"\x0a\x01a" * 5, b"\x0a\x01b" * 5]
    share = encode_share(
        pack_frames(frames, [b"a", b"b"], [1, 1]), received_ms=1, max_body_bytes=15, flags=flags
    )
    assert len(share.records) == 2  # one frame a record
    for record in share.records:
        _, rest = split(record)
        assert META.unpack_from(rest)[2] == flags
        assert decode_record(rest, decompress_body=not lazy).flags == flags


def test_empty_share_has_no_records() -> None:
    share = encode_share(pack_frames([], [], []), received_ms=0, max_body_bytes=100)
    assert (share.records, share.samples, share.series, share.nbytes) == ([], [], 0, 0)


# ---------------------------------------------------------------------------------------------
# splitting into records under max_body_bytes

SPLIT_CASES = [
    # id, frame sizes, max_body_bytes, frames per record (indexes), refused frame indexes
    ("all_fit_in_one", [10, 20, 30], 100, [[0, 1, 2]], []),
    ("exact_boundary_fits", [40, 60], 100, [[0, 1]], []),
    ("one_byte_over_boundary", [40, 61], 100, [[0], [1]], []),
    ("single_frame_exactly_the_limit", [100], 100, [[0]], []),
    ("boundary_then_next_record", [50, 50, 1], 100, [[0, 1], [2]], []),
    ("many_records", [30] * 10, 100, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]], []),
    ("each_frame_alone", [60, 60, 60], 100, [[0], [1], [2]], []),
    ("too_large_alone_refused", [101], 100, [], [0]),
    ("too_large_in_the_middle", [30, 30, 500, 30, 30], 100, [[0, 1], [3, 4]], [2]),
    ("too_large_first", [500, 30, 30], 100, [[1, 2]], [0]),
    ("too_large_last", [30, 30, 500], 100, [[0, 1]], [2]),
    ("two_too_large", [500, 30, 501, 80, 30], 100, [[1], [3], [4]], [0, 2]),
    ("empty_frames_ride_along", [0, 100, 0], 100, [[0, 1, 2]], []),
]


@pytest.mark.parametrize(
    ("sizes", "limit", "groups", "refused"),
    [c[1:] for c in SPLIT_CASES],
    ids=[c[0] for c in SPLIT_CASES],
)
def test_split_into_records(
    sizes: list[int], limit: int, groups: list[list[int]], refused: list[int]
) -> None:
    counts = [i + 1 for i in range(len(sizes))]
    frames, keys = frames_of(sizes), keys_of(len(sizes))
    share = share_of(sizes, limit=limit, counts=counts)
    blocks = [decode_record(split(r)[1]) for r in share.records]
    assert [b.frames for b in blocks] == [[frames[i] for i in g] for g in groups]
    assert [b.counts for b in blocks] == [[counts[i] for i in g] for g in groups]
    assert [b.hashes for b in blocks] == [[shard_hash(keys[i]) for i in g] for g in groups]
    assert all(b.nbytes <= limit for b in blocks)
    assert share.samples == [sum(counts[i] for i in g) for g in groups]
    assert share.series == sum(len(g) for g in groups)
    assert share.nbytes == sum(len(r) for r in share.records)
    assert share.too_large == sum(counts[i] for i in refused)
    assert share.too_large_series == len(refused)
    assert share.too_large_bytes == max((len(frames[i]) for i in refused), default=0)


# ---------------------------------------------------------------------------------------------
# check_record: torn and corrupt records


def _flip(at: int) -> Callable[[bytes], bytes]:
    def damage(record: bytes) -> bytes:
        i = at if at >= 0 else len(record) + at
        return record[:i] + bytes([record[i] ^ 0x01]) + record[i + 1 :]

    return damage


def _relength(record: bytes, delta: int) -> bytes:
    """The record with its length field off by ``delta`` (the checksum left as it was)."""
    length, crc = HEADER.unpack(record[: HEADER.size])
    return HEADER.pack(length + delta, crc) + record[HEADER.size :]


DAMAGE_CASES: list[tuple[str, Callable[[bytes], bytes]]] = [
    ("flip_length", _flip(0)),
    ("flip_crc", _flip(5)),
    ("flip_version", _flip(HEADER.size)),
    ("flip_received_ms", _flip(HEADER.size + 4)),
    ("flip_samples", _flip(HEADER.size + 16)),
    ("flip_index", _flip(HEADER.size + META_SIZE + 1)),
    ("flip_last_body_byte", _flip(-1)),
    ("truncated_by_one", lambda r: r[:-1]),
    ("truncated_to_half", lambda r: r[: len(r) // 2]),
    ("truncated_to_header", lambda r: r[: HEADER.size]),
    ("one_byte_too_many", lambda r: r + b"\x00"),
    ("length_says_one_more", lambda r: _relength(r, +1)),
    ("length_says_one_less", lambda r: _relength(r, -1)),
    ("rest_shorter_than_the_fixed_part", lambda r: b"".join(sealed(r[HEADER.size :][:4]))),
]


@pytest.mark.parametrize("damage", [c[1] for c in DAMAGE_CASES], ids=[c[0] for c in DAMAGE_CASES])
def test_check_record_detects_damage(damage: Callable[[bytes], bytes]) -> None:
    (record,) = share_of([40, 50, 60], limit=1000).records
    header, rest = split(record)
    assert check_record(header, rest)
    bad = damage(record)
    assert bad != record
    assert not check_record(*split(bad))


# ---------------------------------------------------------------------------------------------
# decode_record: intact but inconsistent records


def _rewrite(rest: bytes, **fields: int) -> bytes:
    names = ("version", "kind", "reserved", "received_ms", "series", "samples", "raw")
    values = dict(zip(names, META.unpack_from(rest), strict=True))
    values.update(fields)
    return META.pack(*(values[n] for n in names)) + rest[META_SIZE:]


def _index_entry(rest: bytes, i: int, **fields: int) -> bytes:
    at = META_SIZE + i * INDEX.size
    length, count, hashed = INDEX.unpack_from(rest, at)
    entry = INDEX.pack(
        fields.get("length", length), fields.get("count", count), fields.get("hashed", hashed)
    )
    return rest[:at] + entry + rest[at + INDEX.size :]


INCONSISTENT_CASES: list[tuple[str, Callable[[bytes], bytes]]] = [
    ("another_version", lambda r: _rewrite(r, version=2)),
    ("version_zero", lambda r: _rewrite(r, version=0)),
    ("another_kind", lambda r: _rewrite(r, kind=1)),
    ("index_runs_past_the_end", lambda r: _rewrite(r, series=1000)),
    ("more_series_than_indexed", lambda r: _rewrite(r, series=3)),
    ("fewer_series_than_indexed", lambda r: _rewrite(r, series=1)),
    ("samples_total_wrong", lambda r: _rewrite(r, samples=99)),
    ("raw_length_too_small", lambda r: _rewrite(r, raw=59)),
    ("raw_length_too_large", lambda r: _rewrite(r, raw=61)),
    ("frame_length_too_small", lambda r: _index_entry(r, 0, length=19)),
    ("frame_length_too_large", lambda r: _index_entry(r, 1, length=41)),
    ("frame_count_wrong", lambda r: _index_entry(r, 0, count=5)),
    ("body_not_snappy", lambda r: r[: META_SIZE + 2 * INDEX.size] + b"\xff\xff\xff\xff\xff"),
    ("body_missing", lambda r: r[: META_SIZE + 2 * INDEX.size]),
]


@pytest.mark.parametrize(
    "mangle", [c[1] for c in INCONSISTENT_CASES], ids=[c[0] for c in INCONSISTENT_CASES]
)
def test_decode_record_refuses_inconsistent_records(mangle: Callable[[bytes], bytes]) -> None:
    (record,) = share_of([20, 40], limit=1000, counts=[3, 4]).records
    rest = split(record)[1]
    assert decode_record(rest).nbytes == 60
    header, bad = sealed(mangle(rest))
    assert bad != rest and check_record(header, bad)  # intact: only decoding can tell
    with pytest.raises(DecodeError):
        decode_record(bad)


# ---------------------------------------------------------------------------------------------
# property: records carry exactly the frames that fit, in order


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.binary(max_size=120), st.integers(0, 1000)), max_size=40),
    st.integers(1, 300),
    st.integers(-(2**62), 2**62),
)
def test_records_carry_every_frame_that_fits_in_order(
    series: list[tuple[bytes, int]], limit: int, received_ms: int
) -> None:
    frames = [f for f, _ in series]
    counts = [c for _, c in series]
    keys = [f"k{i}".encode() for i in range(len(series))]
    share = encode_share(
        pack_frames(frames, keys, counts), received_ms=received_ms, max_body_bytes=limit
    )
    kept = [i for i, f in enumerate(frames) if len(f) <= limit]
    got_frames: list[bytes] = []
    got_counts: list[int] = []
    got_hashes: list[int] = []
    for record, samples in zip(share.records, share.samples, strict=True):
        header, rest = split(record)
        assert check_record(header, rest)
        block = decode_record(rest)
        assert block.received_ms == received_ms
        assert block.frames and block.nbytes <= limit
        assert block.samples == samples == sum(block.counts)
        got_frames += block.frames
        got_counts += block.counts
        got_hashes += block.hashes
    assert got_frames == [frames[i] for i in kept]
    assert got_counts == [counts[i] for i in kept]
    assert got_hashes == [shard_hash(keys[i]) for i in kept]
    assert share.series == len(kept)
    assert share.too_large_series == len(frames) - len(kept)
    assert share.too_large + share.total_samples == sum(counts)
    # No two neighbouring records could have been one: records are as full as allowed.
    sizes = [decode_record(split(r)[1]).nbytes for r in share.records]
    firsts = [len(decode_record(split(r)[1]).frames[0]) for r in share.records]
    refused_between = _refused_between(frames, limit, share)
    for k in range(1, len(sizes)):
        assert refused_between[k] or sizes[k - 1] + firsts[k] > limit


def _refused_between(frames: list[bytes], limit: int, share: EncodedShare) -> list[bool]:
    """For each record, whether a refused frame came right before its first frame."""
    out: list[bool] = []
    i = 0
    for record in share.records:
        first = decode_record(split(record)[1]).frames
        skipped = False
        while len(frames[i]) > limit:
            skipped, i = True, i + 1
        out.append(skipped)
        i += len(first)
    return out


def test_a_record_read_without_decompressing_gives_the_same_content() -> None:
    frames = [b"frame-%d" % i for i in range(5)]
    (record,) = encode_share(
        pack_frames(frames, [b"k%d" % i for i in range(5)], [1] * 5),
        received_ms=9,
        max_body_bytes=1 << 20,
    ).records
    _, rest = split(record)
    lazy, eager = decode_record(rest, decompress_body=False), decode_record(rest)
    assert lazy.decoded is None and eager.decoded == b"".join(frames)
    assert lazy.compressed == eager.compressed
    assert snappy.decompress(lazy.compressed) == b"".join(frames)  # a write request as stored
    assert (lazy.frames, lazy.counts, lazy.hashes) == (eager.frames, eager.counts, eager.hashes)


def test_a_lazy_read_still_checks_the_declared_size() -> None:
    (record,) = encode_share(
        pack_frames([b"abc"], [b"k"], [1]), received_ms=0, max_body_bytes=100
    ).records
    _, rest = split(record)
    meta = bytearray(rest)
    meta[24:28] = (4).to_bytes(4, "little")  # raw body length 4 instead of 3
    with pytest.raises(DecodeError):
        decode_record(bytes(meta), decompress_body=False)


# (name, bytes): the records' checksum (ISA-L's CRC-32 when the extension has it) is zlib.crc32
CHECKSUM_CASES = [
    ("empty", b""),
    ("one", b"\x00"),
    ("short", b"rwrouter"),
    ("just_under_gil_release", bytes(range(256)) * 20),
    ("just_over_gil_release", bytes(range(256)) * 21),
    ("a_record", bytes(range(251)) * 400),
]


@pytest.mark.parametrize("data", [c[1] for c in CHECKSUM_CASES], ids=[c[0] for c in CHECKSUM_CASES])
def test_record_checksum_is_zlib_crc32(data: bytes) -> None:
    for offset in range(3):  # other alignments, and a bytes-like view
        part = data[offset:]
        assert crc32(part) == zlib.crc32(part) == crc32(memoryview(part))


# ---------------------------------------------------------------------------------------------
# records cut by shard


def _records_by_shard(share: EncodedShare, shards: int) -> dict[int, list[bytes]]:
    """Per shard (hash modulo ``shards``) the frames of the records, in record order; checks
    that every record is cut for ``shards`` and holds one shard's frames."""
    out: dict[int, list[bytes]] = {}
    for record in share.records:
        _, rest = split(record)
        decoded = decode_record(rest)
        assert decoded.shards == record_shards(rest) == shards
        hashes = [entry[2] for entry in INDEX.iter_unpack(decoded.index)]
        assert {h % shards for h in hashes} == {decoded.first_hash % shards}
        out.setdefault(decoded.first_hash % shards, []).extend(frames_in(decoded))
    return out


def frames_in(decoded: Frames) -> list[bytes]:
    frames, pos = [], 0
    for length, _, _ in INDEX.iter_unpack(decoded.index):
        frames.append(decoded.body[pos : pos + length])
        pos += length
    return frames


# (name, series, shards, max_body_bytes): cut by shard when there are MIN_ALIGNED_SERIES per
# shard (and at most MAX_ALIGNED_SHARDS), each shard's frames split further by the size limit
CUT_CASES = [
    ("two_shards", 2 * MIN_ALIGNED_SERIES, 2, 1 << 20),
    ("seven_shards", 7 * MIN_ALIGNED_SERIES + 5, 7, 1 << 20),
    ("seven_shards_small_records", 7 * MIN_ALIGNED_SERIES, 7, 700),
]


@pytest.mark.parametrize(
    ("series", "shards", "limit"), [c[1:] for c in CUT_CASES], ids=[c[0] for c in CUT_CASES]
)
def test_a_share_cut_by_shard_keeps_each_shards_frames_in_order(
    series: int, shards: int, limit: int
) -> None:
    sizes = [20 + i % 37 for i in range(series)]
    frames = pack_frames(frames_of(sizes), keys_of(series), [1 + i % 3 for i in range(series)])
    share = encode_share(
        frames,
        received_ms=5,
        max_body_bytes=limit,
        flags=FLAG_START_TIMESTAMPS,
        tenant="team-a",
        shards=shards,
    )
    assert sum(share.samples) == frames.samples and share.series == series
    want: dict[int, list[bytes]] = {}
    for frame, key in zip(frames_of(sizes), keys_of(series), strict=True):
        want.setdefault(shard_hash(key) % shards, []).append(frame)
    assert _records_by_shard(share, shards) == want
    for record in share.records:
        decoded = decode_record(split(record)[1])
        assert decoded.tenant == "team-a" and decoded.flags & FLAG_START_TIMESTAMPS
    assert len(share.records) >= shards


# (name, series, shards): not cut (records as before, marked with no shard count)
UNCUT_CASES = [
    ("one_shard", 4 * MIN_ALIGNED_SERIES, 1),
    ("too_few_series_a_shard", 4 * MIN_ALIGNED_SERIES - 1, 4),
    ("more_shards_than_the_flags_hold", 4 * MIN_ALIGNED_SERIES, MAX_ALIGNED_SHARDS + 1),
]


@pytest.mark.parametrize(
    ("series", "shards"), [c[1:] for c in UNCUT_CASES], ids=[c[0] for c in UNCUT_CASES]
)
def test_a_share_not_cut_by_shard_is_one_record(series: int, shards: int) -> None:
    sizes = [30] * series
    frames = pack_frames(frames_of(sizes), keys_of(series), [1] * series)
    share = encode_share(frames, received_ms=5, max_body_bytes=1 << 20, shards=shards)
    (record,) = share.records
    _, rest = split(record)
    assert record_shards(rest) == 0 and decode_record(rest).shards == 0
    assert share.records == encode_share(frames, received_ms=5, max_body_bytes=1 << 20).records


def test_a_cut_record_is_laid_out_as_any_other() -> None:
    """Only the flags tell a record cut by shard: a reader that predates them (and ignores the
    bits it does not know) reads the same frames."""
    series = 2 * MIN_ALIGNED_SERIES
    frames = pack_frames(frames_of([25] * series), keys_of(series), [1] * series)
    for record in encode_share(frames, received_ms=9, max_body_bytes=1 << 20, shards=2).records:
        _, rest = split(record)
        decoded = decode_record(rest)
        plain = encode_share(decoded, received_ms=9, max_body_bytes=1 << 20).records[0]
        flags_at = HEADER.size + 2  # version (u8), kind (u8), then flags (u16)
        assert plain[HEADER.size :] == (
            rest[: flags_at - HEADER.size] + b"\0\0" + rest[flags_at - HEADER.size + 2 :]
        )


# ---------------------------------------------------------------------------------------------
# compatibility: records of an rwrouter from before FLAG_GROUP

# Records written by rwrouter at f387046~1 (the last commit before FLAG_GROUP) for the share
# of _COMPAT_FRAMES: its own encode_share's output, kept as written (hex).
_COMPAT_FRAMES = [b"\x0a\x01a" * 5, b"\x0a\x01b" * 5, b"\x0a\x01c" * 5]
_BEFORE_GROUPS = {
    "plain": (
        {},
        "58000000fed52f02010000007b68e5cf8b01000003000000060000002d0000000f0000000100000043beb7e8"
        "0f00000002000000f9efbe710f000000030000006fdfb9062d080a016136030004620a32030030630a0163"
        "0a01630a01630a0163",
    ),
    "tenant": (
        {"tenant": "team-a"},
        "5f000000633bb6b8010002007b68e5cf8b01000003000000060000002d000000067465616d2d610f000000"
        "0100000043beb7e80f00000002000000f9efbe710f000000030000006fdfb9062d080a0161360300046"
        "20a32030030630a01630a01630a01630a0163",
    ),
    "start_timestamps": (
        {"flags": FLAG_START_TIMESTAMPS},
        "5800000094e79b98010001007b68e5cf8b01000003000000060000002d0000000f0000000100000043beb7e8"
        "0f00000002000000f9efbe710f000000030000006fdfb9062d080a016136030004620a32030030630a0163"
        "0a01630a01630a0163",
    ),
}


def _compat_share(**kwargs: object) -> bytes:
    share = encode_share(
        pack_frames(_COMPAT_FRAMES, [b"a", b"b", b"c"], [1, 2, 3]),
        received_ms=1_700_000_000_123,
        max_body_bytes=1000,
        **kwargs,  # type: ignore[arg-type]
    )
    (record,) = share.records
    return record


@pytest.mark.parametrize(
    ("kwargs", "old_hex"), list(_BEFORE_GROUPS.values()), ids=list(_BEFORE_GROUPS)
)
def test_a_record_without_group_is_byte_identical_to_the_old_layout(
    kwargs: dict[str, object], old_hex: str
) -> None:
    """A record without a group (group 0) is what an rwrouter from before FLAG_GROUP wrote,
    so such a version reads it after a downgrade; and this version reads the old record."""
    old = bytes.fromhex(old_hex)
    new = _compat_share(**kwargs, group=0)
    tenant = kwargs.get("tenant")
    tenant_bytes = 0 if tenant is None else 1 + len(str(tenant))
    block_at = HEADER.size + META_SIZE + tenant_bytes + len(_COMPAT_FRAMES) * INDEX.size
    # what follows the header up to the block: the same bytes (fixed part, tenant, index)
    assert new[HEADER.size : block_at] == old[HEADER.size : block_at]
    assert snappy.uncompress(new[block_at:]) == snappy.uncompress(old[block_at:])
    if new[block_at:] == old[block_at:]:  # the same snappy output: the very same record
        assert new == old
    decoded = decode_record(old[HEADER.size :])
    assert (decoded.frames, decoded.group, decoded.tenant) == (
        _COMPAT_FRAMES,
        0,
        kwargs.get("tenant"),
    )


@pytest.mark.parametrize("tenant", [None, "team-a"], ids=["plain", "tenant"])
def test_a_group_moves_the_index_as_the_docstring_says(tenant: str | None) -> None:
    """With a group, FLAG_GROUP is set and 8 bytes (u64 little-endian) come after the fixed
    part and the tenant: the index starts 8 bytes later, where a reader from before the flag
    (which ignores unknown flags) reads garbage: such records need the queue drained before
    a downgrade (CHANGELOG, docs/configuration.md "Upgrades and downgrades")."""
    plain = _compat_share(tenant=tenant)[HEADER.size :]
    grouped = _compat_share(tenant=tenant, group=0x0102030405060708)[HEADER.size :]
    at = META_SIZE + (0 if tenant is None else 1 + len(tenant))
    flags = META.unpack_from(plain)[2]
    assert META.unpack_from(grouped)[2] == flags | FLAG_GROUP
    assert grouped[at : at + 8] == (0x0102030405060708).to_bytes(8, "little")
    assert grouped[4:at] == plain[4:at] and grouped[at + 8 :] == plain[at:]
