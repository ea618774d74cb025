"""Check 11 of the workspace double (:mod:`rwrouter.doubles.workspace`): a request body as a
remote write 1.0 ``WriteRequest`` (snappy block format), and whether its ``Content-Type`` names
the 2.0 message. Sources: the remote write 1.0 and 2.0 specs (Content-Type, snappy block
format); Cortex's answers for bodies it cannot read.
"""

from __future__ import annotations

import snappy  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.message import (  # type: ignore[import-untyped,unused-ignore]
    DecodeError as ProtobufDecodeError,
)

from rwrouter.wire import remote_pb2

__all__ = ["decode_request", "is_rw2"]

_SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"


def is_rw2(content_type: str) -> bool:
    """Whether ``Content-Type`` names the RW 2.0 message (``proto=io.prometheus.write.v2.Request``,
    case-insensitive, possibly quoted)."""
    _, _, params = content_type.partition(";")
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "proto":
            return value.strip().strip('"').lower() == "io.prometheus.write.v2.request"
    return False


def decode_request(body: bytes) -> remote_pb2.WriteRequest | str:
    """Check 11: the body as a WriteRequest, or the 400 message."""
    if body.startswith(_SNAPPY_FRAMED_MAGIC):
        return "snappy: corrupt input (framed/stream format; remote write needs the block format)"
    try:
        raw = snappy.uncompress(body)
    except Exception as exc:  # python-snappy raises several types
        return f"snappy: corrupt input: {exc}"
    try:
        request: remote_pb2.WriteRequest = remote_pb2.WriteRequest.FromString(raw)
    except ProtobufDecodeError as exc:
        return f"proto: cannot parse WriteRequest: {exc}"
    return request
