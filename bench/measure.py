"""One measurement: a router fed one workload by the driver, its figures, the sinks' check.

For each contender (one at a time, never two at once):

1. start it on 127.0.0.1 (a free port, its own temporary directory), wait until it is ready;
2. zero the two sinks (A: the critical DCGM series, B: everything else);
3. start the load driver (:mod:`bench.driver`, its own process), let it load the bodies;
4. take the CPU baseline of the router's process tree, let the driver send;
5. poll the sinks (bounded) until A and B received every expected sample;
6. CPU (utime + stime, router process and all its descendants, sampled during the run) and peak
   RSS (VmHWM, summed) of the router; stop it; read the sinks once more: exactly the expected
   samples, nothing refused, and with digests the same samples.

CPU covers "start of load" to "all delivered". Samples per CPU-second = samples sent / CPU
seconds of the router tree. The floor is ``time.process_time`` for snappy decompress +
compress of the same bodies (what any router must at least do).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import snappy  # type: ignore[import-untyped,unused-ignore]

from bench import procs
from bench.contenders import Contender, router_metrics
from bench.net import POLL, REPO, http, wait_ready
from bench.report import Measurement
from bench.sink import DIGEST_MASK, sample_digest
from bench.workload import Workload, is_destination_a
from rwrouter.wire import remote_pb2

STATS_TIMEOUT = 60.0  # seconds a sink's /stats may take (5 s failed rounds under load)


@dataclass
class Sink:
    """A running sink process (:mod:`bench.sink`)."""

    name: str
    proc: subprocess.Popen[Any]
    port: int

    @property
    def url(self) -> str:
        """Its remote write URL."""
        return f"http://127.0.0.1:{self.port}/api/v1/write"

    def stats(self) -> dict[str, Any]:
        """Its counters (see :mod:`bench.sink`)."""
        # a sink busy hashing every sample of a burst answers late, not never
        status, body = http("GET", f"http://127.0.0.1:{self.port}/stats", timeout=STATS_TIMEOUT)
        if status != 200:
            raise RuntimeError(f"sink {self.name}: /stats answered {status}")
        result: dict[str, Any] = json.loads(body)
        return result

    def reset(self, digest: bool | None = None) -> None:
        """Zero its counters; ``digest``: turn its hashing of every sample on or off."""
        query = "" if digest is None else f"?digest={int(digest)}"
        status, _ = http("POST", f"http://127.0.0.1:{self.port}/reset{query}")
        if status != 204:
            raise RuntimeError(f"sink {self.name}: /reset answered {status}")


def start_sink(name: str, workdir: Path, digest: bool = False) -> Sink:
    """Start one sink process (``digest``: it hashes every sample) and read its port."""
    proc = procs.spawn(
        [sys.executable, "-m", "bench.sink", "--name", name, *(["--digest"] if digest else [])],
        log=workdir / f"sink-{name}.log",
        stdout_pipe=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    line = procs.read_line(proc.stdout, time.monotonic() + 30, proc)
    parts = line.split()
    if len(parts) != 4 or parts[:3] != ["SINK", name, "LISTENING"]:
        procs.stop(proc)
        raise RuntimeError(f"sink {name}: unexpected first line {line!r}")
    return Sink(name, proc, int(parts[3]))


def wait_delivered(sinks: Sequence[Sink], expected: Sequence[int], deadline: float) -> bool:
    """Poll the sinks until each has at least its expected samples; False at ``deadline``."""
    while True:
        got = [s.stats()["samples"] for s in sinks]
        if all(g >= e for g, e in zip(got, expected, strict=True)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)


@dataclass(frozen=True)
class Check:
    """What the sinks must end with: samples at A and B (``expected``: whole run, ``prime``:
    after the first phase, or None for an unprimed run), the sample digests (A, B) when known
    (None: not compared), and whether the sinks hash the samples (``hashing``). ``split``:
    each sink must hold its own digest; False: only A and B together must hold both (the
    digest is a sum, so ``A + B`` then says every sample arrived once, wherever it went: the
    ``budgeted`` run, whose split between A and B depends on the arrival order)."""

    expected: tuple[int, int]
    prime: tuple[int, int] | None = None
    digests: tuple[str, str] | None = None
    hashing: bool = False
    split: bool = True


def measure(
    contender: Contender,
    workload: Workload,
    workload_path: Path,
    sinks: tuple[Sink, Sink],
    senders: int,
    workdir: Path,
    timeout: float,
    digests: tuple[str, str] | None = None,
    check: Check | None = None,
) -> Measurement:
    """Run the load against one contender and measure it (see the module docstring).
    ``workload``/``workload_path``: the bodies of the contender's input; ``check``: what the
    sinks must end with (default: the workload's A/B samples and ``digests``, hashing when
    ``digests`` is given). A primed check (``check.prime``) sends the first scrape's
    requests, waits until the sinks hold ``check.prime``, reads the CPU, then sends the rest:
    the ``prime_*`` figures are of the first scrape, the others of the rest."""
    check = check or Check(
        (workload.samples_a, workload.samples_b), digests=digests, hashing=digests is not None
    )
    prime_requests = workload.requests_per_scrape if check.prime else 0
    m = Measurement(
        contender.name,
        input=contender.input,
        body_bytes_per_sample=workload.compressed_bytes_per_series,
        expected_a=check.expected[0],
        expected_b=check.expected[1],
        samples_sent=sum(workload.samples_per_body[prime_requests:]),
        notes=list(contender.notes),
        router=contender.router,
        prime_samples=sum(workload.samples_per_body[:prime_requests]),
    )
    log = workdir / f"{contender.name.replace('/', '-')}.log"
    proc = procs.spawn(contender.argv, log=log, cwd=workdir, env=contender.env)
    monitor = procs.TreeMonitor(proc.pid)
    driver: subprocess.Popen[Any] | None = None
    try:
        wait_ready(contender.ready_url, proc, timeout=60, what=contender.name)
        for sink in sinks:
            sink.reset(digest=check.hashing)
        result_path = workdir / "driver.json"
        driver = _spawn_driver(contender, workload_path, senders, result_path, prime_requests)
        _load(m, check, contender, proc, driver, monitor, sinks, timeout)
        m.driver = json.loads(result_path.read_text())
        _latencies(m, bool(prime_requests))
        m.ok = m.ok and driver_ok(m)
        if contender.metrics_path:
            m.router_metrics = router_metrics(contender.metrics_url, contender.parse_metrics)
    except Exception as exc:
        m.error = f"{type(exc).__name__}: {exc}"
    finally:
        monitor.stop()
        if driver is not None:
            procs.stop(driver, timeout=5)
        m.exit_status = procs.stop(proc, descendants=monitor.processes())
        with contextlib.suppress(Exception):
            read_sinks(
                m, sinks, check.digests, split=check.split
            )  # after stop: duplicates would show here
        if m.delivered_a != m.expected_a or m.delivered_b != m.expected_b:
            m.ok = False
        if not m.ok:
            tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
            m.notes.append(f"{contender.name} log tail: " + " | ".join(tail))
    return m


def _spawn_driver(
    contender: Contender, workload_path: Path, senders: int, out: Path, pause_after: int
) -> subprocess.Popen[Any]:
    """Start the load driver for ``contender`` and wait for its ``DRIVER READY``."""
    driver = procs.spawn(
        [
            *(sys.executable, "-m", "bench.driver", "--url", contender.write_url),
            *("--workload", str(workload_path), "--senders", str(senders)),
            *("--out", str(out), "--input", contender.input, "--go-stdin"),
            *(("--pause-after", str(pause_after)) if pause_after else ()),
        ],
        log=out.with_suffix(".log"),
        stdin=subprocess.PIPE,
        stdout_pipe=True,
        cwd=REPO,
    )
    assert driver.stdout is not None
    line = procs.read_line(driver.stdout, time.monotonic() + 120, driver)
    if line != "DRIVER READY":
        raise RuntimeError(f"driver: unexpected line {line!r}")
    return driver


def _go(driver: subprocess.Popen[Any]) -> None:
    assert driver.stdin is not None
    driver.stdin.write(b"go\n")
    driver.stdin.flush()


def _load(
    m: Measurement,
    check: Check,
    contender: Contender,
    proc: subprocess.Popen[Any],
    driver: subprocess.Popen[Any],
    monitor: procs.TreeMonitor,
    sinks: tuple[Sink, Sink],
    timeout: float,
) -> None:
    """Let the driver send (in two phases when primed) and wait for the sinks; fill ``m``'s
    CPU, wall, RSS and rate figures and ``m.ok`` (everything delivered in time)."""
    monitor.start()  # CPU baseline
    t0 = time.monotonic()
    deadline = t0 + timeout
    _go(driver)
    delivered = True
    if check.prime:
        assert driver.stdout is not None
        line = procs.read_line(driver.stdout, deadline, driver)
        if line != "DRIVER PAUSED":
            raise RuntimeError(f"driver: unexpected line {line!r}")
        delivered = wait_delivered(sinks, check.prime, deadline)
        monitor.sample()
        m.prime_cpu_seconds = monitor.cpu_seconds()
        m.prime_wall_seconds = time.monotonic() - t0
        m.prime_samples_per_cpu_second = _rate(m.prime_samples, m.prime_cpu_seconds)
        t0 = time.monotonic()
        _go(driver)
    while driver.poll() is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"driver did not finish within {timeout:.0f} s")
        if proc.poll() is not None:
            raise RuntimeError(f"{contender.name} exited with status {proc.returncode}")
        time.sleep(POLL)
    delivered = delivered and wait_delivered(sinks, check.expected, deadline)
    m.wall_seconds = time.monotonic() - t0
    monitor.stop()
    m.cpu_seconds = monitor.cpu_seconds() - m.prime_cpu_seconds
    m.peak_rss_mib = monitor.peak_rss_bytes() / 2**20
    m.processes = monitor.process_count()
    m.samples_per_cpu_second = _rate(m.samples_sent, m.cpu_seconds)
    if not delivered:
        m.notes.append(f"not all delivered within {timeout:.0f} s")
    m.ok = delivered


def _rate(samples: int, cpu_seconds: float) -> float:
    return samples / cpu_seconds if cpu_seconds > 0 else 0.0


def _latencies(m: Measurement, primed: bool) -> None:
    """``m``'s load seconds and latencies from the driver's result: of the phase after the
    first scrape when ``primed`` (and the ``prime_`` ones of the first), else of the run."""
    d = m.driver
    m.load_seconds = d["wall_seconds"]
    m.p50_ms, m.p99_ms = d["p50_ms"], d["p99_ms"]
    phases = d.get("phases", [])
    if primed and len(phases) == 2:
        cold, steady = phases
        m.prime_p50_ms, m.prime_p99_ms = cold["p50_ms"], cold["p99_ms"]
        m.p50_ms, m.p99_ms = steady["p50_ms"], steady["p99_ms"]
        m.load_seconds = steady["wall_seconds"]


def driver_ok(m: Measurement) -> bool:
    """Whether the driver's result (``m.driver``) shows every request accepted with exact
    Written headers (RW 2.0: present on every 2xx; RW 1.0: exact when present); a note per
    problem."""
    d = m.driver
    problems = {
        "lost": "requests refused for good",
        "written_missing": "2xx answers without the Written headers",
        "written_wrong": "2xx answers whose Written headers do not count the body",
    }
    for key, what in problems.items():
        if d.get(key):
            m.notes.append(f"driver: {d[key]} {what}")
    return not any(d.get(key) for key in problems)


def digest_sum(digests: tuple[str, str]) -> str:
    """The sample digest of A's and B's samples together (hex, the sinks' format): the
    digests are sums of per-sample hashes modulo 2**64 (:func:`bench.sink.sample_digest`)."""
    return f"{(int(digests[0], 16) + int(digests[1], 16)) & DIGEST_MASK:016x}"


def read_sinks(
    m: Measurement,
    sinks: tuple[Sink, Sink],
    digests: tuple[str, str] | None,
    *,
    split: bool = True,
) -> None:
    """Fill ``m``'s sink figures from their ``/stats`` (samples, requests, refusals, content
    types) and, with ``digests`` (A, B), whether they hold exactly those samples (``split``
    False: whether A and B together hold exactly the samples of both, content ``same (A+B)``);
    a refused request or another content makes ``m`` not ok."""
    a, b = (s.stats() for s in sinks)
    m.delivered_a, m.delivered_b = a["samples"], b["samples"]
    m.requests_a, m.requests_b = a["requests"], b["requests"]
    m.sink_errors = a["errors"] + b["errors"]
    for stats in (a, b):
        for ctype, n in stats.get("content_types", {}).items():
            m.sink_content_types[ctype] = m.sink_content_types.get(ctype, 0) + n
    if m.sink_errors:
        m.ok = False
        m.notes.append(
            f"the sinks refused {m.sink_errors} requests (400 undecodable or 415 "
            f"not RW 1.0); content types {m.sink_content_types}"
        )
    if a.get("digest") is not None and b.get("digest") is not None:
        m.digests = (a["digest"], b["digest"])
    if digests is not None and split:
        same = (a["digest"], b["digest"]) == digests
        m.content = "same" if same else "DIFFERENT"
        if not same:
            m.ok = False
            m.notes.append(
                f"sample digests A/B {a['digest']}/{b['digest']}, expected "
                f"{digests[0]}/{digests[1]}"
            )
    elif digests is not None:
        got = digest_sum((a["digest"], b["digest"])) if m.digests else None
        same = got == digest_sum(digests)
        m.content = "same (A+B)" if same else "DIFFERENT"
        if not same:
            m.ok = False
            m.notes.append(
                f"sample digest of A+B {got}, expected {digest_sum(digests)}: a sample lost "
                "or sent twice"
            )


def expected_digests(workload: Workload) -> tuple[str, str]:
    """The sample digests (:func:`bench.sink.sample_digest`) sinks A and B must end with:
    every sample of the workload's RW 1.0 bodies, split by :data:`A_REGEX`."""
    totals = [0, 0]
    for body in workload.bodies:
        request = remote_pb2.WriteRequest()
        request.ParseFromString(snappy.uncompress(body))
        for ts in request.timeseries:
            name = next(label.value for label in ts.labels if label.name == "__name__")
            totals[0 if is_destination_a(name) else 1] += sample_digest(ts)
    return f"{totals[0] & DIGEST_MASK:016x}", f"{totals[1] & DIGEST_MASK:016x}"


def _floor_pass(bodies: Sequence[bytes]) -> float:
    """CPU seconds (``time.process_time``: user + system) of snappy decompress + compress."""
    t0 = time.process_time()
    for body in bodies:
        snappy.compress(snappy.uncompress(body))
    return time.process_time() - t0


def floor(workload_path: Path) -> dict[str, float]:
    """snappy decompress + compress of every body, on this process's CPU (samples/CPU-s).

    Measured on bodies freshly loaded from the cache file, so every run measures the same way
    (a process that just generated them gets a glibc malloc state where the 0.5 MB buffers
    come from the heap: 2-3x faster). ``samples_per_cpu_second`` is that plain figure,
    including the page faults of the buffers glibc maps and unmaps for each call;
    ``no_page_faults_samples_per_cpu_second`` is measured again after
    ``mallopt(M_MMAP_THRESHOLD=64 MiB)`` (buffers reused from the heap: compute only).
    """
    from bench.workload import load

    workload = load(workload_path)
    cpu = _floor_pass(workload.bodies)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 64 * 2**20)  # M_MMAP_THRESHOLD (also stops its dynamic adjustment)
        libc.mallopt(-1, 256 * 2**20)  # M_TRIM_THRESHOLD
    _floor_pass(workload.bodies)  # warm the heap
    cpu_nf = _floor_pass(workload.bodies)
    n = workload.samples
    return {
        "cpu_seconds": cpu,
        "samples_per_cpu_second": n / cpu if cpu else 0.0,
        "no_page_faults_cpu_seconds": cpu_nf,
        "no_page_faults_samples_per_cpu_second": n / cpu_nf if cpu_nf else 0.0,
    }


def floor_in_child(workload_path: Path) -> dict[str, float]:
    """:func:`floor` in a fresh Python process: a runner that just generated the workload has a
    glibc malloc state (a raised dynamic mmap threshold) that makes its own snappy calls ~3x
    cheaper, and the plain floor must not depend on whether the cache existed."""
    code = (
        "import json, sys; from pathlib import Path; from bench.measure import floor; "
        "print(json.dumps(floor(Path(sys.argv[1]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(workload_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=REPO,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result
