"""The snappy block format of remote write bodies: decompress with the declared size checked
first, compress, and splice blocks without decompressing them.

Both remote write versions compress the serialized request with snappy's *block* format
(``Content-Encoding: snappy``; the framed/stream format is refused). The codec is cramjam's
(the library python-snappy wraps); python-snappy's ``decompress`` zeroes an output buffer and
copies it into a bytes object, so with the accelerator built the decoder writes straight into
the bytes object returned (:func:`decompress`).
"""

from __future__ import annotations

from collections.abc import Sequence

import cramjam  # type: ignore[import-untyped,unused-ignore]
import snappy  # type: ignore[import-untyped,unused-ignore]

from rwrouter.errors import DecodeError, InvariantError, TooLargeError
from rwrouter.wire.accelerator import compiled
from rwrouter.wire.walk import encode_varint, read_varint

__all__ = ["SNAPPY_FRAMED_MAGIC", "compress", "declared_size", "decompress", "splice_compressed"]

SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"


def decompress(body: bytes, *, max_decoded_bytes: int) -> bytes:
    """Undo the snappy block compression of a remote write body.

    The declared uncompressed length (the leading varint) is checked against
    ``max_decoded_bytes`` before anything is decompressed.

    Raises:
        DecodeError: empty body, the snappy framed/stream format, a corrupt block.
        TooLargeError: the declared decoded length is over ``max_decoded_bytes`` (bytes).
    """
    if not body:
        raise DecodeError("empty body: expected a snappy-compressed WriteRequest")
    if body.startswith(SNAPPY_FRAMED_MAGIC[:4]):
        raise DecodeError(
            "body uses the snappy framed (stream) format; "
            "remote write needs the snappy block format"
        )
    try:
        declared, _ = read_varint(body, 0, len(body))
    except DecodeError:
        raise DecodeError("snappy block header: bad uncompressed-length varint") from None
    if declared > max_decoded_bytes:
        raise TooLargeError(
            f"snappy header declares {declared} decoded bytes, over the limit of "
            f"{max_decoded_bytes}"
        )
    if _blank_bytes is not None:
        return _decompress_in_place(body, declared)
    try:
        data: bytes = snappy.decompress(body)
    except Exception as exc:  # python-snappy raises several types for corrupt input
        raise DecodeError(f"undecodable snappy block: {str(exc) or type(exc).__name__}") from None
    return data


_blank_bytes = compiled("blank_bytes")


def _decompress_in_place(body: bytes, declared: int) -> bytes:
    """:func:`decompress` with the snappy decoder (cramjam, the library python-snappy wraps)
    writing straight into the bytes object returned: no zeroed buffer, no copy of the decoded
    body (python-snappy's ``decompress`` does both)."""
    if _blank_bytes is None:
        raise InvariantError("decoding in place needs the accelerator's blank_bytes")
    data, view = _blank_bytes(declared)
    try:
        written = cramjam.snappy.decompress_raw_into(body, view)
    except Exception as exc:  # cramjam.DecompressionError, and TypeError/ValueError
        raise DecodeError(f"undecodable snappy block: {str(exc) or type(exc).__name__}") from None
    finally:
        view.release()
    if written != declared:  # (the decoder checks the header too)
        raise DecodeError(
            f"undecodable snappy block: {written} bytes decoded, the header declares {declared}"
        )
    data_bytes: bytes = data
    return data_bytes


def declared_size(body: bytes) -> int:
    """The decoded size (bytes) a snappy block body declares in its header; 0 if unreadable
    (:func:`decompress` then says why)."""
    try:
        return read_varint(body, 0, min(len(body), 10))[0]
    except DecodeError:
        return 0


def compress(data: bytes) -> bytes:
    """Snappy block compression (what remote write bodies use). With the accelerator built the
    encoder writes into an uninitialized buffer of its worst-case size, of which the bytes
    written are returned (python-snappy zeroes that buffer first)."""
    if _blank_bytes is None:
        out: bytes = snappy.compress(data)
        return out
    _room, view = _blank_bytes(cramjam.snappy.compress_raw_max_len(data))  # (held: the view's)
    try:
        written = cramjam.snappy.compress_raw_into(data, view)
        block: bytes = view[:written].tobytes()
    finally:
        view.release()
    return block


def splice_compressed(blocks: Sequence[bytes]) -> bytes:
    """One snappy block whose decoded bytes are the concatenation of ``blocks``' decoded bytes,
    without decompressing them (a memory copy of the compressed bytes).

    Snappy block format (google/snappy ``format_description.txt``): a block is the varint of
    its decoded length, then elements (literals, and copies whose offset reaches back into
    output already produced); a compressor never refers before its block's own start, so the
    elements of several blocks can follow one another under one length header with their sum.
    For remote write bodies the result is again a WriteRequest: protobuf encodings of one
    message type concatenate into their merge (repeated fields appended, in order).

    ``blocks``: one or more snappy blocks (a single one is returned as is). Their contents are
    not checked here: a damaged block still fails to decompress after splicing. Raises
    DecodeError when a block's length header is unreadable.
    """
    if len(blocks) == 1:
        return blocks[0]
    total = 0
    parts: list[bytes | memoryview] = [b""]
    for block in blocks:
        try:
            length, start = read_varint(block, 0, min(len(block), 10))
        except DecodeError:
            raise DecodeError("snappy block header: bad uncompressed-length varint") from None
        total += length
        parts.append(memoryview(block)[start:])
    parts[0] = encode_varint(total)
    return b"".join(parts)
