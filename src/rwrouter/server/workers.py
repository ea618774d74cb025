"""The worker side of ``rwrouter run --workers N`` (the supervisor is
:mod:`rwrouter.server.supervisor`).

Each worker is a whole router (:class:`~rwrouter.server.runner.RouterServer`) bound to the same
address with ``SO_REUSEPORT`` (the kernel spreads connections), with its own queues:
``storage.path`` for worker 0 (the layout of a single process), ``storage.path/worker-<i>`` for
worker ``i`` > 0. It also serves, on a private unix socket in the supervisor's runtime directory
(``<dir>/worker-<i>.sock``, mode 0700 directory), ``GET /metrics`` (its own exposition only),
``POST /-/reload`` (reload itself only), ``GET /-/audit/keys`` (its audit counts with the
series' hashes) and ``GET /-/audit/merged`` (worker 0: every worker's counts merged). A public
``GET /-/audit`` merges every worker's counts (a series counted once whichever workers saw it:
worker 0 merges them once per ``audit.refresh``, the others ask it); a public
``GET /metrics`` gathers every worker's exposition from those sockets and merges them with a
``worker`` label (:func:`rwrouter.metrics.merge_expositions`); a public ``POST /-/reload``
reloads this worker and asks the others through their sockets. The workers balance their
write connections through a shared board file in that directory
(:mod:`rwrouter.server.balance`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from rwrouter.audit import SORT_KEYS, Snapshot
from rwrouter.audit.live import Audit, snapshots_from_json, snapshots_to_json
from rwrouter.config import Config, DestinationConfig
from rwrouter.errors import RwrouterError
from rwrouter.logs import LogfmtFormatter, kv
from rwrouter.metrics import Metrics, merge_expositions
from rwrouter.send.pacing import worker_share
from rwrouter.server.reads import JSON_SLICE, KEYS_TTL, MAX_AUDIT_TOP, Reads, json_bytes

log = logging.getLogger("rwrouter.workers")

MERGER = 0  # the worker that merges every worker's audit counts for the others
PEER_TIMEOUT = 5.0  # seconds a worker waits for another worker's exposition or reload answer
MERGE_TIMEOUT = 30.0  # seconds a worker waits for the MERGER's report (it waits for the others)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSpec:
    """What the supervisor tells worker ``index`` (of ``count``): the ``port`` to bind (the
    configured one, or the one the supervisor picked for port 0), the ``runtime_dir`` of the
    private sockets and the connection board (:mod:`rwrouter.server.balance`), the pipe ends
    ``ready_fd`` (written once listening) and ``lifeline_fd`` (end of file when the supervisor
    is gone: the worker stops as on SIGTERM)."""

    index: int
    count: int
    port: int
    runtime_dir: str
    ready_fd: int
    lifeline_fd: int

    def to_arg(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_arg(cls, text: str) -> WorkerSpec:
        """Raises ValueError (or TypeError) for anything the supervisor would not write."""
        return cls(**json.loads(text))


def worker_storage(path: str, index: int) -> str:
    """Worker ``index``'s ``storage.path``: ``path`` itself for worker 0 (so going from one
    process to several, or back, keeps worker 0's queues), ``path/worker-<index>`` otherwise."""
    return path if index == 0 else os.path.join(path, f"worker-{index}")


def worker_config(config: Config, spec: WorkerSpec) -> Config:
    """``config`` as worker ``spec.index`` runs it: its own storage path; the port the
    supervisor picked if the configured one is 0; each destination's pacing at its share
    (:func:`~rwrouter.send.pacing.worker_share`: 1/``count`` of the rate and the burst). A
    ``series_limit`` stays whole: the workers share one budget
    (:mod:`rwrouter.pipeline.budgets`)."""
    server = config.server
    if server.listen_port == 0:
        host = server.listen_address.rpartition(":")[0]
        server = dataclasses.replace(server, listen_address=f"{host}:{spec.port}")
    storage = dataclasses.replace(
        config.storage, path=worker_storage(config.storage.path, spec.index)
    )
    destinations = tuple(_worker_share(d, spec.count) for d in config.remote_write)
    return dataclasses.replace(config, server=server, storage=storage, remote_write=destinations)


def _worker_share(dest: DestinationConfig, workers: int) -> DestinationConfig:
    """``dest`` with its pacing divided between ``workers`` processes (unchanged if it is not
    paced)."""
    q_ = dest.queue_config
    if q_.paced:
        rate, burst = worker_share(q_.max_samples_per_second, q_.burst_samples, workers)
        queue = dataclasses.replace(q_, max_samples_per_second=rate, burst_samples=burst)
        dest = dataclasses.replace(dest, queue_config=queue)
    return dest


def prepare_worker(spec: WorkerSpec) -> None:
    """In a worker process, before it starts: log lines carry ``worker=<index>``; a SIGHUP
    forwarded while the router is still starting is ignored (it reads the file anyway); the
    lifeline pipe is not passed on to processes this one starts."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    os.set_inheritable(spec.lifeline_fd, False)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(_WorkerFormatter(spec.index))


def report_ready(spec: WorkerSpec, *, on_orphaned: Callable[[], None]) -> None:
    """In a worker process, once it listens: tell the supervisor, and call ``on_orphaned``
    (on the running loop) when the supervisor is gone."""
    loop = asyncio.get_running_loop()

    def gone() -> None:
        loop.remove_reader(spec.lifeline_fd)
        log.error(kv(msg="the supervisor is gone: stopping"))
        on_orphaned()

    loop.add_reader(spec.lifeline_fd, gone)
    os.write(spec.ready_fd, b"R")
    os.close(spec.ready_fd)


class _WorkerFormatter(LogfmtFormatter):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.field = f" worker={index} logger="

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace(" logger=", self.field, 1)


def socket_path(runtime_dir: str, index: int) -> Path:
    """The private unix socket of worker ``index``."""
    return Path(runtime_dir) / f"worker-{index}.sock"


Reload = Callable[[], Awaitable[str]]


class Peers:
    """This worker's private socket and its view of the other workers."""

    def __init__(self, spec: WorkerSpec, *, metrics: Metrics, reload: Reload, audit: Audit) -> None:
        self.spec = spec
        self.metrics = metrics
        self.audit = audit
        self.reload_self = reload
        self._runner: web.AppRunner | None = None
        self._keys: Reads[str, bytes] = Reads(ttl=KEYS_TTL, max_entries=1)  # /-/audit/keys
        self._merged: Reads[Hashable, dict[str, Any]] = Reads(ttl=0, max_entries=4)
        self._supervisor = os.getppid()

    async def start(self) -> None:
        """Serve ``GET /metrics`` and ``POST /-/reload`` (this worker only) on the socket."""
        app = web.Application()
        app.router.add_get("/metrics", self._handle_metrics)
        app.router.add_get("/-/audit/keys", self._handle_audit_keys)
        app.router.add_get("/-/audit/merged", self._handle_audit_merged)
        app.router.add_post("/-/reload", self._handle_reload)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await self._runner.setup()
        path = socket_path(self.spec.runtime_dir, self.spec.index)
        await web.UnixSite(self._runner, str(path)).start()

    async def stop(self) -> None:
        """Close the socket and remove its file; when the supervisor is gone (killed: it
        cannot clean up), remove the runtime directory with the files the workers share
        (connection board, HA elections, series budgets). A worker still stopping keeps what
        it has open or mapped: removing a name does not take the file from it."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        with contextlib.suppress(OSError):
            socket_path(self.spec.runtime_dir, self.spec.index).unlink()
        if os.getppid() != self._supervisor:
            shutil.rmtree(self.spec.runtime_dir, ignore_errors=True)

    async def exposition(self) -> tuple[bytes, str]:
        """Every worker's metrics, merged with a ``worker`` label (``rwrouter_worker_up`` 0
        for a worker that did not answer within :data:`PEER_TIMEOUT`)."""
        own, content_type = self.metrics.exposition()
        others = [i for i in range(self.spec.count) if i != self.spec.index]
        texts = await asyncio.gather(*(self._peer(i, "GET", "/metrics") for i in others))
        parts: dict[str, str | None] = dict(zip(map(str, others), texts, strict=True))
        parts[str(self.spec.index)] = own.decode()
        ordered = {str(i): parts[str(i)] for i in range(self.spec.count)}
        body = await asyncio.to_thread(merge_expositions, ordered, workers=self.spec.count)
        return body, content_type

    async def audit_report(self, top: int, by: str) -> dict[str, Any]:
        """The audit report of every worker, ``top`` names (at most
        :data:`~rwrouter.server.reads.MAX_AUDIT_TOP`) per destination ranked ``by``: each
        audited destination's series counted once however many workers saw it
        (:func:`rwrouter.audit.merge`); a worker that did not answer within
        :data:`PEER_TIMEOUT` is left out (``workers`` says how many counted,
        ``workers_expected`` how many run). Gathering every worker's series costs: worker
        :data:`MERGER` builds it once per ``audit.refresh`` and the others ask it (and merge
        themselves only when it does not answer); the parts are parsed and merged in worker
        threads."""
        if self.spec.index != MERGER:
            path = f"/-/audit/merged?sort={by}"
            text = await self._peer(MERGER, "GET", path, timeout_s=MERGE_TIMEOUT)
            if text is not None:
                try:
                    return _cut(await asyncio.to_thread(json.loads, text), top)
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning(kv(msg="bad merged audit answer", worker=MERGER, error=exc))
        return _cut(await self._merged_report(by), top)

    async def _merged_report(self, by: str) -> dict[str, Any]:
        """Every worker's counts merged, :data:`MAX_AUDIT_TOP` names per destination ranked
        ``by``; once per ``audit.refresh`` and audit state, shared by concurrent readers."""
        self._merged.set_ttl(self.audit.settings.refresh)
        state = (by, self.audit.settings, tuple(self.audit.audited.items()))

        async def build() -> tuple[dict[str, Any], float]:
            taken = time.monotonic()
            return await self._merge(by), taken

        report, _ = await self._merged.get(state, build)
        return report

    async def _merge(self, by: str) -> dict[str, Any]:
        own = await asyncio.to_thread(self._audit_keys)
        others = [i for i in range(self.spec.count) if i != self.spec.index]
        texts = await asyncio.gather(*(self._peer(i, "GET", "/-/audit/keys") for i in others))
        parts = [own]
        for i, text in zip(others, texts, strict=True):
            if text is None:
                continue
            try:
                parts.append(await asyncio.to_thread(parse_keys, text))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning(kv(msg="bad audit answer", worker=i, error=exc))
        del texts
        return await asyncio.to_thread(
            self.audit.merged_report,
            parts,
            top=MAX_AUDIT_TOP,
            by=by,
            workers=len(parts),
            expected=self.spec.count,
        )

    async def _handle_audit_merged(self, request: web.Request) -> web.Response:
        """Worker :data:`MERGER`'s merged report for the other workers (``?sort=``)."""
        by = request.query.get("sort", "series")
        if by not in SORT_KEYS:
            return web.Response(status=400, text="sort must be series or samples\n")
        report = await self._merged_report(by)
        body = await asyncio.to_thread(json_bytes, report)
        return web.Response(body=body, content_type="application/json")

    def _audit_keys(self) -> dict[str, Snapshot]:
        return self.audit.snapshots(time.monotonic(), keys=True)

    async def _handle_audit_keys(self, request: web.Request) -> web.Response:
        """This worker's counts with the series' hashes, built and serialized in a worker
        thread, once for the workers that ask within :data:`KEYS_TTL` seconds."""

        async def build() -> tuple[bytes, float]:
            taken = time.monotonic()
            return await asyncio.to_thread(self._keys_body), taken

        body, _ = await self._keys.get("keys", build)
        return web.Response(body=body, content_type="application/x-ndjson")  # keys_lines

    def _keys_body(self) -> bytes:
        return keys_lines(self._audit_keys())

    async def reload_all(self) -> str:
        """Reload this worker (its summary is the answer; errors raised as
        :meth:`RouterServer.reload`) and ask every other worker to reload itself (best
        effort: each logs its own outcome; a worker that does not answer is logged here)."""
        others = [i for i in range(self.spec.count) if i != self.spec.index]
        asked = asyncio.gather(*(self._peer(i, "POST", "/-/reload") for i in others))
        try:
            return await self.reload_self()
        finally:
            for i, answer in zip(others, await asked, strict=True):
                if answer is None:
                    log.warning(kv(msg="could not ask a worker to reload", worker=i))

    async def _peer(
        self, index: int, method: str, path: str, *, timeout_s: float = PEER_TIMEOUT
    ) -> str | None:
        """The answer text of worker ``index`` (any status), or None if it did not answer
        within ``timeout_s`` seconds."""
        connector = aiohttp.UnixConnector(path=str(socket_path(self.spec.runtime_dir, index)))
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with (
                aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
                session.request(method, f"http://worker-{index}{path}") as response,
            ):
                return await response.text()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.debug(kv(msg="worker did not answer", worker=index, error=exc))
            return None

    async def _handle_metrics(self, request: web.Request) -> web.Response:
        body, content_type = self.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _handle_reload(self, request: web.Request) -> web.Response:
        try:
            return web.Response(text=await self.reload_self() + "\n")
        except (RwrouterError, OSError) as exc:
            return web.Response(status=500, text=" ".join(str(exc).split()) + "\n")


def keys_lines(snapshots: dict[str, Snapshot]) -> bytes:
    """A worker's ``/-/audit/keys`` answer: :func:`~rwrouter.audit.live.snapshots_to_json`
    of ``snapshots`` (taken with keys) cut in JSON lines of at most :data:`JSON_SLICE` names
    each (``destination``, ``observed``, ``capped``, ``names``), so that the reader parses it
    a line at a time, giving its event loop the GIL between lines."""
    lines = []
    for name, snap in snapshots_to_json(snapshots).items():
        names = list(snap["names"].items())
        for start in range(0, max(1, len(names)), JSON_SLICE):
            part = dict(names[start : start + JSON_SLICE])
            line = {"destination": name, "observed": snap["observed"], "capped": snap["capped"]}
            lines.append(json_bytes({**line, "names": part}))
    return b"\n".join(lines)


def parse_keys(text: str) -> dict[str, Snapshot]:
    """The snapshots of a :func:`keys_lines` answer. Raises ValueError, KeyError or
    TypeError for another shape."""
    data: dict[str, dict[str, Any]] = {}
    for line in text.split("\n"):
        if line:
            part = json.loads(line)
            entry = data.setdefault(
                part["destination"],
                {"observed": part["observed"], "capped": part["capped"], "names": {}},
            )
            entry["names"].update(part["names"])
    return snapshots_from_json(data)


def _cut(report: dict[str, Any], top: int) -> dict[str, Any]:
    """``report`` with ``top`` names per destination (a copy)."""
    destinations = [{**d, "metrics": d["metrics"][:top]} for d in report["destinations"]]
    return {**report, "destinations": destinations}
