"""The compiled accelerator (``rwrouter.wire._scan``, built by setup.py the way aiohttp ships
its C HTTP parser) and the choice between its functions and their pure-Python references.

Every compiled function has a pure reference with the same arguments, result and errors
(tested on the benchmark workload, random inputs and malformed bodies); the references run
when the extension was not built, or when the environment sets ``RWROUTER_NO_EXTENSIONS`` to a
non-empty value. :data:`ACCELERATED` says which. The label codec in use is here
(:func:`decode_labels`, :func:`encode_labels`: the references are in :mod:`rwrouter.wire.codec`);
the other modules pick their own functions with :func:`compiled`.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from rwrouter.wire import codec

__all__ = ["ACCELERATED", "compiled", "crc32", "decode_labels", "encode_labels", "extension"]


def _load() -> ModuleType | None:
    if os.environ.get("RWROUTER_NO_EXTENSIONS"):
        return None
    try:
        from rwrouter.wire import _scan  # type: ignore[attr-defined]  # built by setup.py
    except ImportError:
        return None
    module: ModuleType = _scan
    return module


_EXTENSION = _load()
ACCELERATED: bool = _EXTENSION is not None


def extension() -> ModuleType | None:
    """The compiled extension module, or None when the pure references run."""
    return _EXTENSION


def compiled(name: str) -> Callable[..., Any] | None:
    """The compiled function ``name`` of the extension, or None (not built, disabled, or an
    older build without it: the caller then uses its pure reference)."""
    function: Callable[..., Any] | None = getattr(_EXTENSION, name, None)
    return function


LabelDecoder = Callable[[bytes], tuple[tuple[str, str], ...]]
LabelEncoder = Callable[[tuple[tuple[str, str], ...]], bytes]

decode_labels: LabelDecoder = compiled("decode_labels") or codec.decode_labels
encode_labels: LabelEncoder = compiled("encode_labels") or codec.encode_labels
"""The label codec in use (compiled when :data:`ACCELERATED`), with the contracts of
:func:`rwrouter.wire.codec.decode_labels` and :func:`rwrouter.wire.codec.encode_labels`."""

crc32: Callable[[bytes | bytearray | memoryview], int] = compiled("crc32") or zlib.crc32
"""``zlib.crc32(data)`` (u32) of a bytes-like object: ISA-L's CRC-32 (carry-less multiply,
the same values, several times faster on the queue records' kilobytes) when the extension
was built with it (``libisal-dev``), else zlib's."""
