"""The capture file codec (rwrouter.audit.capture): records round trip; a torn end, a bad
checksum and a file of another kind are told apart."""

from __future__ import annotations

import io
import zlib

import pytest

from rwrouter.audit.capture import (
    HEADER,
    MAGIC,
    MAX_BODY_BYTES,
    CaptureError,
    CaptureReader,
    encode_record,
)

RECORDS = [(1_700_000_000_000, b"first body"), (1_700_000_001_500, b""), (5, b"\x00" * 300)]
WHOLE = MAGIC + b"".join(encode_record(body, ms) for ms, body in RECORDS)
SECOND_AT = len(MAGIC) + HEADER.size + len(RECORDS[0][1])  # where the second record starts


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


CASES = [
    # id, file bytes, expected records, corrupt, torn
    ("round_trip", WHOLE, RECORDS, 0, False),
    ("empty_capture", MAGIC, [], 0, False),
    ("torn_in_a_header", WHOLE[: SECOND_AT + 5], RECORDS[:1], 0, True),
    ("torn_in_a_body", WHOLE[:-1], RECORDS[:2], 0, True),
    (
        "bad_checksum_skips_that_record",
        _flip(WHOLE, len(MAGIC) + HEADER.size),
        RECORDS[1:],
        1,
        False,
    ),
    (
        "untrustworthy_length_stops",
        MAGIC + HEADER.pack(1, MAX_BODY_BYTES + 1, 0) + b"x",
        [],
        0,
        True,
    ),
]


@pytest.mark.parametrize(
    ("data", "expected", "corrupt", "torn"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_records(data: bytes, expected: list[tuple[int, bytes]], corrupt: int, torn: bool) -> None:
    reader = CaptureReader(io.BytesIO(data))
    assert list(reader.records()) == expected
    assert (reader.corrupt, reader.torn) == (corrupt, torn)


@pytest.mark.parametrize(
    "data",
    [b"", b"rwrouter capture 2\n", b"\xff\x06\x00\x00sNaPpY"],
    ids=["empty_file", "another_version", "snappy_stream"],
)
def test_not_a_capture_file(data: bytes) -> None:
    with pytest.raises(CaptureError, match="not an rwrouter capture file"):
        list(CaptureReader(io.BytesIO(data)).records())


def test_record_layout_is_little_endian_ms_length_crc32() -> None:
    record = encode_record(b"abc", 258)
    assert record[:8] == (258).to_bytes(8, "little")
    assert record[8:12] == (3).to_bytes(4, "little")
    assert record[12:16] == zlib.crc32(b"abc").to_bytes(4, "little")
    assert record[16:] == b"abc"
