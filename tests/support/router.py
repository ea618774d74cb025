"""rwrouter as a real subprocess in a test (:class:`rwrouter.doubles.router.RouterProcess`):
its configuration written for a free port of 127.0.0.1, started, ready before the test goes
on (``/-/ready``, or the test's own readiness such as every worker up), and stopped after it::

    with running_router(tmp_path, lambda port: CONFIG.format(port=port)) as router:
        ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rwrouter.doubles.prometheus import free_port
from rwrouter.doubles.router import RouterProcess

READY_TIMEOUT_S = 30.0

Configure = Callable[[int], str]  # the configuration's YAML text for a listen port


def ready(router: RouterProcess) -> None:
    """Wait (at most :data:`READY_TIMEOUT_S`) for ``/-/ready``; RuntimeError with the log's
    tail if the router exits or is not ready by then."""
    router.wait_ready(timeout_s=READY_TIMEOUT_S)


def start_router(
    workdir: Path,
    configure: Configure,
    *,
    args: Sequence[str] = (),
    wait: Callable[[RouterProcess], None] = ready,
) -> RouterProcess:
    """Write ``configure(port)`` to ``workdir/rwrouter.yaml`` (a relative ``storage.path``
    lands in ``workdir``), start ``rwrouter run`` with ``args`` on a free port (log:
    ``workdir/rwrouter.log``) and ``wait`` until it is ready; stopped again if that fails.
    The caller stops it."""
    port = free_port()
    config = workdir / "rwrouter.yaml"
    config.write_text(configure(port))
    router = RouterProcess(
        config_path=config, port=port, log_path=workdir / "rwrouter.log", args=args
    )
    try:
        wait(router)
    except BaseException:
        router.stop()
        raise
    return router


@contextlib.contextmanager
def running_router(
    workdir: Path,
    configure: Configure,
    *,
    args: Sequence[str] = (),
    wait: Callable[[RouterProcess], None] = ready,
    stop_timeout_s: float = 10.0,
) -> Iterator[RouterProcess]:
    """:func:`start_router`, stopped (draining for up to ``stop_timeout_s``) on the way
    out."""
    router = start_router(workdir, configure, args=args, wait=wait)
    try:
        yield router
    finally:
        router.stop(timeout_s=stop_timeout_s)
