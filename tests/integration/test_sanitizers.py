"""The compiled accelerator under AddressSanitizer and UndefinedBehaviorSanitizer: a copy of
the package with ``_scan.c`` built ``-fsanitize=address,undefined -fno-sanitize-recover``
runs the differential tests (the unit tests that compare it with the pure-Python references:
:data:`DIFFERENTIAL`, its two groups in two processes at once) and a few edge shapes, so an
out-of-bounds access, a use after free or undefined behaviour (e.g. ``memcpy`` from a NULL
buffer for an empty series) fails the test instead of passing unnoticed; so do the compiled
loop's allocation-failure paths (:data:`FAULTS`). Each run first checks that it imported the
sanitized module.

Any sanitizer report fails: the runtimes write their reports to files (``log_path``, also
for the processes the tests start) and the test fails when there is one, on top of the exit
status (both runtimes halt at the first error). Skipped where gcc has no sanitizer runtimes
(``gcc -print-file-name`` then answers the bare file name). Leak detection is off: CPython's
own allocations at exit would be reported. About 60 s on 2 cores: 10 s to build, 45 s of
tests at the examples their ``@settings`` give, the two groups side by side.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = ("libasan.so", "libubsan.so")
# Two groups of about equal time (about 43 s each here, most of it Hypothesis), run at once:
# one per core of a 2-core machine, every file once.
DIFFERENTIAL = (
    (
        "tests/unit/test_scan_paths.py",  # scan_request, the label codec, LabelCache
        "tests/unit/test_rw2_paths.py",  # rw2_to_rw1
        "tests/unit/test_route_compiled.py",  # route_labels: the decoder, its tables, the miss
        "tests/unit/test_rw2_in.py",  # rw2_to_rw1: every field and refusal, on both paths
        "tests/unit/test_scan_escaping.py",  # signature, the template shortcut
    ),
    (
        "tests/unit/test_rw2_scan.py",  # scan_rw2: RW 2.0 routed in one pass
        "tests/unit/test_rw2_out_paths.py",  # encode_v2, strip_start_timestamps
        "tests/unit/test_relabel_compiled.py",  # relabel_program, the compiled rule loop
        "tests/unit/test_audit.py",  # count_share: the audit's count, against its reference
        "tests/unit/test_rw2_out.py",  # the same, read back with the generated protobuf code
        "tests/unit/test_sample_age.py",  # sample_ages: the sample age limit's scan
        "tests/unit/test_series_budget_routing.py",  # the loops' review of misses (budget)
        "tests/unit/test_scan_fallbacks.py",  # the shapes handed to split_series
    ),
)
# The first lines of every sanitized run: the module imported is the sanitized copy's.
SANITIZED = (
    "import rwrouter.wire._scan as s\n"
    "assert '/sanitized' in s.__file__, s.__file__\n"
    "print('sanitized module:', s.__file__)\n"
)

# Edge shapes, each checked against its reference inside the sanitized process.
EDGES = r"""
from rwrouter.routing import scan
from rwrouter.wire import _scan, index, rw2_in, rw2_out
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

def entry(size, samples, hashed):  # an index entry: frame bytes, samples, shard hash (u32 LE)
    return b"".join(n.to_bytes(4, "little") for n in (size, samples, hashed))

# The queue side on bytes (its tests call it only through records and batching).
INDEXES = [b"", entry(2, 1, 5), entry(2, 1, 5) + entry(0, 0, 2**32 - 1) + entry(3, 7, 6),
           b"x" * 11]
for x in INDEXES:
    same(_scan.index_totals, index.index_totals_py, x)
    for shards in (0, 1, 2, 3, 7):
        for body in (b"", b"ab", b"abcde", b"abcdef"):
            same(_scan.split_shards, index.split_shards_py, body, x, shards)
print("edges ok")
"""

# Allocation failures swept through the compiled loop: Router.route (the compiled scan_request,
# LabelCache generations, the template shortcut, a destination that filters exemplars and
# histograms, metadata) with its n-th allocation failed (CPython's _testcapi.set_nomemory),
# for every n until 30 calls in a row succeed; cold (every label set new), cached, and
# promoted (the rotation at the call's start makes the cache old). Each call gives the result
# or raises, and the same router then routes the request right: its caches are whole.
FAULTS = r"""
import _testcapi
from rwrouter.relabel import parse_relabel_configs
from rwrouter.routing import Route, Router
from rwrouter.wire import remote_pb2
from rwrouter.wire.rw2_out import encode_request

KEEP = [{"source_labels": ["__name__"], "regex": "up|DCGM_.*", "action": "keep"}]
REWRITE = [{"target_label": "cluster", "replacement": "c9"},
           {"action": "labeldrop", "regex": "pod"}]

def router():
    return Router(global_rules=(), cache_max_age=10.0, routes=[
        Route("a", parse_relabel_configs(KEEP, "t")), Route("b", fallback=True),
        Route("c", parse_relabel_configs(REWRITE, "t"), send_exemplars=False,
              send_native_histograms=False)])

request = remote_pb2.WriteRequest()
for i, name in enumerate(["up", "node_load1", "DCGM_FI_DEV_GPU_UTIL", "up", ""] * 2):
    ts = request.timeseries.add()
    for label, value in sorted({"__name__": name, "gpu": str(i % 3), "pod": f"p{i}"}.items()):
        ts.labels.add(name=label, value=value)
    for k in range(i % 2):
        ts.samples.add(value=1.0, timestamp=k)
    if i % 3 == 0:
        ts.exemplars.add(value=1.0, timestamp=1).labels.add(name="trace_id", value="t")
    if i % 4 == 1:
        ts.histograms.add(count_int=1, sum=1.0, timestamp=1)
request.metadata.add(type=1, metric_family_name="up", help="h")
DATA = request.SerializeToString()
RW2 = encode_request(DATA, {b"up": (1, b"h", b"")}, lambda name: None).request

for rw2, data in ((False, DATA), (True, RW2)):  # scan_request, scan_rw2
    expected = router().route(data, rw2=rw2)
    for warm, now in (("cold", None), ("cached", 1.0), ("promoted", 6.0)):
        nth = streak = 0
        while streak < 30:
            r = router()
            if now is not None:
                r.route(data, now=0.0, rw2=rw2)
            _testcapi.set_nomemory(nth, nth + 1)
            try:
                out = r.route(data, now=now or 0.0, rw2=rw2)
            except Exception:
                out = None
            finally:
                _testcapi.remove_mem_hooks()
            streak = streak + 1 if out is not None else 0
            assert out in (None, expected), (rw2, warm, nth)
            assert r.route(data, now=now or 0.0, rw2=rw2) == expected, (rw2, warm, nth)
            nth += 1
        print("rw2" if rw2 else "rw1", warm, "allocations failed in turn:", nth - 30)
print("faults ok")
"""


def _runtimes() -> list[str] | None:
    paths = []
    for name in RUNTIMES:
        try:
            found = subprocess.run(
                ["gcc", f"-print-file-name={name}"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.strip()
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
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
            f"-I{sysconfig.get_paths()['include']}",
            str(wire / "_scan.c"),
            "-o",
            str(target),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    return {
        **os.environ,
        "LD_PRELOAD": ":".join(runtimes),
        "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        "PYTHONPATH": f"{src}{os.pathsep}{ROOT}",
    }


def _run(sanitized: dict[str, str], code: str, reports: Path, timeout: float) -> str:
    """Run ``code`` after :data:`SANITIZED` in a sanitized Python whose runtimes write their
    reports under ``reports`` (an empty directory): its stdout, or a failure with the output
    and any report."""
    env = {
        **sanitized,
        "ASAN_OPTIONS": f"{sanitized['ASAN_OPTIONS']}:log_path={reports}/asan",
        "UBSAN_OPTIONS": f"{sanitized['UBSAN_OPTIONS']}:log_path={reports}/ubsan",
    }
    run = subprocess.run(
        [sys.executable, "-c", SANITIZED + code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    reports_found = sorted(reports.iterdir())
    found = "".join(
        f"{path.name}:\n{path.read_text(errors='replace')[-4000:]}" for path in reports_found
    )
    output = run.stdout[-3000:] + run.stderr[-3000:]
    assert not reports_found, found + output
    assert run.returncode == 0, output
    assert "runtime error" not in run.stderr and "Sanitizer" not in run.stderr, output
    assert "sanitized module: " in run.stdout, output
    return run.stdout


@pytest.mark.timeout(300)
def test_edge_shapes_under_sanitizers(sanitized: dict[str, str], tmp_path: Path) -> None:
    assert "edges ok" in _run(sanitized, EDGES, tmp_path, timeout=120)


@pytest.mark.timeout(300)
def test_allocation_failures_under_sanitizers(sanitized: dict[str, str], tmp_path: Path) -> None:
    if importlib.util.find_spec("_testcapi") is None:
        pytest.skip("this Python has no _testcapi (its fault injection)")
    assert "faults ok" in _run(sanitized, FAULTS, tmp_path, timeout=120)


@pytest.mark.timeout(420)
def test_differential_tests_under_sanitizers(sanitized: dict[str, str], tmp_path: Path) -> None:
    def run(group: int) -> str:
        files = DIFFERENTIAL[group]
        args = ["-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly", *files]
        code = f"import sys, pytest\nsys.exit(pytest.main({args!r}))\n"
        reports = tmp_path / f"group-{group}"
        reports.mkdir()
        return _run(sanitized, code, reports, timeout=360)

    with ThreadPoolExecutor(len(DIFFERENTIAL)) as pool:  # each waits on its own process
        outs = list(pool.map(run, range(len(DIFFERENTIAL))))
    for out in outs:
        assert " passed" in out and " failed" not in out, out[-3000:]
