"""Remote write 1.0 wire codec (pure): snappy block framing, label-only protobuf walk, encoding.

The generated protobuf modules (``remote_pb2``, ``types_pb2``) come from the ``.proto`` files
next to them (``scripts/gen-proto``); the router's hot path does not use them.
"""

from rwrouter.wire.codec import (
    RawSeries,
    WriteRequestParts,
    compress,
    declared_size,
    decode_labels,
    decompress,
    encode_labels,
    frame_metadata,
    frame_series,
    metadata_family,
    parse_write_request,
    splice_compressed,
    strip_fields,
)

__all__ = [
    "RawSeries",
    "WriteRequestParts",
    "compress",
    "declared_size",
    "decode_labels",
    "decompress",
    "encode_labels",
    "frame_metadata",
    "frame_series",
    "metadata_family",
    "parse_write_request",
    "splice_compressed",
    "strip_fields",
]
