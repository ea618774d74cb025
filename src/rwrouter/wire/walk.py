"""Protobuf wire-format primitives (pure): varints, field walking, wire-type checks.

Source: the protobuf encoding spec (varints, tags ``field << 3 | wire type``, wire types 0/1/2/5,
field numbers 1 .. 2^29-1). Only what the router's label-only walk needs; everything raises
:class:`~rwrouter.errors.DecodeError` (400) on malformed input.
"""

from __future__ import annotations

from collections.abc import Iterator

from rwrouter.errors import DecodeError

MAX_FIELD_NUMBER = (1 << 29) - 1  # protobuf encoding spec

# Wire types (protobuf encoding spec).
VARINT, I64, LEN, I32 = 0, 1, 2, 5


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode a base-128 varint at ``pos``; returns (value, position after it).

    Raises DecodeError when it is truncated or longer than 10 bytes.
    """
    result = 0
    shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            break
    raise DecodeError("bad protobuf: truncated or overlong varint")


def encode_varint(value: int) -> bytes:
    """Encode a non-negative int as a base-128 varint."""
    if value < 0x80:
        return bytes((value,))
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def skip(buf: bytes, pos: int, wire_type: int, end: int, what: str) -> int:
    """Return the position after a field's value of ``wire_type`` starting at ``pos``."""
    if wire_type == VARINT:
        return read_varint(buf, pos, end)[1]
    if wire_type == LEN:
        length, pos = read_varint(buf, pos, end)
        new = pos + length
    elif wire_type == I64:
        new = pos + 8
    elif wire_type == I32:
        new = pos + 4
    else:
        raise DecodeError(f"bad protobuf: wire type {wire_type} in {what}")
    if new > end:
        raise DecodeError(f"bad protobuf: field runs past the end of {what}")
    return new


def fields(buf: bytes, pos: int, end: int, what: str) -> Iterator[tuple[int, int, int, int, int]]:
    """Yield (field number, wire type, field start, value start, value end) for each field of
    buf[pos:end]; a LEN field's value excludes its length prefix."""
    while pos < end:
        head = pos
        key, pos = read_varint(buf, pos, end)
        field, wire_type = key >> 3, key & 7
        if field == 0 or field > MAX_FIELD_NUMBER:
            raise DecodeError(f"bad protobuf: field number {field} in {what}")
        start = pos
        if wire_type == LEN:
            length, start = read_varint(buf, pos, end)
            pos = start + length
            if pos > end:
                raise DecodeError(f"bad protobuf: field runs past the end of {what}")
        else:
            pos = skip(buf, pos, wire_type, end, what)
        yield field, wire_type, head, start, pos


def check_message(
    buf: bytes, start: int, end: int, expected: dict[int, tuple[int, ...]], what: str
) -> None:
    """Check the framing of a message and the wire types of its known fields."""
    for field, wire_type, _, _, _ in fields(buf, start, end, what):
        allowed = expected.get(field)
        if allowed is not None and wire_type not in allowed:
            raise DecodeError(f"bad protobuf: field {field} of {what} has wire type {wire_type}")


def utf8(buf: bytes, start: int, end: int, what: str) -> str:
    try:
        return buf[start:end].decode("utf-8")
    except UnicodeDecodeError:
        raise DecodeError(f"invalid UTF-8 in {what}: {buf[start:end]!r}") from None
