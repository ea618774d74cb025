"""Remote write wire codec (pure): snappy block framing, label-only protobuf walk, encoding,
and remote write 2.0 requests turned into the RW1 form (:mod:`rwrouter.wire.rw2_in`).

The generated protobuf modules (``remote_pb2``, ``types_pb2``: RW 1.0; ``write_v2_pb2``: RW
2.0, as package ``rwrouter.writev2``) come from the ``.proto`` files next to them
(``scripts/gen-proto``); the router's hot path does not use them (tests and tools do).
"""

from rwrouter.wire.block import compress, declared_size, decompress, splice_compressed
from rwrouter.wire.codec import (
    RawSeries,
    decode_labels,
    encode_labels,
    frame_metadata,
    metadata_family,
    strip_fields,
)
from rwrouter.wire.rw2_in import Converted, to_rw1

__all__ = [
    "Converted",
    "RawSeries",
    "compress",
    "declared_size",
    "decode_labels",
    "decompress",
    "encode_labels",
    "frame_metadata",
    "metadata_family",
    "splice_compressed",
    "strip_fields",
    "to_rw1",
]
