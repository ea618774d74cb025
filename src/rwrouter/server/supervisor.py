"""``rwrouter run --workers N`` (N > 1): a supervisor process that serves no traffic and keeps N
worker processes running (``python -m rwrouter run --config FILE --worker SPEC``, each a whole
router on the same address with ``SO_REUSEPORT``: :mod:`rwrouter.server.workers`).

- Start: the address is checked free (nobody else listens there; port 0 is resolved here so
  every worker binds the same port), then the workers start together. If one exits before it
  listens, the others are stopped and the supervisor exits with that worker's status.
- SIGTERM/SIGINT: forwarded (as SIGTERM) to every worker, which drains for
  ``server.shutdown_timeout``; a worker still running ``KILL_GRACE`` seconds after that is
  killed. Exit status 0 when every worker stopped cleanly, else 1.
- SIGHUP: forwarded to every running worker (each reloads the file itself).
- A worker that exits otherwise is restarted after a back-off (1 s, doubling up to 30 s; back
  to 1 s once a worker ran for a minute), logged.
- If the supervisor dies (even ``kill -9``), the workers see the end of a pipe it held and stop
  as on SIGTERM: no orphans.
- The workers balance their connections on a board file in the runtime directory
  (:mod:`rwrouter.server.balance`): the supervisor creates it and zeroes the slot of a worker
  that exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from rwrouter.config import Config, ServerConfig
from rwrouter.logs import kv
from rwrouter.queue.segments import load_position, segment_numbers, segment_path
from rwrouter.server.balance import board_path, clear_slot, create_board
from rwrouter.server.frontdoor import DoorOptions
from rwrouter.server.runner import REQUEST_GRACE
from rwrouter.server.workers import WorkerSpec

log = logging.getLogger("rwrouter.supervisor")

FIRST_BACKOFF, MAX_BACKOFF = 1.0, 30.0  # seconds before restarting a worker that exited
HEALTHY_AFTER = 60.0  # seconds a worker must run for its back-off to start again at 1 s
KILL_GRACE = 10.0  # seconds after shutdown_timeout + REQUEST_GRACE before SIGKILL


def check_address(server: ServerConfig) -> int:
    """Bind ``listen_address`` without ``SO_REUSEPORT`` (so it fails while anyone listens
    there, rwrouter workers included) and release it; returns the port (the kernel's choice for
    port 0). Raises OSError, e.g. address already in use."""
    host = server.listen_host or None
    family, kind, proto, _, address = socket.getaddrinfo(
        host, server.listen_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        port: int = sock.getsockname()[1]
        return port


def orphaned_queues(storage_path: str, workers: int) -> list[tuple[Path, int]]:
    """Queues of ``storage_path/worker-<i>`` with ``i >= workers`` (left by an earlier run with
    more workers: no worker reads them now) that hold data after their committed position,
    with that number of bytes (an upper bound of what is unsent)."""
    found = []
    for directory in sorted(Path(storage_path).glob("worker-*/queue/*")):
        index = directory.parent.parent.name.removeprefix("worker-")
        if not index.isdigit() or int(index) < workers or not directory.is_dir():
            continue
        committed, _, _ = load_position(directory)
        unsent = 0
        for seq in segment_numbers(directory):
            if seq >= committed.segment:
                size = segment_path(directory, seq).stat().st_size
                unsent += size - (committed.offset if seq == committed.segment else 0)
        if unsent > 0:
            found.append((directory, unsent))
    return found


async def supervise(
    config_path: str,
    config: Config,
    *,
    workers: int,
    log_level: str,
    door: DoorOptions | None = None,
) -> int:
    """Run ``workers`` worker processes of ``config_path`` (already loaded and valid as
    ``config``) until SIGTERM/SIGINT; returns the exit status. ``door``: the front door flags
    each worker gets (each applies the web configuration file itself). Raises OSError when
    the listen address is taken."""
    port = check_address(config.server)
    for directory, unsent in orphaned_queues(config.storage.path, workers):
        log.warning(
            kv(
                msg=(
                    f"no worker of {workers} reads this queue: start with more --workers to send it"
                ),
                queue=directory,
                bytes=unsent,
            )
        )
    runtime_dir = tempfile.mkdtemp(prefix="rwrouter-")  # mode 0700: the workers' private sockets
    try:
        create_board(board_path(runtime_dir), count=workers)
        supervisor = Supervisor(
            config_path=config_path,
            count=workers,
            port=port,
            runtime_dir=runtime_dir,
            log_level=log_level,
            stop_grace=config.server.shutdown_timeout + REQUEST_GRACE,
            worker_args=door.args() if door is not None else (),
        )
        return await supervisor.run()
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)


class Supervisor:
    """Starts, watches, signals and restarts the worker processes (see the module docstring)."""

    def __init__(
        self,
        *,
        config_path: str,
        count: int,
        port: int,
        runtime_dir: str,
        log_level: str,
        stop_grace: float,
        worker_args: tuple[str, ...] = (),
    ) -> None:
        self.config_path, self.count, self.port = config_path, count, port
        self.worker_args = worker_args  # more ``rwrouter run`` arguments: the front door's
        self.runtime_dir, self.log_level = runtime_dir, log_level
        self.stop_grace = stop_grace  # seconds a worker gets to stop after SIGTERM
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.ready: set[int] = set()
        self.stopping = asyncio.Event()
        self._lifeline_read, self._lifeline_write = os.pipe()
        self._killer: asyncio.Task[None] | None = None

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        try:
            started = await asyncio.gather(*(self._start(i) for i in range(self.count)))
            if not all(started) and not self.stopping.is_set():
                self.stop()
                codes = await asyncio.gather(*(p.wait() for p in self.procs.values()))
                return next((c for c in codes if c > 0), 1)
            if all(started):
                log.info(kv(msg="all workers listening", workers=self.count, port=self.port))
            codes = await asyncio.gather(*(self._keep(i) for i in range(self.count)))
            return 0 if all(code == 0 for code in codes) else 1
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            if self._killer is not None:
                self._killer.cancel()
            os.close(self._lifeline_write)
            os.close(self._lifeline_read)

    def stop(self) -> None:
        """SIGTERM to every worker; SIGKILL to those still running after their grace."""
        if self.stopping.is_set():
            return
        log.info(kv(msg="stopping: the workers drain their queues"))
        self.stopping.set()
        self._signal_all(signal.SIGTERM, ready_only=False)
        self._killer = asyncio.get_running_loop().create_task(self._kill_late())

    def reload(self) -> None:
        """SIGHUP to every listening worker (one still starting reads the file anyway)."""
        log.info(kv(msg="SIGHUP: reloading every worker"))
        self._signal_all(signal.SIGHUP, ready_only=True)

    def _signal_all(self, sig: signal.Signals, *, ready_only: bool) -> None:
        for i, proc in self.procs.items():
            if proc.returncode is None and (i in self.ready or not ready_only):
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)

    async def _kill_late(self) -> None:
        await asyncio.sleep(self.stop_grace + KILL_GRACE)
        for i, proc in self.procs.items():
            if proc.returncode is None:
                log.error(kv(msg="worker did not stop in time: killed", worker=i))
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()

    async def _start(self, index: int) -> bool:
        """Start worker ``index``; True once it listens, False if it exited before."""
        ready_read, ready_write = os.pipe()
        spec = WorkerSpec(
            index=index,
            count=self.count,
            port=self.port,
            runtime_dir=self.runtime_dir,
            ready_fd=ready_write,
            lifeline_fd=self._lifeline_read,
        )
        try:
            self.procs[index] = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "rwrouter",
                "--log-level",
                self.log_level,
                "run",
                "--config",
                self.config_path,
                "--worker",
                spec.to_arg(),
                *self.worker_args,
                pass_fds=(ready_write, self._lifeline_read),
                stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            os.close(ready_write)
        if self.stopping.is_set():
            self.procs[index].terminate()
        listening = await _read_ready(ready_read)
        if listening:
            self.ready.add(index)
            log.info(kv(msg="worker listening", worker=index, pid=self.procs[index].pid))
        return listening

    async def _keep(self, index: int) -> int:
        """Wait for worker ``index``; restart it (with back-off) until stopping. Returns the
        exit status of its last process."""
        failures = 0
        while True:
            started = time.monotonic()
            code = await self.procs[index].wait()
            self.ready.discard(index)
            with contextlib.suppress(OSError):  # else stale until the next one zeroes it
                clear_slot(board_path(self.runtime_dir), index)  # its connections are gone
            if self.stopping.is_set():
                return code
            failures = 0 if time.monotonic() - started >= HEALTHY_AFTER else failures
            delay = min(MAX_BACKOFF, FIRST_BACKOFF * 2**failures)
            failures += 1
            log.error(
                kv(
                    msg="worker exited: restarting",
                    worker=index,
                    status=code,
                    restart_in=f"{delay:g}s",
                )
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), delay)
            if self.stopping.is_set():
                return 0
            await self._start(index)


async def _read_ready(fd: int) -> bool:
    """Wait until the worker writes its ready byte (True) or closes the pipe by exiting
    (False); closes ``fd``."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, lambda: None if readable.done() else readable.set_result(None))
    try:
        await readable
        return os.read(fd, 1) == b"R"
    finally:
        loop.remove_reader(fd)
        os.close(fd)
