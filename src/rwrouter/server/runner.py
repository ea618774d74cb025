"""Lifecycle of a running router: build, start (destinations first, then the listener), reload
(SIGHUP, ``POST /-/reload``), stop (listener first, then drain the queues for
``server.shutdown_timeout``; what is left stays on disk). Used by ``rwrouter run``, the demo and
the tests."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from typing import Any

from aiohttp import web

from rwrouter.config import Config, load_config
from rwrouter.config.advice import config_warnings
from rwrouter.errors import ListenError, RwrouterError
from rwrouter.logs import kv
from rwrouter.metrics import Metrics
from rwrouter.pipeline.budgets import BudgetTables
from rwrouter.pipeline.fanout import FanOut, build_fanout
from rwrouter.pipeline.ha import ElectionTable, elections_path
from rwrouter.pipeline.reload import reconfigure
from rwrouter.server.app import AUDIT, BALANCE, BODIES, EXPOSE, READY, RELOAD, make_app
from rwrouter.server.balance import Balancer, Board, board_path
from rwrouter.server.connections import AcceptErrors, Connections, listen
from rwrouter.server.frontdoor import DoorOptions, FrontDoor
from rwrouter.server.webtls import ReloadingContext, WebConfigFile
from rwrouter.server.workers import Peers, WorkerSpec, worker_config
from rwrouter.wire.accelerator import ACCELERATED

log = logging.getLogger("rwrouter.server")

REQUEST_GRACE = 5.0  # seconds requests in progress get to finish when the server stops
# auto_decompress=False: aiohttp would otherwise decode gzip/deflate/br/zstd request bodies
# itself (and fail on bad ones before our handler could answer 415).
HANDLER_ARGS: dict[str, Any] = {"access_log": None, "auto_decompress": False}


class RouterServer:
    """A router listening on ``config.server.listen_address`` (port 0 picks a free port).

    ``await start()``, then ``url``/``port``; ``await reload()`` re-reads ``config_path``;
    ``await stop(drain_timeout=...)`` (seconds; default ``server.shutdown_timeout``).

    ``worker``: run as one worker of ``rwrouter run --workers`` (:mod:`rwrouter.server.workers`):
    the port is bound with ``SO_REUSEPORT``, write connections are balanced with the other
    workers' (:mod:`rwrouter.server.balance`), ``/metrics`` shows every worker's metrics and
    ``/-/reload`` reloads every worker. ``config`` is already the worker's own
    (:func:`~rwrouter.server.workers.worker_config`).

    ``door``: ``--web.config.file`` (TLS, credentials, roles: :mod:`rwrouter.server.frontdoor`;
    read at :meth:`start`, ConfigError if it is invalid) and ``--web.enable-lifecycle``
    (``POST /-/reload``; off by default, as in Prometheus).
    """

    def __init__(
        self,
        config: Config,
        *,
        metrics: Metrics | None = None,
        config_path: str | None = None,
        worker: WorkerSpec | None = None,
        door: DoorOptions | None = None,
    ) -> None:
        self.config = config
        self.door = door if door is not None else DoorOptions()
        self._web_file: WebConfigFile | None = None
        self.front_door: FrontDoor | None = None  # set by start()
        self.worker = worker
        self._peers: Peers | None = None
        self._balancer: Balancer | None = None
        self.config_path = config_path
        self._reload_lock = asyncio.Lock()
        self.metrics = metrics if metrics is not None else Metrics()
        self.fanout: FanOut | None = None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._accept_errors: AcceptErrors | None = None
        self._app: web.Application | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """Base URL of the listener, e.g. ``http://127.0.0.1:9250`` (``https`` with TLS)."""
        host = self.config.server.listen_host or "127.0.0.1"
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        tls = self._web_file is not None and self._web_file.context is not None
        return f"{'https' if tls else 'http'}://{host}:{self.port}"

    async def start(self) -> None:
        """Read the web configuration file, start the destinations' senders, then listen.
        Raises ConfigError for a bad web configuration, ListenError (an OSError) if the
        address cannot be bound; on any failure what was started is stopped first (senders,
        their HTTP sessions, the queues' locks), nothing drained."""
        try:
            await self._start()
        except BaseException:
            await self.stop(drain_timeout=0)
            raise

    async def _start(self) -> None:
        receive = self.metrics.receive
        self._warn(self.config)
        if self.door.web_config_file is not None:
            self._web_file = WebConfigFile(
                self.door.web_config_file, on_loaded=lambda ok: receive.web_config_ok.set(ok)
            )
        self.front_door = door = FrontDoor(
            source=self._web_file, lifecycle=self.door.enable_lifecycle, metrics=receive
        )
        # HA elections and series budgets: one for all the workers (files in their runtime
        # directory).
        elections, stores = None, None
        if self.worker is not None:
            elections = ElectionTable(elections_path(self.worker.runtime_dir))
            stores = BudgetTables(self.worker.runtime_dir)
        self.fanout = await build_fanout(
            self.config, self.metrics, elections=elections, stores=stores
        )
        await self.fanout.start()
        self._app = make_app(
            fanout=self.fanout, metrics=self.metrics, settings=self.config.server, front_door=door
        )
        self._app[RELOAD] = self.reload
        if self.worker is not None:
            self._join_workers(self._app, worker=self.worker, fanout=self.fanout)
        port = await self._listen(self._app)
        if self._peers is not None:
            await self._peers.start()
        self.port = port
        self._app[READY][0] = True
        self._log_listening(self.fanout)

    def _join_workers(self, app: web.Application, *, worker: WorkerSpec, fanout: FanOut) -> None:
        """As one worker of ``--workers``: balance the write connections with the other
        workers (``rwrouter_write_connections``), and serve ``/metrics``, ``/-/reload`` and
        ``/-/audit`` for them all (:class:`~rwrouter.server.workers.Peers`, not started yet)."""
        board = Board(board_path(worker.runtime_dir), index=worker.index, count=worker.count)
        self._balancer = Balancer(board)
        app[BALANCE] = self._balancer.end_connection
        self.metrics.process.watch_write_connections(self._balancer.count)
        self._peers = Peers(worker, metrics=self.metrics, reload=self.reload, audit=fanout.audit)
        app[EXPOSE], app[RELOAD] = self._peers.exposition, self._peers.reload_all
        app[AUDIT] = self._peers.audit_report

    async def _listen(self, app: web.Application) -> int:
        """Serve ``app`` on ``server.listen_address`` (with ``SO_REUSEPORT`` as a worker)
        within the connection bounds (:meth:`_bound`); returns the bound port. Raises OSError
        if the port is taken."""
        settings = self.config.server
        self._runner = web.AppRunner(
            app, handle_signals=False, shutdown_timeout=REQUEST_GRACE, **HANDLER_ARGS
        )
        await self._runner.setup()
        if self._runner.server is None:
            raise RwrouterError("the web application runner did not set up its server")
        tls = self._web_file is not None and self._web_file.context is not None
        try:
            self._listener = await listen(
                self._runner.server,
                self._bound(app),
                host=settings.listen_host or None,
                port=settings.listen_port,
                reuse_port=self.worker is not None,
                ssl_context=ReloadingContext(self._web_file) if tls and self._web_file else None,
                **HANDLER_ARGS,
            )
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            error = ListenError(
                f"cannot listen on {settings.listen_address} (server.listen_address): {reason}"
            )
            error.errno = exc.errno
            raise error from exc
        sockets = self._listener.sockets or ()
        port: int = sockets[0].getsockname()[1] if sockets else settings.listen_port
        return port

    def _bound(self, app: web.Application) -> Connections:
        """The connection bounds of the listener (:mod:`rwrouter.server.connections`), the
        loop's accept errors handled, and the front door's gauges watching them and the
        app's bodies (:data:`~rwrouter.server.app.BODIES`)."""
        metrics = self.metrics.receive
        self._accept_errors = AcceptErrors(loop=asyncio.get_running_loop(), metrics=metrics)
        self._accept_errors.install()
        connections = Connections(settings=self.config.server, metrics=metrics)
        bodies = app[BODIES]
        metrics.watch_bounds(
            connections=lambda: connections.open,
            reads=lambda: bodies.reads,
            waiting=lambda: bodies.waiting,
            held=lambda: bodies.held,
        )
        return connections

    def _log_listening(self, fanout: FanOut) -> None:
        """Log that the router listens (its URL, destinations, audited ones, accelerator),
        and warn when the compiled accelerator is not in use."""
        log.info(
            kv(
                msg="listening",
                url=self.url,
                destinations=len(fanout.destinations),
                audited=",".join(fanout.audit.names) or "-",
                accelerated=str(ACCELERATED).lower(),
                web_config=self.door.web_config_file or "-",
                lifecycle=str(self.door.enable_lifecycle).lower(),
            )
        )
        if not ACCELERATED:
            log.warning(
                kv(
                    msg=(
                        "the compiled accelerator is not in use (not built, or "
                        "RWROUTER_NO_EXTENSIONS set): the pure-Python hot path runs, slower"
                    ),
                )
            )

    def _warn(self, config: Config) -> None:
        """Log what ``check-config`` warns about (:func:`rwrouter.config.advice.config_warnings`:
        valid settings that work against each other) and notes (``Config.notes``: Prometheus
        keys accepted, with what applies here, at info level), once per process (by the
        first worker of ``--workers``)."""
        if self.worker is not None and self.worker.index != 0:
            return
        for note in config.notes:
            log.info(kv(msg="configuration note", key=note.path, note=note.note))
        for warning in config_warnings(config):
            log.warning(kv(msg="configuration warning", key=warning.path, reason=warning.reason))

    async def reload(self) -> str:
        """Re-read ``config_path`` and apply it (:mod:`rwrouter.pipeline.reload`); returns
        a one-line summary. On any error the running configuration stays, the error is logged
        and ``rwrouter_config_last_reload_successful`` is 0; raises RwrouterError (or OSError)
        with the reason."""
        async with self._reload_lock:
            try:
                if self.config_path is None:
                    raise RwrouterError("no configuration file to reload (started without one)")
                if self.fanout is None:
                    raise RwrouterError("the router is not running")
                new = await asyncio.to_thread(load_config, self.config_path)
                if self.worker is not None:  # its own storage.path, as when it started
                    new = worker_config(new, self.worker)
                summary = await reconfigure(self.fanout, self.config, new, metrics=self.metrics)
                self._warn(new)
            except (RwrouterError, OSError) as exc:
                self.metrics.process.config_reload_ok.set(0)
                log.error(
                    kv(
                        msg="configuration reload failed: keeping the running one",
                        file=self.config_path,
                        error=exc,
                    )
                )
                raise
            self.config = dataclasses.replace(
                new, server=self.config.server, storage=self.config.storage
            )
            self.metrics.process.config_reload_ok.set(1)
            self.metrics.process.config_reload_time.set_to_current_time()
            if summary.restart_needed:
                log.warning(
                    kv(
                        msg="changes need a restart to apply",
                        sections=",".join(summary.restart_needed),
                    )
                )
            parts = [f"{k} {','.join(v)}" for k, v in dataclasses.asdict(summary).items() if v]
            return "configuration reloaded: " + ("; ".join(parts) or "no change")

    async def stop(self, *, drain_timeout: float | None = None) -> None:
        """Stop accepting requests (those in progress get up to :data:`REQUEST_GRACE` seconds
        to finish), then send what is queued until ``drain_timeout`` seconds (default
        ``server.shutdown_timeout``) have passed in all; what is left stays on disk."""
        if drain_timeout is None:
            drain_timeout = self.config.server.shutdown_timeout
        deadline = time.monotonic() + drain_timeout
        if self._app is not None:
            self._app[READY][0] = False
        if self._listener is not None:  # no new connection; the runner closes the others
            self._listener.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None
        if self._accept_errors is not None:
            self._accept_errors.uninstall()
            self._accept_errors = None
        if self._balancer is not None:  # its connections are closed: its slot is zeroed
            self._balancer.close()
            self._balancer = None
        if self.fanout is not None:
            await self.fanout.stop(timeout=max(0.0, deadline - time.monotonic()))
            self.fanout.elections.close()
            if isinstance(self.fanout.stores, BudgetTables):
                self.fanout.stores.close()
            self.fanout = None
        if self._peers is not None:
            await self._peers.stop()
            self._peers = None
