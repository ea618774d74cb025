"""Run the workspace double outside an async test: in a thread, or as a process for the demo.

``python -m rwrouter.doubles.workspace_runner --port 9095 --region us-east-1 --workspace ws-1
--access-key AKID --secret SECRET`` serves until SIGINT/SIGTERM; GET ``/_double/state`` shows
what it accepted. ``--backend URL`` (a Prometheus started with
``--web.enable-remote-write-receiver``, best with :func:`rwrouter.doubles.workspace_backend.
backend_config`) stores what the double accepts and answers the workspace's query API;
``--backend WS=URL`` gives one workspace its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import threading
from collections.abc import Sequence
from types import TracebackType

from rwrouter.doubles.workspace import INSPECT_PATH, Key, Limits, WorkspaceDouble


class ThreadedWorkspace:
    """A started double running on its own loop in a daemon thread.

    Inspect ``double`` from another thread only for reads of simple counters or after
    :meth:`stop`; it is owned by its loop.
    """

    def __init__(self, double: WorkspaceDouble) -> None:
        self.double = double
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="workspace-double", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.double.start())
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.close()

    def start(self, *, timeout_s: float) -> None:
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise TimeoutError(f"workspace double did not start within {timeout_s} s")
        if self._error is not None:
            raise self._error

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """Stop the double and its loop; idempotent."""
        if not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self.double.stop(), self._loop)
        future.result(timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)

    def __enter__(self) -> ThreadedWorkspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def run_in_thread(double: WorkspaceDouble, *, timeout_s: float = 10.0) -> ThreadedWorkspace:
    """Start ``double`` in a daemon thread; raises what ``start()`` raised, or TimeoutError."""
    runner = ThreadedWorkspace(double)
    runner.start(timeout_s=timeout_s)
    return runner


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rwrouter.doubles.workspace_runner",
        description="Local double of the managed Prometheus workspace (SigV4-verifying).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--workspace", action="append", help="workspace id (repeatable)")
    parser.add_argument("--access-key", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--session-token", default=None)
    parser.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="[WS=]URL",
        help="Prometheus that stores what a workspace accepts and answers its queries "
        "(URL alone: every workspace; repeatable)",
    )
    parser.add_argument("--max-body-bytes", type=int, default=Limits().max_body_bytes)
    parser.add_argument(
        "--ingestion-rate",
        type=float,
        default=Limits().ingestion_rate,
        help="samples+exemplars+metadata per second (token bucket refill)",
    )
    parser.add_argument("--ingestion-burst", type=float, default=Limits().ingestion_burst)
    parser.add_argument(
        "--ingestion-retry-after",
        type=float,
        default=None,
        help="seconds sent in Retry-After with the rate limiter's 429 (default: no header)",
    )
    parser.add_argument(
        "--out-of-bounds-s",
        type=float,
        default=Limits().out_of_bounds_s,
        help="answer 400 out of bounds for samples older than this many seconds (0: off)",
    )
    return parser


def backends_of(values: Sequence[str], workspaces: Sequence[str]) -> dict[str, str]:
    """``--backend`` values -> {workspace id: URL}: ``WS=URL`` for one workspace, a bare
    ``URL`` (it has ``://`` before any ``=``) for every workspace. ``ValueError`` naming a
    workspace that is not served."""
    backends: dict[str, str] = {}
    for value in values:
        workspace, sep, url = value.partition("=")
        if not sep or "://" in workspace:
            backends.update(dict.fromkeys(workspaces, value))
        elif workspace not in workspaces:
            raise ValueError(f"--backend {value}: workspace {workspace!r} is not served")
        else:
            backends[workspace] = url
    return backends


async def _serve(args: argparse.Namespace) -> None:
    key = Key(args.secret, args.session_token)
    workspaces = args.workspace or ["ws-1"]
    double = WorkspaceDouble(
        region=args.region,
        workspaces=workspaces,
        backends=backends_of(args.backend, workspaces),
        credentials={args.access_key: key},
        limits=Limits(
            max_body_bytes=args.max_body_bytes,
            ingestion_rate=args.ingestion_rate,
            ingestion_burst=args.ingestion_burst,
            ingestion_retry_after=args.ingestion_retry_after,
            out_of_bounds_s=args.out_of_bounds_s,
        ),
        host=args.host,
        port=args.port,
    )
    await double.start()
    for workspace_id in double.stores:
        print(f"workspace {workspace_id}: {double.url(workspace_id)}", flush=True)
        if workspace_id in double.backends:
            print(f"  query: {double.query_url(workspace_id)}", flush=True)
    print(f"state: {double.base_url}{INSPECT_PATH}", flush=True)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, done.set)
    try:
        await done.wait()
    finally:
        await double.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m rwrouter.doubles.workspace_runner``; returns the exit status
    (2 for a ``--backend`` naming a workspace that is not served)."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        backends_of(args.backend, args.workspace or ["ws-1"])
    except ValueError as exc:
        parser.error(str(exc))
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
