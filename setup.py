"""Build of the optional compiled accelerator (everything else is in pyproject.toml).

``rwrouter.wire._scan`` (C, CPython API) is built when a C compiler and the Python headers are
present; ``optional=True`` lets the install go on without it (the pure-Python references,
e.g. the loop in ``rwrouter.routing.scan``, then run, and
``rwrouter_build_info{accelerated="false"}`` says so).
Set ``RWROUTER_NO_EXTENSIONS=1`` to skip the build (and, at run time, to use the pure path).
"""

import os
import sysconfig
from pathlib import Path

from setuptools import Extension, setup


def _crc32() -> dict[str, list]:
    """Link a CRC-32 for the shard hash (the values of Python's zlib.crc32) when its header is
    where the compiler looks: ISA-L's (Debian: libisal-dev; carry-less multiply, ~7x zlib's on
    a label set), else zlib's (Debian: zlib1g-dev, which the Python headers' package depends
    on); without either the extension calls zlib.crc32 through Python (same values)."""
    dirs = [sysconfig.get_config_var("INCLUDEDIR") or "", "/usr/include", "/usr/local/include"]
    if any(d and (Path(d) / "isa-l" / "crc.h").is_file() for d in dirs):
        return {"define_macros": [("RWROUTER_ISAL", "1")], "libraries": ["isal"]}
    if any(d and (Path(d) / "zlib.h").is_file() for d in dirs):
        return {"define_macros": [("RWROUTER_ZLIB", "1")], "libraries": ["z"]}
    return {}


def _xxhash() -> list[tuple[str, str]]:
    """Use xxHash's XXH3-128 for the routing cache's digest when ``xxhash.h`` is where the
    compiler looks (Debian: libxxhash-dev; header-only, nothing to link), else the
    extension's own MurmurHash3-style digest (the same role, more instructions)."""
    dirs = [sysconfig.get_config_var("INCLUDEDIR") or "", "/usr/include", "/usr/local/include"]
    if any(d and (Path(d) / "xxhash.h").is_file() for d in dirs):
        return [("RWROUTER_XXH3", "1")]
    return []


extensions = []
if not os.environ.get("RWROUTER_NO_EXTENSIONS"):
    crc = _crc32()
    macros = crc.pop("define_macros", []) + _xxhash()
    extensions.append(
        Extension(
            "rwrouter.wire._scan",
            ["src/rwrouter/wire/_scan.c"],
            depends=[
                "src/rwrouter/wire/_labelcache.h",
                "src/rwrouter/wire/_pbwalk.h",
                "src/rwrouter/wire/_rw2in.h",
                "src/rwrouter/wire/_rw2scan.h",
                "src/rwrouter/wire/_rw2out.h",
                "src/rwrouter/wire/_relabel.h",
                "src/rwrouter/wire/_route.h",
                "src/rwrouter/wire/_age.h",
            ],
            optional=True,
            extra_compile_args=["-O2"],
            define_macros=macros,
            **crc,
        )
    )

setup(ext_modules=extensions)
