"""One dead-letter entry file, read defensively (the file format is in
:mod:`rwrouter.deadletter.store`): only a regular file is read (a FIFO, a device, a directory
or a symbolic link named like an entry is refused without blocking), at most its header's
bytes when listing, and a header is checked field by field before it is trusted.

Blocking file I/O: async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

__all__ = ["HEADER_MAX_BYTES", "MAGIC", "MAX_AT_MS", "parse_header", "read_entry"]

MAGIC = b"rwrouter-rejected/1\n"
HEADER_MAX_BYTES = 64 * 1024  # the JSON line: 4 KiB of response, escaped, and a few numbers
#: The latest ``at_ms`` a header may carry (exclusive): year 10000, where Python's datetime
#: (and ``rwrouter rejected list``'s time column) ends.
MAX_AT_MS = 253_402_300_800_000

_HEADER_TYPES: dict[str, type | tuple[type, ...]] = {
    "at_ms": int,
    "status": (int, type(None)),
    "reason": str,
    "response": str,
    "series": int,
    "samples": int,
    "kind": str,
    "body_bytes": int,
    "crc32": int,
    "tenant": (str, type(None)),  # optional: only entries of a tenant carry it
}
_HEADER_FIELDS = set(_HEADER_TYPES) - {"tenant"}


def read_entry(path: str | os.PathLike[str], *, limit: int | None) -> tuple[bytes, int]:
    """The first ``limit`` bytes of the entry file at ``path`` (None: all of it) and its size
    (bytes). Opened without following a symbolic link and without blocking (a FIFO is not
    waited for). Raises ValueError when it is not a regular file, FileNotFoundError when it
    is gone, OSError when it cannot be read (a symbolic link: ELOOP)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        return file.read(-1 if limit is None else limit), info.st_size


def parse_header(head: bytes) -> tuple[dict[str, Any], int]:
    """The JSON header of an entry file (``head``: its first bytes, at least the header
    line) and the offset of its body. Raises ValueError when it is not a valid header: the
    magic, the line, the JSON (nested too deep included), the fields and their types,
    ``at_ms`` in 0 .. :data:`MAX_AT_MS`, ``body_bytes`` >= 0."""
    if not head.startswith(MAGIC):
        raise ValueError("not a rwrouter-rejected/1 file")
    end = head.find(b"\n", len(MAGIC), len(MAGIC) + HEADER_MAX_BYTES)
    if end < 0:
        raise ValueError("header line missing or too long")
    try:
        header = json.loads(head[len(MAGIC) : end])  # JSONDecodeError is a ValueError
    except RecursionError:
        raise ValueError("header nested too deep") from None
    if not isinstance(header, dict) or set(header) - {"tenant"} != _HEADER_FIELDS:
        raise ValueError("header fields do not match the format")
    for key, kinds in _HEADER_TYPES.items():
        if not isinstance(header.get(key), kinds) or isinstance(header.get(key), bool):
            raise ValueError(f"header field {key}: unexpected type")
    if not 0 <= header["at_ms"] < MAX_AT_MS:
        raise ValueError(f"header field at_ms: {header['at_ms']} is not a time")
    if header["body_bytes"] < 0:
        raise ValueError("header field body_bytes: negative")
    return header, end + 1
