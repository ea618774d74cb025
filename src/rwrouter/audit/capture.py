"""The capture file (pure): remote write requests as received, for an offline audit
(``rwrouter capture`` writes one, ``rwrouter audit --capture`` reads it).

Layout (rwrouter's own): the line :data:`MAGIC`, then one record per request: a header ``<qII``
(little-endian: received time in milliseconds since the epoch, body length in bytes, zlib crc32
of the body) and the body: a snappy block of an RW 1.0 ``WriteRequest``, exactly as the sender
sent it, or for a remote write 2.0 request its RW1 form (what the router routes,
:mod:`rwrouter.wire.rw2_in`), compressed again: one format for both protocols, so files written
before RW 2.0 and after read the same way, by any version. A capture stopped mid-write leaves a
torn last record: reading stops there (:attr:`CaptureReader.torn`). A record whose body fails
its checksum is skipped (:attr:`CaptureReader.corrupt`); a length over :data:`MAX_BODY_BYTES`
cannot be trusted, so reading stops there too.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from rwrouter.errors import CaptureError

__all__ = ["HEADER", "MAGIC", "MAX_BODY_BYTES", "CaptureError", "CaptureReader", "encode_record"]

MAGIC = b"rwrouter capture 1\n"
HEADER = struct.Struct("<qII")  # received ms, body bytes, crc32
MAX_BODY_BYTES = 1 << 30  # larger than any request a receiver accepts


def encode_record(body: bytes, received_ms: int) -> bytes:
    """One record: the header for ``body`` received at ``received_ms`` (milliseconds since the
    epoch), then ``body``. Raises ValueError for a body over :data:`MAX_BODY_BYTES`."""
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"body of {len(body)} bytes is over {MAX_BODY_BYTES}")
    return HEADER.pack(received_ms, len(body), zlib.crc32(body)) + body


class CaptureReader:
    """Reads the records of an open capture file (binary, positioned at its start).

    Raises CaptureError at :meth:`records` when the file does not start with :data:`MAGIC`."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.corrupt = 0  # records skipped: their body failed its checksum
        self.torn = False  # reading stopped at an incomplete or untrustworthy record
        self.end = 0  # the offset after the last whole record (where a torn end begins)

    def records(self) -> Iterator[tuple[int, bytes]]:
        """Each intact record as (received ms, body), in file order."""
        head = self._stream.read(len(MAGIC))
        if head != MAGIC:
            raise CaptureError("not an rwrouter capture file (written by `rwrouter capture`)")
        self.end = len(MAGIC)
        while True:
            header = self._stream.read(HEADER.size)
            if not header:
                return
            if len(header) < HEADER.size:
                self.torn = True
                return
            received_ms, length, checksum = HEADER.unpack(header)
            if length > MAX_BODY_BYTES:
                self.torn = True
                return
            body = self._stream.read(length)
            if len(body) < length:
                self.torn = True
                return
            self.end += HEADER.size + length
            if zlib.crc32(body) != checksum:
                self.corrupt += 1
                continue
            yield received_ms, body
