"""The router comparison: vmagent, then rwrouter, on the same workload and sinks, in one run.

Contenders (:data:`bench.report.CONTENDERS`): vmagent and rwrouter fed the workload's remote
write 1.0 requests, and ``rwrouter-rw2``: rwrouter fed the same requests as remote write 2.0
(:mod:`bench.rw2`, encoded once before the first round; vmagent cannot take RW 2.0).
``--input`` picks the inputs. For each contender (one at a time, never two at once):

1. start it on 127.0.0.1 (a free port, its own temporary directory), wait until it is ready;
2. zero the two sinks (A: the critical DCGM series, B: everything else);
3. start the load driver (:mod:`bench.driver`, its own process), let it load the bodies;
4. take the CPU baseline of the router's process tree, let the driver send;
5. poll the sinks (bounded) until A and B received every expected sample;
6. CPU (utime + stime, router process and all its descendants, sampled during the run) and peak
   RSS (VmHWM, summed) of the router; stop it; read the sinks once more: exactly the expected
   samples, nothing refused, and with ``--check-content`` the same samples (digests).

CPU covers "start of load" to "all delivered". Samples per CPU-second = samples sent / CPU
seconds of the router tree. The floor is the runner's own ``time.process_time`` for snappy
decompress + compress of the same bodies (what any router must at least do).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import snappy  # type: ignore[import-untyped,unused-ignore]

from bench import procs
from bench import vmagent as vm
from bench.report import (
    CONTENDERS,
    INPUT_OF,
    Measurement,
    median_round,
    ratios,
    rounds_summary,
    table,
)
from bench.rw2 import as_rw2, sizes_line
from bench.sink import DIGEST_MASK, sample_digest
from bench.workload import A_REGEX, Workload, is_destination_a, load_or_generate, save
from rwrouter.wire import remote_pb2

ROUTERS = ("vmagent", "rwrouter")
INPUTS = ("rw1", "rw2")
SMOKE_NODES, SMOKE_SCRAPES = 3, 2
DEFAULT_NODES, DEFAULT_SCRAPES = 280, 20
POLL = 0.05  # seconds between polls of a sink or a readiness endpoint


# ---------------------------------------------------------------------------------------------
# Small HTTP helpers (stdlib: the runner stays free of an event loop)


def http(method: str, url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """One request; (status, body). Connection errors give status 0."""
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, b""


def wait_ready(url: str, proc: subprocess.Popen[Any], timeout: float, what: str) -> None:
    """Poll ``url`` until it answers 200; raise if ``proc`` exits or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before ready")
        if http("GET", url, timeout=1.0)[0] == 200:
            return
        time.sleep(POLL)
    raise RuntimeError(f"{what} not ready at {url} after {timeout:.0f} s")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------
# Sinks


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
        status, body = http("GET", f"http://127.0.0.1:{self.port}/stats")
        if status != 200:
            raise RuntimeError(f"sink {self.name}: /stats answered {status}")
        result: dict[str, Any] = json.loads(body)
        return result

    def reset(self) -> None:
        """Zero its counters."""
        status, _ = http("POST", f"http://127.0.0.1:{self.port}/reset")
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


REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------
# Contenders


def labeldrop_rules(count: int) -> list[dict[str, Any]]:
    """``count`` no-op rules: labeldrop of label names that never occur (each still walks every
    label of every series it sees)."""
    return [{"action": "labeldrop", "regex": f"bench_absent_label_{i}"} for i in range(count)]


def yaml_dump(value: Any) -> str:
    """YAML text of plain data (JSON is YAML; keeps the runner free of a YAML writer)."""
    return json.dumps(value, indent=2) + "\n"


@dataclass
class Contender:
    """How to start one router (argv, readiness URL, write URL) in its work directory."""

    name: str
    argv: list[str]
    port: int
    ready_path: str
    input: str = "rw1"  # what the driver sends it (bench.rw2.INPUTS)
    write_path: str = "/api/v1/write"
    notes: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    metrics_path: str | None = None  # read at the end (after delivery) when set
    parse_metrics: Callable[[str], dict[str, Any]] | None = None  # of the metrics_path text

    @property
    def metrics_url(self) -> str:
        """Its self-metrics endpoint."""
        return f"http://127.0.0.1:{self.port}{self.metrics_path}"

    @property
    def write_url(self) -> str:
        """URL the driver sends to."""
        return f"http://127.0.0.1:{self.port}{self.write_path}"

    @property
    def ready_url(self) -> str:
        """URL answering 200 once the router is ready."""
        return f"http://127.0.0.1:{self.port}{self.ready_path}"


#: Samples per request each router sends (both the same): vmagent's default block
#: (-remoteWrite.maxRowsPerBlock). Prometheus' default max_samples_per_send (2000), which
#: rwrouter keeps as its own default, would make rwrouter send 5x the requests vmagent sends.
DEFAULT_BATCH = 10_000

#: vmagent flags besides listen address, URLs, relabel files and tmpDataPath, with why.
VMAGENT_FLAGS: tuple[tuple[str, str], ...] = (
    ("-loggerLevel=WARN", "no per-request logging either way; rwrouter logs at its default"),
    ("-memory.allowedPercent=60", "vmagent's default, written out"),
    ("-remoteWrite.queues=4", "vmagent's default on 2 cores (2 x CPUs), written out"),
)

#: Flags passed only when the vmagent's ``-help`` lists them (newer vmagents), with why.
VMAGENT_IF_LISTED: tuple[tuple[str, str], ...] = (
    (
        "-remoteWrite.forcePromProto",
        "remote write 1.0 (snappy), as rwrouter sends, from the first request: without it a "
        "vmagent that knows the VictoriaMetrics protocol sends zstd first, and re-packs each "
        "refused block to snappy after the sink's 400",
    ),
)


def vmagent_flags(listed: frozenset[str]) -> list[str]:
    """:data:`VMAGENT_FLAGS`, plus those of :data:`VMAGENT_IF_LISTED` in ``listed`` (the flag
    names the vmagent's ``-help`` lists)."""
    extra = [flag for flag, _ in VMAGENT_IF_LISTED if vm.flag_name(flag) in listed]
    return [*(flag for flag, _ in VMAGENT_FLAGS), *extra]


def vmagent_argv(
    binary: Path,
    *,
    port: int,
    workdir: Path,
    urls: tuple[str, str],
    batch: int,
    flags: Sequence[str],
) -> list[str]:
    """The vmagent command line: listen on ``port``, A then B with their relabel files in
    ``workdir`` (keepA.yml, dropA.yml), its queue in ``workdir``, ``batch`` samples per block
    (``-remoteWrite.maxRowsPerBlock``), then ``flags``."""
    return [
        str(binary),
        f"-httpListenAddr=127.0.0.1:{port}",
        f"-remoteWrite.url={urls[0]}",
        f"-remoteWrite.urlRelabelConfig={workdir / 'keepA.yml'}",
        f"-remoteWrite.url={urls[1]}",
        f"-remoteWrite.urlRelabelConfig={workdir / 'dropA.yml'}",
        f"-remoteWrite.tmpDataPath={workdir / 'vmagent-data'}",
        f"-remoteWrite.maxRowsPerBlock={batch}",
        *flags,
    ]


def vmagent_contender(
    workdir: Path,
    a_url: str,
    b_url: str,
    rules: int,
    batch: int = DEFAULT_BATCH,
    *,
    binary: Path,
    flags: Sequence[str],
) -> Contender:
    """vmagent (``binary``): A keeps :data:`A_REGEX`, B drops it (one
    -remoteWrite.urlRelabelConfig per -remoteWrite.url), each file with ``rules - 1`` no-op
    labeldrop rules first; at most ``batch`` samples per request it sends
    (``-remoteWrite.maxRowsPerBlock``); ``flags`` (:func:`vmagent_flags`). Its ``/metrics``
    is read at the end (:func:`bench.vmagent.parse_metrics`)."""
    keep = [
        *labeldrop_rules(rules - 1),
        {"action": "keep", "source_labels": ["__name__"], "regex": A_REGEX},
    ]
    drop = [
        *labeldrop_rules(rules - 1),
        {"action": "drop", "source_labels": ["__name__"], "regex": A_REGEX},
    ]
    (workdir / "keepA.yml").write_text(yaml_dump(keep))
    (workdir / "dropA.yml").write_text(yaml_dump(drop))
    port = free_port()
    argv = vmagent_argv(
        binary, port=port, workdir=workdir, urls=(a_url, b_url), batch=batch, flags=flags
    )
    return Contender(
        "vmagent", argv, port, "/health", metrics_path="/metrics", parse_metrics=vm.parse_metrics
    )


def export_rwrouter(ref: str, dest: Path) -> dict[str, str]:
    """Export ``src/rwrouter`` of git ``ref`` into ``dest`` (``git archive``: the repository is
    not touched) and return an environment whose PYTHONPATH puts it before the installed
    (editable) rwrouter. Pure Python only: a C extension of that ref is not built."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, "src/rwrouter"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=60)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(dest / "src")
    return env


def rwrouter_supports_workers(env: dict[str, str] | None = None) -> bool:
    """Whether ``rwrouter run --help`` lists ``--workers``."""
    out = subprocess.run(
        [sys.executable, "-m", "rwrouter", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    return "--workers" in out.stdout


def rwrouter_contender(
    workdir: Path,
    a_url: str,
    b_url: str,
    rules: int,
    workers: int | None,
    env: dict[str, str] | None = None,
    batch: int = DEFAULT_BATCH,
    name: str = "rwrouter",
) -> Contender:
    """rwrouter: destination A keeps :data:`A_REGEX`, B is ``fallback: true``; each with
    ``rules - 1`` no-op labeldrop rules (A's keep comes last) and at most ``batch`` samples
    per request it sends (``queue_config.max_samples_per_send``); defaults otherwise (so both
    destinations get remote write 1.0, whatever the input). ``name``: ``rwrouter`` (fed
    RW 1.0) or ``rwrouter-rw2`` (fed RW 2.0), the same configuration."""
    port = free_port()
    queue = {"max_samples_per_send": batch}
    config = {
        "server": {"listen_address": f"127.0.0.1:{port}"},
        "storage": {"path": str(workdir / "rwrouter-data")},
        "remote_write": [
            {
                "name": "A",
                "url": a_url,
                "write_relabel_configs": [
                    *labeldrop_rules(rules - 1),
                    {"action": "keep", "source_labels": ["__name__"], "regex": A_REGEX},
                ],
                "queue_config": queue,
            },
            {
                "name": "B",
                "url": b_url,
                "fallback": True,
                "write_relabel_configs": labeldrop_rules(rules - 1),
                "queue_config": queue,
            },
        ],
    }
    path = workdir / "rwrouter.yaml"
    path.write_text(yaml_dump(config))
    argv = [sys.executable, "-m", "rwrouter", "run", "--config", str(path)]
    notes = []
    if workers is not None:
        argv += ["--workers", str(workers)]
        notes.append(f"--workers {workers}")
    return Contender(
        name,
        argv,
        port,
        "/-/ready",
        input=INPUT_OF[name],
        notes=notes,
        env=env,
        metrics_path="/metrics",
        parse_metrics=parse_router_metrics,
    )


def router_metrics(
    url: str, parse: Callable[[str], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A router's own figures from its ``/metrics`` (read once everything was delivered,
    before it stops), by ``parse`` (default :func:`parse_router_metrics`; vmagent's:
    :func:`bench.vmagent.parse_metrics`); an unreachable endpoint gives ``{"error": ...}``."""
    status, body = http("GET", url, timeout=15.0)
    if status != 200:
        return {"error": f"GET {url} answered {status}"}
    return (parse or parse_router_metrics)(body.decode("utf-8", "replace"))


def parse_router_metrics(text: str) -> dict[str, Any]:
    """rwrouter's figures from its ``/metrics`` text (with ``--workers`` the exposition is
    merged with a ``worker`` label): ``version`` and ``accelerated`` (one per worker) of
    ``rwrouter_build_info``, write requests and samples received per worker (``"all"``
    without ``--workers``), requests by status code and by protocol (``1.0``, ``2.0``: of
    ``rwrouter_received_protocol_requests_total``), relabel cache entries/bytes per worker
    and its lookups by result. Metrics this rwrouter does not expose are left out."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {}

    def add(key: str, sub: str, value: float) -> None:
        d = out.setdefault(key, {})
        d[sub] = d.get(sub, 0) + value

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            worker = s.labels.get("worker", "all")
            if s.name == "rwrouter_build_info":
                out["version"] = s.labels.get("version", "unknown")
                add("accelerated", worker, 0)
                out["accelerated"][worker] = s.labels.get("accelerated", "unknown")
            elif s.name == "rwrouter_received_requests_total":
                add("requests_by_worker", worker, s.value)
                add("requests_by_code", s.labels.get("code", "?"), s.value)
            elif s.name == "rwrouter_received_protocol_requests_total":
                add("requests_by_protocol", s.labels.get("protocol", "?"), s.value)
            elif s.name == "rwrouter_received_samples_total":
                add("samples_by_worker", worker, s.value)
            elif s.name == "rwrouter_relabel_cache_entries":
                add("cache_entries_by_worker", worker, s.value)
            elif s.name == "rwrouter_relabel_cache_bytes":
                add("cache_bytes_by_worker", worker, s.value)
            elif s.name == "rwrouter_relabel_cache_lookups_total":
                add("cache_lookups", s.labels.get("result", "?"), s.value)
            elif s.name == "rwrouter_worker_up":
                add("worker_up", worker, s.value)
    return out


def metrics_summary(rm: dict[str, Any]) -> list[str]:
    """Report lines for :func:`router_metrics`' result."""
    if not rm:
        return []
    if "error" in rm:
        return [f"/metrics: {rm['error']}"]
    lines = []
    if "accelerated" in rm:
        acc = rm["accelerated"]
        lines.append(
            "accelerated (rwrouter_build_info): "
            + ", ".join(f"{w}={v}" if w != "all" else v for w, v in sorted(acc.items()))
        )
    else:
        lines.append("accelerated: not exposed by this rwrouter")
    if "requests_by_worker" in rm:
        req = rm["requests_by_worker"]
        smp = rm.get("samples_by_worker", {})
        total = sum(req.values()) or 1
        parts = [
            f"{w}: {req[w]:,.0f} ({req[w] / total:.0%}), {smp.get(w, 0):,.0f} samples"
            for w in sorted(req)
        ]
        by_protocol = sorted(rm.get("requests_by_protocol", {}).items())
        protocols = " | by protocol: " + ", ".join(f"{p}={n:,.0f}" for p, n in by_protocol)
        protocols = protocols if by_protocol else ""
        lines.append(
            "write requests received per worker: "
            + "; ".join(parts)
            + " | by code: "
            + ", ".join(f"{c}={n:,.0f}" for c, n in sorted(rm.get("requests_by_code", {}).items()))
            + protocols
        )
    if "cache_lookups" in rm or "cache_entries_by_worker" in rm:
        lk = rm.get("cache_lookups", {})
        ent = rm.get("cache_entries_by_worker", {})
        lines.append(
            "relabel cache: entries "
            + ", ".join(f"{w}={v:,.0f}" for w, v in sorted(ent.items()))
            + f"; lookups hit {lk.get('hit', 0):,.0f}, miss {lk.get('miss', 0):,.0f}"
        )
    return lines


# ---------------------------------------------------------------------------------------------
# One measurement


def wait_delivered(sinks: Sequence[Sink], expected: Sequence[int], deadline: float) -> bool:
    """Poll the sinks until each has at least its expected samples; False at ``deadline``."""
    while True:
        got = [s.stats()["samples"] for s in sinks]
        if all(g >= e for g, e in zip(got, expected, strict=True)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)


def measure(
    contender: Contender,
    workload: Workload,
    workload_path: Path,
    sinks: tuple[Sink, Sink],
    senders: int,
    workdir: Path,
    timeout: float,
    digests: tuple[str, str] | None = None,
) -> Measurement:
    """Run the load against one contender and measure it (see the module docstring).
    ``workload``/``workload_path``: the bodies of the contender's input; ``digests``: the
    sample digests A and B must end with (sinks started with ``--digest``), or None."""
    m = Measurement(
        contender.name,
        input=contender.input,
        body_bytes_per_sample=workload.compressed_bytes_per_series,
        expected_a=workload.samples_a,
        expected_b=workload.samples_b,
        samples_sent=workload.samples,
        notes=list(contender.notes),
    )
    log = workdir / f"{contender.name}.log"
    proc = procs.spawn(contender.argv, log=log, cwd=workdir, env=contender.env)
    monitor = procs.TreeMonitor(proc.pid)
    driver: subprocess.Popen[Any] | None = None
    try:
        wait_ready(contender.ready_url, proc, timeout=60, what=contender.name)
        for sink in sinks:
            sink.reset()
        result_path = workdir / f"driver-{contender.name}.json"
        driver = procs.spawn(
            [
                sys.executable,
                "-m",
                "bench.driver",
                "--url",
                contender.write_url,
                "--workload",
                str(workload_path),
                "--senders",
                str(senders),
                "--out",
                str(result_path),
                "--input",
                contender.input,
                "--go-stdin",
            ],
            log=workdir / f"driver-{contender.name}.log",
            stdin=subprocess.PIPE,
            stdout_pipe=True,
            cwd=REPO,
        )
        assert driver.stdout is not None and driver.stdin is not None
        line = procs.read_line(driver.stdout, time.monotonic() + 120, driver)
        if line != "DRIVER READY":
            raise RuntimeError(f"driver: unexpected line {line!r}")
        monitor.start()  # CPU baseline
        t0 = time.monotonic()
        driver.stdin.write(b"go\n")
        driver.stdin.flush()
        deadline = t0 + timeout
        while driver.poll() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"driver did not finish within {timeout:.0f} s")
            if proc.poll() is not None:
                raise RuntimeError(f"{contender.name} exited with status {proc.returncode}")
            time.sleep(POLL)
        m.driver = json.loads(result_path.read_text())
        m.load_seconds = m.driver["wall_seconds"]
        m.p50_ms, m.p99_ms = m.driver["p50_ms"], m.driver["p99_ms"]
        delivered = wait_delivered(sinks, (workload.samples_a, workload.samples_b), deadline)
        m.wall_seconds = time.monotonic() - t0
        monitor.stop()
        m.cpu_seconds = monitor.cpu_seconds()
        m.peak_rss_mib = monitor.peak_rss_bytes() / 2**20
        m.processes = monitor.process_count()
        m.samples_per_cpu_second = m.samples_sent / m.cpu_seconds if m.cpu_seconds else 0.0
        if not delivered:
            m.notes.append(f"not all delivered within {timeout:.0f} s")
        m.ok = delivered and driver_ok(m)
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
            read_sinks(m, sinks, digests)  # after stop: duplicates would show here
        if m.delivered_a != m.expected_a or m.delivered_b != m.expected_b:
            m.ok = False
        if not m.ok:
            tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
            m.notes.append(f"{contender.name} log tail: " + " | ".join(tail))
    return m


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


def read_sinks(m: Measurement, sinks: tuple[Sink, Sink], digests: tuple[str, str] | None) -> None:
    """Fill ``m``'s sink figures from their ``/stats`` (samples, requests, refusals, content
    types) and, with ``digests`` (A, B), whether they hold exactly those samples; a refused
    request or another content makes ``m`` not ok."""
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
    if digests is not None:
        same = (a["digest"], b["digest"]) == digests
        m.content = "same" if same else "DIFFERENT"
        if not same:
            m.ok = False
            m.notes.append(
                f"sample digests A/B {a['digest']}/{b['digest']}, expected "
                f"{digests[0]}/{digests[1]}"
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
        "import json, sys; from pathlib import Path; from bench.runner import floor; "
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


# ---------------------------------------------------------------------------------------------
# Entry point


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command line of ``python -m bench``."""
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="rwrouter vs vmagent on the GPU-fleet workload, in one run "
        "(`python -m bench micro --help`: in-process measurements).",
    )
    p.add_argument("--nodes", type=int, default=None, help=f"default {DEFAULT_NODES}")
    p.add_argument("--scrapes", type=int, default=None, help=f"default {DEFAULT_SCRAPES}")
    p.add_argument("--senders", type=int, default=4, help="driver connections (default 4)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=None, help="rwrouter run --workers N")
    p.add_argument("--rules", type=int, default=1, help="relabel rules per destination (K)")
    p.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        help="samples per request each router sends, both the same (vmagent "
        f"-remoteWrite.maxRowsPerBlock, rwrouter max_samples_per_send; default "
        f"{DEFAULT_BATCH}, vmagent's default)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the contenders this many times, alternating (ABBA); the table "
        "shows each one's median run, and the ratios of each round",
    )
    p.add_argument(
        "--only",
        choices=ROUTERS,
        default=None,
        help="one router (rwrouter: with the inputs of --input)",
    )
    p.add_argument(
        "--input",
        choices=[*INPUTS, "both"],
        default="both",
        help="what the driver sends: rw1 (remote write 1.0, to vmagent and "
        "rwrouter), rw2 (remote write 2.0, to rwrouter only) or both "
        "(default)",
    )
    p.add_argument(
        "--rw2-metadata",
        action="store_true",
        help="RW 2.0 input with a type and help per series (Prometheus 3 with "
        "metadata-wal-records); default none, as Prometheus 3 sends by "
        "default",
    )
    p.add_argument(
        "--check-content",
        action="store_true",
        help="the sinks hash every sample and must hold exactly the workload's "
        "samples (on with --smoke; ~2 us per sample in the sinks)",
    )
    p.add_argument(
        "--vmagent",
        type=Path,
        default=None,
        help="the vmagent binary (default: the one scripts/build-peers built, in the peers cache)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help=f"tiny run: {SMOKE_NODES} nodes, {SMOKE_SCRAPES} scrapes",
    )
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per contender (default from the workload size)",
    )
    p.add_argument("--keep-workdir", action="store_true", help="keep logs and configs")
    p.add_argument(
        "--rwrouter-ref",
        default=None,
        help="run rwrouter's src/ of this git ref (git archive), e.g. HEAD, "
        "instead of the working tree",
    )
    p.add_argument(
        "--rwrouter-src",
        type=Path,
        default=None,
        help="run rwrouter from this directory (PYTHONPATH of the rwrouter process "
        "only), e.g. another commit's src/ with its C extension built",
    )
    args = p.parse_args(argv)
    if args.rwrouter_ref and args.rwrouter_src:
        p.error("--rwrouter-ref and --rwrouter-src exclude each other")
    if args.nodes is None:
        args.nodes = SMOKE_NODES if args.smoke else DEFAULT_NODES
    if args.scrapes is None:
        args.scrapes = SMOKE_SCRAPES if args.smoke else DEFAULT_SCRAPES
    if args.rules < 1:
        p.error("--rules must be >= 1")
    if args.batch < 1:
        p.error("--batch must be >= 1")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    args.check_content = args.check_content or args.smoke
    if not contender_names(args.only, args.input):
        p.error("vmagent cannot take remote write 2.0: --only vmagent needs --input rw1 or both")
    return args


def contender_names(only: str | None, inputs: str) -> list[str]:
    """The contenders to run, in :data:`~bench.report.CONTENDERS` order: those of the router
    ``only`` (both when None) fed one of ``inputs`` (``rw1``, ``rw2`` or ``both``)."""
    return [
        name
        for name in CONTENDERS
        if (only is None or name.split("-")[0] == only) and inputs in ("both", INPUT_OF[name])
    ]


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM/SIGHUP raise KeyboardInterrupt, so cleanup runs (children are stopped)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class Setup:
    """What every round shares: the contenders' names, the vmagent peer (None without
    vmagent), the rwrouter environment and ``--workers``, the workload and its bodies per
    input (:data:`~bench.report.INPUT_OF` values: (workload, cache path)), the expected sample
    digests (``--check-content``) and the floor."""

    names: list[str]
    peer: dict[str, Any] | None
    rw_env: dict[str, str] | None
    workers: int | None
    workload: Workload
    inputs: dict[str, tuple[Workload, Path]]
    digests: tuple[str, str] | None
    floor: dict[str, float]
    timeout: float


def prepare(args: argparse.Namespace, workdir: Path) -> Setup:
    """Load the workload (and encode its RW 2.0 bodies when an RW 2.0 contender runs), the
    rwrouter of ``--rwrouter-ref``, the floor; print what was prepared."""
    names = contender_names(args.only, args.input)
    rw_env = None
    rwrouters = [n for n in names if n != "vmagent"]
    if args.rwrouter_ref and rwrouters:
        rw_env = export_rwrouter(args.rwrouter_ref, workdir / "rwrouter-src")
        print(f"rwrouter from git ref {args.rwrouter_ref}", flush=True)
    elif args.rwrouter_src and rwrouters:
        rw_env = {**os.environ, "PYTHONPATH": str(args.rwrouter_src.resolve())}
        print(f"rwrouter from {args.rwrouter_src}", flush=True)
    workers = args.workers
    if workers is not None and rwrouters and not rwrouter_supports_workers(rw_env):
        print("rwrouter run --help has no --workers yet: running without it", file=sys.stderr)
        workers = None
    workload, workload_path = load_or_generate(args.seed, args.nodes, args.scrapes)
    print(workload.summary(), flush=True)
    inputs = {"rw1": (workload, workload_path)}
    if "rwrouter-rw2" in names:
        rw2 = as_rw2(workload, metadata=args.rw2_metadata)
        save(rw2, workdir / "workload-rw2.pickle")
        inputs["rw2"] = (rw2, workdir / "workload-rw2.pickle")
        print(
            f"RW 2.0 bodies ({'with' if args.rw2_metadata else 'no'} metadata) encoded in "
            f"{rw2.generate_seconds:.1f} s; {sizes_line(workload, rw2)}",
            flush=True,
        )
    digests = expected_digests(workload) if args.check_content else None
    return Setup(
        names=names,
        peer=None,
        rw_env=rw_env,
        workers=workers,
        workload=workload,
        inputs=inputs,
        digests=digests,
        floor=floor_in_child(workload_path),
        timeout=args.timeout or 120 + workload.samples / 5_000,
    )


def run_rounds(
    args: argparse.Namespace, setup: Setup, workdir: Path, sinks: tuple[Sink, Sink]
) -> list[dict[str, Measurement]]:
    """``--rounds`` rounds of every contender, alternating (ABBA: the order reversed every
    other round, so drift on a shared machine hits all of them)."""
    a, b = sinks
    rounds: list[dict[str, Measurement]] = []
    for number in range(args.rounds):
        rounds.append({})
        order = setup.names if number % 2 == 0 else setup.names[::-1]
        for name in order:
            sub = workdir / (name if args.rounds == 1 else f"{name}-{number + 1}")
            sub.mkdir()
            if name == "vmagent" and setup.peer is not None:
                c = vmagent_contender(
                    sub,
                    a.url,
                    b.url,
                    args.rules,
                    args.batch,
                    binary=Path(setup.peer["path"]),
                    flags=setup.peer["flags"],
                )
            else:
                c = rwrouter_contender(
                    sub,
                    a.url,
                    b.url,
                    args.rules,
                    setup.workers,
                    setup.rw_env,
                    args.batch,
                    name=name,
                )
            label = name if args.rounds == 1 else f"{name} (round {number + 1})"
            print(f"running {label} ...", flush=True)
            workload, path = setup.inputs[c.input]
            m = measure(c, workload, path, sinks, args.senders, sub, setup.timeout, setup.digests)
            rounds[-1][name] = m
            status = "ok" if m.ok else f"FAILED {m.error or ''}"
            print(f"  {label}: {status} in {m.wall_seconds:.1f} s", flush=True)
    return rounds


Load = tuple[tuple[float, ...], tuple[float, ...]]  # 1/5/15-min load averages, before and after


def print_report(
    args: argparse.Namespace, setup: Setup, rounds: list[dict[str, Measurement]], load: Load
) -> dict[str, Measurement]:
    """Print the table, the rounds, each contender's own figures and notes, the versions and
    the load average (before, after); return the median runs."""
    results = median_round(rounds)
    print()
    print(table(results, setup.floor["samples_per_cpu_second"]))
    if len(rounds) > 1:
        print(rounds_summary(rounds))
    print(
        "floor without page faults (mallopt M_MMAP_THRESHOLD=64MiB): "
        f"{setup.floor['no_page_faults_samples_per_cpu_second']:,.0f} samples per CPU-second"
    )
    if "rw2" in setup.inputs:
        print(
            sizes_line(setup.inputs["rw1"][0], setup.inputs["rw2"][0])
            + (" (RW 2.0 with metadata)" if args.rw2_metadata else "")
        )
    for m in results.values():
        summary = vm.metrics_summary if m.name == "vmagent" else metrics_summary
        for line in summary(m.router_metrics):
            print(f"{m.name}: {line}")
        for note in m.notes:
            print(f"note: {m.name}: {note}")
        if m.error:
            print(f"error: {m.name}: {m.error}")
    rw = next((results[n] for n in ("rwrouter", "rwrouter-rw2") if n in results), None)
    if rw is not None:
        version = rw.router_metrics.get("version", "?")
        if args.rwrouter_src:
            print(f"rwrouter {version}: from {args.rwrouter_src} (PYTHONPATH)")
        else:
            commit = (_commit(args.rwrouter_ref or "HEAD") or "?")[:8]
            where = f"git ref {args.rwrouter_ref}" if args.rwrouter_ref else "working tree"
            diff = None if args.rwrouter_ref else _src_diff_sha1()
            print(
                f"rwrouter {version}: {where}, commit {commit}"
                + (f", uncommitted src/ changes (diff sha1 {diff})" if diff else "")
            )
    if setup.peer is not None:
        print(
            f"vmagent: {setup.peer['path']}: {setup.peer['version'] or '(prints no version)'}; "
            "flags " + " ".join(setup.peer["flags"])
        )
    before, after = load
    print(
        "load average 1/5/15 min: before "
        + " ".join(f"{v:.2f}" for v in before)
        + ", after "
        + " ".join(f"{v:.2f}" for v in after)
        + f" ({os.cpu_count()} CPUs)"
    )
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; exit status 0 when every contender delivered exactly the expected
    samples to A and B (and everything else :func:`measure` checks held)."""
    args = parse_args(argv)
    peer: dict[str, Any] | None = None
    if "vmagent" in contender_names(args.only, args.input):
        peer = vmagent_peer(args.vmagent)
        if "error" in peer:
            print(peer["error"], file=sys.stderr)
            return 2
        print(f"vmagent: {peer['path']}: {peer['version'] or '(prints no version)'}", flush=True)
    t_start = time.monotonic()
    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(
            f"warning: 1-minute load average {load_before[0]:.2f} before the run: other "
            "processes compete for the CPUs; figures may be off",
            file=sys.stderr,
        )
    workdir = Path(tempfile.mkdtemp(prefix="rwrouter-bench-"))
    sinks: list[Sink] = []
    with _terminate_as_interrupt():
        try:
            setup = prepare(args, workdir)
            setup.peer = peer
            sinks = [start_sink(n, workdir, digest=args.check_content) for n in ("A", "B")]
            rounds = run_rounds(args, setup, workdir, (sinks[0], sinks[1]))
        except KeyboardInterrupt as exc:
            print(f"interrupted ({exc or 'Ctrl-C'}): children stopped", file=sys.stderr)
            return 130
        finally:
            for sink in sinks:
                procs.stop(sink.proc, timeout=10)
            if not args.keep_workdir:
                subprocess.run(["rm", "-rf", str(workdir)], check=False)
    load_after = os.getloadavg()
    results = print_report(args, setup, rounds, (load_before, load_after))
    total = time.monotonic() - t_start
    print(
        f"total time {total:.1f} s"
        + (f"; work directory kept: {workdir}" if args.keep_workdir else "")
    )
    if args.json:
        report = json_report(args, setup, rounds, results)
        report.update(total_seconds=total, loadavg_before=load_before, loadavg_after=load_after)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if results and all(m.ok for m in results.values()) else 1


def _workload_json(workload: Workload) -> dict[str, Any]:
    return {
        "seed": workload.seed,
        "nodes": workload.nodes,
        "scrapes": workload.scrapes,
        "series_per_scrape": workload.series_per_scrape,
        "requests": len(workload.bodies),
        "samples": workload.samples,
        "samples_a": workload.samples_a,
        "samples_b": workload.samples_b,
        "raw_bytes_per_series": workload.raw_bytes_per_series,
        "compressed_bytes_per_series": workload.compressed_bytes_per_series,
    }


def json_report(
    args: argparse.Namespace,
    setup: Setup,
    rounds: list[dict[str, Measurement]],
    results: dict[str, Measurement],
) -> dict[str, Any]:
    """What ``--json`` writes (without the total time and load averages, added by
    :func:`main`)."""
    rw = next((results[n] for n in ("rwrouter", "rwrouter-rw2") if n in results), None)
    elsewhere = args.rwrouter_ref or args.rwrouter_src
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "workers": setup.workers,
        "rwrouter_ref": args.rwrouter_ref,
        "rwrouter_src": str(args.rwrouter_src) if args.rwrouter_src else None,
        "rwrouter_commit": None if args.rwrouter_src else _commit(args.rwrouter_ref or "HEAD"),
        "rwrouter_worktree_dirty": None if elsewhere else _dirty_src(),
        "rwrouter_src_diff_sha1": None if elsewhere else _src_diff_sha1(),
        "workload": _workload_json(setup.workload),
        "workload_rw2": _workload_json(setup.inputs["rw2"][0]) if "rw2" in setup.inputs else None,
        "rw2_metadata": args.rw2_metadata,
        "expected_digests": setup.digests,
        "vmagent_flags": setup.peer["flags"] if setup.peer else [flag for flag, _ in VMAGENT_FLAGS],
        "peers": {"vmagent": setup.peer} if setup.peer else {},
        "rwrouter_version": rw.router_metrics.get("version") if rw else None,
        "floor": setup.floor,
        "contenders": {n: asdict(m) for n, m in results.items()},
        "rounds": [{n: asdict(m) for n, m in r.items()} for r in rounds],
        "ratios": ratios(results, setup.floor["samples_per_cpu_second"]),
        "cpus": os.cpu_count(),
    }


def vmagent_peer(binary: Path | None) -> dict[str, Any]:
    """The vmagent to run: ``binary``, else the one scripts/build-peers built. ``{"path",
    "version" (its -version line), "pinned" (scripts/peers.txt's version, when built),
    "flags"}``, or ``{"error": why}`` when it is missing or its ``-help`` does not list a flag
    the runner passes (renamed since the flags were written)."""
    path = binary or vm.built_path()
    if not os.access(path, os.X_OK):
        hint = "pass --vmagent PATH" if binary else f"run {vm.BUILD_HINT}"
        return {"error": f"vmagent not found at {path}: {hint}"}
    listed = vm.help_flags(path)
    flags = vmagent_flags(listed)
    argv = vmagent_argv(
        path,
        port=1,
        workdir=Path("."),
        urls=("http://a", "http://b"),
        batch=DEFAULT_BATCH,
        flags=flags,
    )
    unknown = vm.unknown_flags(argv, listed)
    if unknown:
        return {
            "error": f"{path} -help does not list "
            + ", ".join(f"-{f}" for f in unknown)
            + " (renamed?): update bench/runner.py's vmagent flags"
        }
    version = vm.version(path)
    pinned = None if binary else vm.pinned_version()
    if pinned and pinned not in version:
        return {"error": f"{path} reports {version!r}, not {pinned}: run {vm.BUILD_HINT}"}
    return {"path": str(path), "version": version, "pinned": pinned, "flags": flags}


def _commit(ref: str) -> str | None:
    """The commit id of ``ref``, or None."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", ref], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or None


def _src_diff_sha1() -> str | None:
    """SHA-1 of ``git diff HEAD -- src`` (uncommitted changes of the measured code), or None
    when there are none."""
    import hashlib

    out = subprocess.run(
        ["git", "-C", str(REPO), "diff", "HEAD", "--", "src"], capture_output=True, check=False
    )
    return hashlib.sha1(out.stdout).hexdigest()[:12] if out.stdout else None


def _dirty_src() -> bool | None:
    """Whether src/ has uncommitted changes (the measured code is then not HEAD)."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
        capture_output=True,
        text=True,
        check=False,
    )
    return bool(out.stdout.strip()) if out.returncode == 0 else None
