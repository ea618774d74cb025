"""How each router is started: its command line, configuration files and own metrics.

vmagent (``scripts/build-peers``' build, or ``--vmagent PATH``) and rwrouter (``python -m
rwrouter run``, the working tree or ``--rwrouter-ref`` / ``--rwrouter-src``), each given
destination A (the critical DCGM series) and B (everything else) and the same batch size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import vmagent as vm
from bench.net import REPO, free_port, http
from bench.report import INPUT_OF
from bench.workload import A_REGEX


def labeldrop_rules(count: int) -> list[dict[str, Any]]:
    """``count`` no-op rules: labeldrop of label names that never occur (each still walks every
    label of every series it sees)."""
    return [{"action": "labeldrop", "regex": f"bench_absent_label_{i}"} for i in range(count)]


@dataclass(frozen=True)
class Destinations:
    """The relabel rules (Prometheus ``relabel_config`` mappings) of destination A and B,
    written the same for both routers (vmagent: one ``-remoteWrite.urlRelabelConfig`` file
    per URL; rwrouter: ``write_relabel_configs``). ``fallback_b``: rwrouter's B is instead
    ``fallback: true`` with these rules (the series A did not keep), or None: B as written."""

    a: list[dict[str, Any]]
    b: list[dict[str, Any]]
    fallback_b: list[dict[str, Any]] | None = None


def basic_destinations(rules: int) -> Destinations:
    """``--rules K``: A keeps :data:`A_REGEX` on ``__name__``, B drops it, each after K - 1
    no-op labeldrop rules; rwrouter's B is a fallback with the no-op rules only."""
    noop = labeldrop_rules(rules - 1)
    on_name = {"source_labels": ["__name__"], "regex": A_REGEX}
    return Destinations(
        a=[*noop, {"action": "keep", **on_name}],
        b=[*noop, {"action": "drop", **on_name}],
        fallback_b=noop,
    )


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
    router: str = "rwrouter"  # vmagent or rwrouter

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
    rules: int | Destinations,
    batch: int = DEFAULT_BATCH,
    *,
    binary: Path,
    flags: Sequence[str],
    name: str = "vmagent",
) -> Contender:
    """vmagent (``binary``): A and B with the rules of ``rules`` (a :class:`Destinations`, or
    K for :func:`basic_destinations`), one -remoteWrite.urlRelabelConfig per
    -remoteWrite.url (files keepA.yml, dropA.yml); at most ``batch`` samples per request it
    sends (``-remoteWrite.maxRowsPerBlock``); ``flags`` (:func:`vmagent_flags`). Its
    ``/metrics`` is read at the end (:func:`bench.vmagent.parse_metrics`)."""
    dests = basic_destinations(rules) if isinstance(rules, int) else rules
    (workdir / "keepA.yml").write_text(yaml_dump(dests.a))
    (workdir / "dropA.yml").write_text(yaml_dump(dests.b))
    port = free_port()
    argv = vmagent_argv(
        binary, port=port, workdir=workdir, urls=(a_url, b_url), batch=batch, flags=flags
    )
    return Contender(
        name,
        argv,
        port,
        "/health",
        metrics_path="/metrics",
        parse_metrics=vm.parse_metrics,
        router="vmagent",
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


@dataclass(frozen=True)
class RwrouterOptions:
    """What a scenario changes in rwrouter's configuration: ``audit: true`` on destination A,
    ``relabel_cache.max_entries`` (None: the default), ``queue_config.batch_send_deadline``
    of both destinations (None: the default, 5s), ``series_limit`` on destination A (None:
    none; with ``on_series_limit: fallback``, so B must be the fallback)."""

    audit_a: bool = False
    series_limit_a: int | None = None
    cache_entries: int | None = None
    batch_send_deadline: str | None = None


def rwrouter_config(
    port: int,
    workdir: Path,
    urls: tuple[str, str],
    dests: Destinations,
    batch: int,
    options: RwrouterOptions,
) -> dict[str, Any]:
    """rwrouter's configuration (see :func:`rwrouter_contender`)."""
    queue: dict[str, Any] = {"max_samples_per_send": batch}
    if options.batch_send_deadline:
        queue["batch_send_deadline"] = options.batch_send_deadline
    a: dict[str, Any] = {"name": "A", "url": urls[0], "write_relabel_configs": dests.a}
    b: dict[str, Any] = {"name": "B", "url": urls[1], "write_relabel_configs": dests.b}
    if dests.fallback_b is not None:
        b.update(fallback=True, write_relabel_configs=dests.fallback_b)
    if options.audit_a:
        a["audit"] = True
    if options.series_limit_a is not None:
        a.update(series_limit=options.series_limit_a, on_series_limit="fallback")
    config: dict[str, Any] = {
        "server": {"listen_address": f"127.0.0.1:{port}"},
        "storage": {"path": str(workdir / "rwrouter-data")},
        "remote_write": [{**a, "queue_config": queue}, {**b, "queue_config": queue}],
    }
    if options.cache_entries is not None:
        config["relabel_cache"] = {"max_entries": options.cache_entries}
    return config


def rwrouter_contender(
    workdir: Path,
    a_url: str,
    b_url: str,
    rules: int | Destinations,
    workers: int | None,
    env: dict[str, str] | None = None,
    batch: int = DEFAULT_BATCH,
    name: str = "rwrouter",
    *,
    input: str | None = None,
    options: RwrouterOptions = RwrouterOptions(),
) -> Contender:
    """rwrouter with the rules of ``rules`` (a :class:`Destinations`, or K for
    :func:`basic_destinations`: A keeps :data:`A_REGEX`, B is ``fallback: true``, each
    with K - 1 no-op labeldrop rules) and at most ``batch`` samples per request it sends
    (``queue_config.max_samples_per_send``); ``options``; defaults otherwise (so both
    destinations get remote write 1.0, whatever the input). ``input``: what the driver
    sends it (default :data:`~bench.report.INPUT_OF` of ``name``: ``rwrouter`` RW 1.0,
    ``rwrouter-rw2`` RW 2.0), the same configuration."""
    port = free_port()
    dests = basic_destinations(rules) if isinstance(rules, int) else rules
    config = rwrouter_config(port, workdir, (a_url, b_url), dests, batch, options)
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
        input=input or INPUT_OF[name],
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
    and its lookups by result, and per destination with a ``series_limit``: its series
    over the budget (``series_limited``: ``rwrouter_series_limited_total``), the samples
    they carried (``series_limit_samples``: ``rwrouter_samples_dropped_total{reason=
    "series_limit"}``) and its active series (``series_limit_active``: with ``--workers``
    every worker exposes the one shared count, so the largest, not the sum; the others are
    summed over the workers). Metrics this rwrouter does not expose are left out."""
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
            elif s.name == "rwrouter_series_limited_total":
                add("series_limited", s.labels.get("destination", "?"), s.value)
            elif (
                s.name == "rwrouter_samples_dropped_total"
                and s.labels.get("reason") == "series_limit"
            ):
                add("series_limit_samples", s.labels.get("destination", "?"), s.value)
            elif s.name == "rwrouter_series_limit_active_series":  # shared: the largest
                active = out.setdefault("series_limit_active", {})
                dest = s.labels.get("destination", "?")
                active[dest] = max(active.get(dest, 0), s.value)
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
    if "series_limited" in rm or "series_limit_active" in rm:
        active, over = rm.get("series_limit_active", {}), rm.get("series_limited", {})
        samples = rm.get("series_limit_samples", {})
        lines.append(
            "series budget: "
            + "; ".join(
                f"{d}: {active.get(d, 0):,.0f} active, {over.get(d, 0):,.0f} series over it "
                f"({samples.get(d, 0):,.0f} samples)"
                for d in sorted(set(active) | set(over))
            )
        )
    return lines


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
