"""The local demo pipeline: a synthetic GPU fleet, a real Prometheus, rwrouter and two stores.

    exporter nodes --scrape--> sender Prometheus --remote_write--> rwrouter (subprocess)
        --SigV4--> workspace double (allowlisted DCGM series) --> its backend Prometheus
        --fallback--> self-hosted Prometheus (everything else)

Everything listens on 127.0.0.1 with free ports. The workspace double stores what it accepts
in a Prometheus of its own (its backend) and answers the workspace's query API from it, so
both stores can be queried (``rwrouter compare``). :class:`DemoPipeline` starts (and stops)
the parts, usable from tests with a short scrape interval; :func:`run_demo` is ``rwrouter
demo``: it prints where to look once, the figures every ~10 s until Ctrl-C, SIGTERM or
``duration`` seconds, then drains (the sender stops, rwrouter sends what it holds), prints the
final figures, stops everything (terminate, wait, kill after a timeout), prints a "stopped"
line and returns 0.
"""

from __future__ import annotations

import functools
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from rwrouter.demo.binaries import ensure_prometheus, prometheus_version, this_rwrouter
from rwrouter.demo.configs import (
    SENDER_EXTERNAL_LABELS,
    WORKSPACE_LIMITS,
    router_config,
    self_hosted_config,
    sender_config,
)
from rwrouter.demo.exporter import ExporterFleet
from rwrouter.demo.summary import (
    SERIES_BY_NAME,
    Summary,
    format_summary,
    names_of,
    router_counters,
    series_by_name,
)
from rwrouter.doubles.prometheus import PrometheusProcess, free_port
from rwrouter.doubles.router import RouterProcess
from rwrouter.doubles.workspace import INSPECT_PATH, Key, WorkspaceDouble
from rwrouter.doubles.workspace_backend import backend_config
from rwrouter.doubles.workspace_runner import ThreadedWorkspace, run_in_thread
from rwrouter.errors import InvariantError

REGION = "us-east-1"
WORKSPACE_ID = "ws-demo"
#: Static demo credentials, known to the double only (not AWS keys).
ACCESS_KEY = "AKIAIOSFODNN7DEMOKEY"
SECRET_KEY = "demo-secret-key-not-for-aws"
SUMMARY_EVERY_S = 10.0
DRAIN_TIMEOUT_S = 30.0  # how long the stop waits for rwrouter to send what it holds
#: The query the demo suggests for ``rwrouter compare`` (a family the workspace gets).
COMPARE_QUERY = "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)"
RW2_SINCE = (3, 8)  # the first Prometheus whose sender speaks remote write 2.0 rc.4

#: A series' label set as the double keys it, and its samples {timestamp ms: value bits}.
LabelSet = tuple[tuple[str, str], ...]


class DemoPipeline:
    """All the demo's parts; ``start()`` (all or nothing), ``summary()``, ``stop()``.

    ``workdir`` receives ``rwrouter.yaml``, ``rwrouter.log`` and one directory per Prometheus
    (``sender/``, ``self-hosted/``, ``workspace-backend/``: config, TSDB, log).
    ``scrape_interval_s`` is the sender's scrape interval (5 in the demo, 1 in tests);
    batching deadlines follow it (at most 2 s).
    ``prometheus``: the Prometheus binary both Prometheus processes run (default Debian's);
    ``remote_write_2``: it is a Prometheus >= 3.8, so the sender writes remote write 2.0 (with
    each series' metadata: ``--enable-feature=metadata-wal-records``) and rwrouter sends 2.0
    to the self-hosted store. ``rwrouter``: how the commands it prints call rwrouter (default:
    as this process was started, :func:`~rwrouter.demo.binaries.this_rwrouter`).
    """

    def __init__(
        self,
        *,
        workdir: Path,
        nodes: int = 2,
        scrape_interval_s: float = 5.0,
        seed: int = 1,
        ready_timeout_s: float = 30.0,
        prometheus: str | None = None,
        remote_write_2: bool = False,
        rwrouter: str | None = None,
    ) -> None:
        self.rwrouter = this_rwrouter() if rwrouter is None else rwrouter
        self.prometheus = prometheus
        self.remote_write_2 = remote_write_2
        self.workdir = Path(workdir)
        self.scrape_interval_s = scrape_interval_s
        self.ready_timeout_s = ready_timeout_s
        self.fleet = ExporterFleet(nodes=nodes, seed=seed)
        keys, ws = {ACCESS_KEY: Key(SECRET_KEY)}, (WORKSPACE_ID,)
        self.double = WorkspaceDouble(
            region=REGION, workspaces=ws, credentials=keys, limits=WORKSPACE_LIMITS
        )
        self.workspace: ThreadedWorkspace | None = None
        self.workspace_backend: PrometheusProcess | None = None
        self.self_hosted: PrometheusProcess | None = None
        self.router: RouterProcess | None = None
        self.sender: PrometheusProcess | None = None
        self.started_at = 0.0

    def start(self) -> None:
        """Start every part, in data-flow order from the stores back to the exporters' scraper.
        Raises ``PrometheusNotFoundError`` or ``RuntimeError``; started parts are stopped."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.started_at = time.monotonic()
        try:
            self._start_parts()
        except BaseException:
            self.stop()
            raise

    def _start_parts(self) -> None:
        self.fleet.start()
        self.workspace_backend = PrometheusProcess.start(
            backend_config(out_of_order_window_s=self.double.limits.out_of_order_window_s),
            workdir=self.workdir / "workspace-backend",
            ready_timeout=self.ready_timeout_s,
            new_session=True,
            binary=self.prometheus,
        )
        self.double.add_backend(WORKSPACE_ID, self.workspace_backend.url)
        self.workspace = run_in_thread(self.double)
        self.self_hosted = PrometheusProcess.start(
            self_hosted_config(),
            workdir=self.workdir / "self-hosted",
            ready_timeout=self.ready_timeout_s,
            new_session=True,
            binary=self.prometheus,
        )
        port = free_port()
        config_path = self.workdir / "rwrouter.yaml"
        config_path.write_text(
            router_config(
                listen_port=port,
                workspace_url=self.double.url(WORKSPACE_ID),
                region=REGION,
                access_key=ACCESS_KEY,
                secret_key=SECRET_KEY,
                self_hosted_url=self.self_hosted.url,
                batch_send_deadline_s=min(2.0, self.scrape_interval_s),
                remote_write_2=self.remote_write_2,
                rwrouter=self.rwrouter,
                storage_path=str(self.workdir / "data"),
            )
        )
        log = self.workdir / "rwrouter.log"
        self.router = RouterProcess(config_path=config_path, port=port, log_path=log)
        self.router.wait_ready(timeout_s=self.ready_timeout_s)
        features = ("--enable-feature=metadata-wal-records",) if self.remote_write_2 else ()
        self.sender = PrometheusProcess.start(
            sender_config(
                targets=self.fleet.targets,
                scrape_interval_s=self.scrape_interval_s,
                router_url=self.router.url,
                remote_write_2=self.remote_write_2,
            ),
            workdir=self.workdir / "sender",
            ready_timeout=self.ready_timeout_s,
            new_session=True,
            binary=self.prometheus,
            extra_args=features,
        )

    def drain(self, *, timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
        """Stop the sender (no new data; it flushes what it holds), then wait until rwrouter
        holds nothing unsent (``rwrouter_queue_blocks`` 0 for every destination), polling its
        ``/metrics`` for at most ``timeout_s`` seconds. True when drained."""
        if self.sender is not None:
            self.sender.stop(timeout=timeout_s)
        if self.router is None:
            return True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.router.metric_value("rwrouter_queue_blocks") == 0:
                    return True
            except OSError:
                return False  # rwrouter is gone: nothing more will be sent
            time.sleep(0.2)
        return False

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """Stop the sender first (no new data), then rwrouter (drains), the stores and the
        exporters. Idempotent; every part is stopped even if another fails to."""
        parts: list[Callable[[], None]] = []
        if self.sender is not None:
            parts.append(functools.partial(self.sender.stop, timeout=timeout_s))
        if self.router is not None:
            parts.append(functools.partial(self.router.stop, timeout_s=timeout_s))
        if self.self_hosted is not None:
            parts.append(functools.partial(self.self_hosted.stop, timeout=timeout_s))
        if self.workspace is not None:
            parts.append(functools.partial(self.workspace.stop, timeout_s=timeout_s))
        if self.workspace_backend is not None:
            parts.append(functools.partial(self.workspace_backend.stop, timeout=timeout_s))
        parts.append(self.fleet.stop)
        errors: list[Exception] = []
        for stop_part in parts:
            try:
                stop_part()
            except Exception as exc:  # keep stopping the others
                errors.append(exc)
        if errors:
            raise errors[0]

    # -- inspection (safe from any thread: copies taken under the GIL) -----------------------
    def workspace_series(self) -> dict[LabelSet, dict[int, int]]:
        """What the double holds: {label set: {timestamp ms: raw value bits}} (recent points:
        ``WORKSPACE_LIMITS``; its backend keeps them all)."""
        stored = dict(self.double.series(WORKSPACE_ID))
        return {key: dict(series.samples) for key, series in stored.items()}

    @property
    def urls(self) -> dict[str, str]:
        """Where the stores and rwrouter stay queryable while the pipeline runs."""
        urls = {
            "workspace double state": f"{self.double.base_url}{INSPECT_PATH}",
            "workspace remote write": self.double.url(WORKSPACE_ID),
            "workspace query (SigV4, service aps)": self.double.query_url(WORKSPACE_ID),
        }
        if self.self_hosted is not None:
            urls["self-hosted Prometheus UI"] = f"{self.self_hosted.url}/graph"
            urls["self-hosted query"] = f"{self.self_hosted.url}/api/v1/query"
        if self.sender is not None:
            urls["sender Prometheus UI"] = f"{self.sender.url}/targets"
        if self.router is not None:
            urls["rwrouter status page"] = f"{self.router.url}/"
            urls["rwrouter metrics"] = f"{self.router.url}/metrics"
            audit = f"{self.router.url}/-/audit  or: {self.rwrouter} audit --url {self.router.url}"
            urls["audit (what each destination would cost)"] = audit  # URL, then the command
        urls["rwrouter config"] = str(self.workdir / "rwrouter.yaml")
        return urls

    @property
    def compare_command(self) -> str:
        """A ready command that runs one DCGM query against the workspace (signed with the
        demo's keys from its config) and the Prometheus the team queries today: the sender,
        whose own storage holds every series it scrapes (the demo's self-hosted store is the
        fallback, so it never gets the families the workspace keeps: docs/migration.md, step
        3). Raises RuntimeError before :meth:`start`."""
        if self.sender is None:
            raise RuntimeError("the demo is not running")
        config = self.workdir / "rwrouter.yaml"
        external = "".join(f" --external-label {n}={v}" for n, v in SENDER_EXTERNAL_LABELS)
        return (
            f"{self.rwrouter} compare --config {config} --self-hosted {self.sender.url}{external} "
            f"--query '{COMPARE_QUERY}'"
        )

    def summary(self) -> Summary:
        """Gather the numbers the demo prints (bounded HTTP calls)."""
        series = list(self.double.series(WORKSPACE_ID))  # label sets only: no copy of points
        by_name, error = {}, ""
        try:
            if self.self_hosted is None:
                raise InvariantError("the summary is gathered only once the demo started")
            by_name = series_by_name(self.self_hosted.query(SERIES_BY_NAME))
        except (OSError, ValueError, RuntimeError) as exc:  # InvariantError is a RuntimeError
            error = str(exc)
        return Summary(
            elapsed_s=time.monotonic() - self.started_at,
            workspace_by_name=names_of(series),
            workspace_samples=self.double.sample_count(WORKSPACE_ID),
            verified_signatures=self.double.verified_signatures,
            requests=self.double.request_count,
            rejections=dict(self.double.rejections),
            queries=self.double.query_count,
            query_rejections=dict(self.double.query_rejections),
            other_requests=self.double.other_count,
            self_hosted_by_name=by_name,
            self_hosted_error=error,
            router=router_counters(f"{self.router.url}/metrics")
            if self.router
            else router_counters("http://127.0.0.1:1/metrics"),
        )


def run_demo(
    nodes: int = 2,
    duration: float | None = None,
    workdir: str | Path | None = None,
    prometheus: str | None = None,
) -> int:
    """``rwrouter demo``: run the pipeline until Ctrl-C, SIGTERM or ``duration`` seconds.
    ``prometheus``: the binary to run instead of Debian's; a Prometheus >= 3.8 makes the
    sender and the self-hosted store speak remote write 2.0.

    Returns 0 after a clean stop, 1 when a part fails to start, 2 when ``prometheus`` is
    missing and cannot be installed (not root), or the given binary is no Prometheus. A temp
    work dir is removed on exit.
    """
    version = None
    if prometheus is not None:
        version = prometheus_version(prometheus)
        if version is None:
            print(
                f"rwrouter demo: {prometheus} --version prints no Prometheus version",
                file=sys.stderr,
            )
            return 2
    elif not ensure_prometheus():
        return 2
    rw2 = version is not None and version >= RW2_SINCE
    temp = workdir is None
    path = Path(tempfile.mkdtemp(prefix="rwrouter-demo-")) if temp else Path(str(workdir))
    note = " (temporary: removed on exit; `rwrouter demo --workdir DIR` keeps it)" if temp else ""
    print(f"rwrouter demo: {nodes} GPU node(s), work dir {path}{note}", flush=True)
    if version is not None:
        protocol = "remote write 2.0" if rw2 else "remote write 1.0"
        print(
            f"rwrouter demo: Prometheus {version[0]}.{version[1]} ({prometheus}): the sender "
            f"and the self-hosted store speak {protocol}",
            flush=True,
        )
    pipeline = DemoPipeline(
        workdir=path, nodes=nodes, scrape_interval_s=5.0, prometheus=prometheus, remote_write_2=rw2
    )
    stop = threading.Event()
    restore = _on_signals(stop)
    code = 1
    try:
        code = _run(pipeline, stop, duration)
        if code == 0:
            _final(pipeline)
    finally:
        try:
            pipeline.stop()
        except Exception as exc:  # every part was still asked to stop
            print(f"rwrouter demo: error while stopping: {exc}", file=sys.stderr)
            code = 1
        restore()
        if temp:
            shutil.rmtree(path, ignore_errors=True)
        print("rwrouter demo: stopped", flush=True)
    return code


def _run(pipeline: DemoPipeline, stop: threading.Event, duration: float | None) -> int:
    try:
        pipeline.start()
    except (RuntimeError, OSError) as exc:
        print(f"rwrouter demo: could not start: {exc}", file=sys.stderr)
        return 1
    print("rwrouter demo: running; Ctrl-C to stop", flush=True)
    for name, url in pipeline.urls.items():
        print(f"  {name}: {url}", flush=True)
    compare = pipeline.compare_command
    after = "after a minute: its --end is 30 s ago by default"
    print(f"  compare the workspace with the sender's own copy ({after}): " + compare, flush=True)
    deadline = None if duration is None else time.monotonic() + duration
    while not stop.is_set():
        left = SUMMARY_EVERY_S if deadline is None else deadline - time.monotonic()
        if stop.wait(max(0.0, min(SUMMARY_EVERY_S, left))) or (
            deadline is not None and time.monotonic() >= deadline
        ):
            break
        print(format_summary(pipeline.summary()), flush=True)
    return 0


def _final(pipeline: DemoPipeline) -> None:
    """Drain, then print the final figures (everything sent is counted)."""
    print(
        "rwrouter demo: stopping: draining (the sender stops, rwrouter sends what it holds)",
        flush=True,
    )
    drained = pipeline.drain()
    print(f"rwrouter demo: {'drained' if drained else 'not drained'}; final figures:", flush=True)
    print(format_summary(pipeline.summary()), flush=True)


def _on_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGINT/SIGTERM set ``stop`` (main thread only); returns a function restoring the old
    handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, previous in old.items():
            signal.signal(sig, previous)

    return restore
