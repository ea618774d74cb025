"""The compiled accelerator under AddressSanitizer and UndefinedBehaviorSanitizer: a copy of
the package with ``_scan.c`` built ``-fsanitize=address,undefined -fno-sanitize-recover``
runs the tests that compare it with the pure-Python references (and a few edge shapes), so
an out-of-bounds access, a use after free or undefined behaviour (e.g. ``memcpy`` from a NULL
buffer for an empty series) fails the test instead of passing unnoticed.

Skipped where gcc has no sanitizer runtimes (``gcc -print-file-name`` then answers the bare
file name). Leak detection is off: CPython's own allocations at exit would be reported.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = ("libasan.so", "libubsan.so")

# Edge shapes, each checked against its reference inside the sanitized process.
EDGES = r"""
from rwrouter.routing import scan
from rwrouter.wire import _scan, rw2_in, rw2_out
from rwrouter.wire.walk import encode_varint as ev

def ld(f, p):
    return ev(f << 3 | 2) + ev(len(p)) + p

def same(fast, slow, *args):
    def run(f):
        try:
            return tuple(f(*args))
        except Exception as exc:
            return (type(exc).__name__, str(exc))
    assert run(fast) == run(slow), args

SYMS = ld(4, b"") + ld(4, b"__name__") + ld(4, b"up")
RW2 = [b"", SYMS, SYMS + ld(5, b""), ld(5, b""), SYMS + ld(5, ld(4, b"")),
       SYMS + ld(5, ld(1, b"\x01\x02") + ld(4, b"")), SYMS + ld(5, ld(5, b""))]
for body in RW2:
    for limit in (None, 0, 1, 64):
        same(lambda d: _scan.rw2_to_rw1(d, limit),
             lambda d: rw2_in.to_rw1_py(d, max_bytes=limit), body)
LABEL = ld(1, ld(1, b"__name__") + ld(2, b"up"))
RW1 = [b"", ld(1, b""), ld(1, ld(3, b"")), ld(1, LABEL + ld(3, b"")),
       ld(1, ld(3, b"")) + ld(1, LABEL + ld(2, b"")), ld(1, ld(2, b"\x18\x01")),
       ld(1, ld(2, b"")) + ld(1, ld(3, b""))]  # no labels at all: an exemplar-only adopted
for body in RW1:
    same(lambda b: _scan.encode_v2(b, {}, lambda n: None),
         lambda b: rw2_out.encode_request_py(b, {}, lambda n: None), body)
    same(_scan.strip_start_timestamps, rw2_out.strip_start_timestamps_py, body)
    same(lambda b: _scan.signature(b, (b"__name__",), True),
         lambda b: scan.signature_py(b, (b"__name__",), True), body)
print("edges ok")
"""


def _runtimes() -> list[str] | None:
    paths = []
    for name in RUNTIMES:
        try:
            found = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                                   text=True, timeout=30, check=True).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None
        if not os.path.isabs(found):
            return None
        paths.append(found)
    return paths


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a Python whose ``rwrouter`` has a sanitized ``_scan``."""
    runtimes = _runtimes()
    if runtimes is None:
        pytest.skip("gcc has no AddressSanitizer/UBSan runtimes here")
    src = tmp_path_factory.mktemp("sanitized") / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    wire = src / "rwrouter" / "wire"
    target = wire / f"_scan{sysconfig.get_config_var('EXT_SUFFIX')}"
    built = subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
         f"-I{sysconfig.get_paths()['include']}", str(wire / "_scan.c"), "-o", str(target)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    return {
        **os.environ,
        "LD_PRELOAD": ":".join(runtimes),
        "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        "PYTHONPATH": f"{src}{os.pathsep}{ROOT}",
    }


def _check(run: subprocess.CompletedProcess[str]) -> None:
    report = run.stdout[-3000:] + run.stderr[-3000:]
    assert run.returncode == 0, report
    assert "runtime error" not in run.stderr and "Sanitizer" not in run.stderr, report


@pytest.mark.timeout(300)
def test_edge_shapes_under_sanitizers(sanitized: dict[str, str]) -> None:
    code = "import rwrouter.wire._scan as s; assert '/sanitized' in s.__file__, s.__file__\n"
    run = subprocess.run([sys.executable, "-c", code + EDGES], env=sanitized, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    _check(run)
    assert "edges ok" in run.stdout


@pytest.mark.timeout(600)
def test_path_tests_under_sanitizers(sanitized: dict[str, str]) -> None:
    tests = ["tests/unit/test_rw2_paths.py", "tests/unit/test_rw2_out_paths.py",
             "tests/unit/test_scan_paths.py", "tests/unit/test_scan_escaping.py"]  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-s", *tests],
        env=sanitized, cwd=ROOT, capture_output=True, text=True, timeout=540,
    )  # fmt: skip
    _check(run)
