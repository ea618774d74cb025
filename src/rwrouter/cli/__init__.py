"""rwrouter: a remote write router for Prometheus (remote write 1.0 and 2.0).

The commands: ``rwrouter run``, ``rwrouter check-config``, ``rwrouter demo``,
``rwrouter rejected list|replay``, ``rwrouter relabel`` (the relabel debugger), ``rwrouter
audit``, ``rwrouter capture``, ``rwrouter compare`` (the same PromQL on the self-hosted
store and the workspace) and ``rwrouter reload``.

``rwrouter run --config FILE`` runs the router (SIGHUP reloads FILE; SIGTERM drains for
``server.shutdown_timeout``); ``--workers N`` runs N router processes sharing the port
(:mod:`rwrouter.server.supervisor`). ``--config`` is required: a router started without one
would send nothing anywhere and still look healthy, so ``rwrouter run`` alone is a usage
error; ``rwrouter`` with no command prints the help with the list of commands (exit 2); the
local demo pipeline is ``rwrouter demo``.
Exit codes: 0 clean stop, 1 runtime failure, 2 bad configuration or usage.
``rwrouter --help`` shows :data:`DESCRIPTION` and :data:`EPILOG` (this text, for a terminal).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rwrouter import __version__
from rwrouter.cli.audit import register as register_audit
from rwrouter.cli.compare import register as register_compare
from rwrouter.cli.rejected import register as register_rejected
from rwrouter.cli.relabel import register as register_relabel
from rwrouter.cli.reload import register as register_reload
from rwrouter.errors import ConfigError, ConfigErrors, RwrouterError
from rwrouter.logs import escape, kv, setup_logging

if TYPE_CHECKING:
    from rwrouter.config import Config
    from rwrouter.config.collect import Collector
    from rwrouter.config.webmodel import WebConfig
    from rwrouter.server.frontdoor import DoorOptions
    from rwrouter.server.workers import WorkerSpec

log = logging.getLogger("rwrouter")

DESCRIPTION = """\
rwrouter: a remote write router for Prometheus (remote write 1.0 and 2.0):
Prometheus-exact relabel rules, fan-out to a SigV4-signed managed workspace and
a self-hosted store, durable disk queues."""
EPILOG = """\
`rwrouter run --config FILE` runs the router (SIGHUP or `rwrouter reload`
reloads FILE; SIGTERM drains for server.shutdown_timeout); `--workers N` runs
N router processes sharing the port. --config is required: the local demo
pipeline is `rwrouter demo`. `rwrouter COMMAND --help` describes each command.

Exit codes: 0 clean stop, 1 runtime failure, 2 bad configuration or usage."""


async def serve(
    config_path: str, *, worker: WorkerSpec | None = None, door: DoorOptions | None = None
) -> int:
    """Run the router until SIGTERM/SIGINT; then stop accepting and drain the queues for
    ``server.shutdown_timeout`` (the rest stays on disk). SIGHUP reloads the configuration.
    ``worker``: run as one worker of ``--workers`` (:mod:`rwrouter.server.workers`);
    ``door``: ``--web.config.file`` and ``--web.enable-lifecycle``."""
    from rwrouter.config import load_config
    from rwrouter.server.runner import RouterServer
    from rwrouter.server.workers import report_ready, worker_config

    config = load_config(config_path)
    if worker is not None:
        config = worker_config(config, worker)
    server = RouterServer(config, config_path=config_path, worker=worker, door=door)
    await server.start()
    # What start-up made (modules, the configuration, compiled rules) lives as long as the
    # process: the cyclic GC need not scan it again at every full collection; and the
    # requests' objects rarely form cycles, so it runs after 10,000 allocations, not 700.
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if worker is not None:
        report_ready(worker, on_orphaned=stop.set)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reloads: set[asyncio.Task[None]] = set()

    async def reload() -> None:
        with contextlib.suppress(RwrouterError, OSError):  # logged; the running config stays
            log.info(kv(msg="SIGHUP: reloading the configuration"))
            log.info(kv(msg=await server.reload()))

    def on_hangup() -> None:
        task = loop.create_task(reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hangup)
    await stop.wait()
    timeout = server.config.server.shutdown_timeout
    log.info(kv(msg="stopping: draining queues", shutdown_timeout=f"{timeout:g}s"))
    await server.stop(drain_timeout=timeout)
    return 0


#: What ``rwrouter run`` without ``--config`` says (exit status 2).
RUN_NEEDS_CONFIG = "rwrouter run needs --config FILE (the demo is `rwrouter demo`)"
#: The last line of ``rwrouter`` alone, after the help and its list of commands (exit 2).
NO_COMMAND = (
    "a command is needed (listed above): `rwrouter run --config FILE` runs the router, "
    "`rwrouter demo` the local demo"
)


def cmd_run(args: argparse.Namespace) -> int:
    from rwrouter.server.frontdoor import DoorOptions

    door = DoorOptions(
        web_config_file=args.web_config_file, enable_lifecycle=args.web_enable_lifecycle
    )
    if args.worker is not None:  # started by the supervisor of --workers N
        from rwrouter.server.workers import WorkerSpec, prepare_worker

        spec = WorkerSpec.from_arg(args.worker)
        prepare_worker(spec)
        return asyncio.run(serve(args.config, worker=spec, door=door))
    if args.workers > 1:
        from rwrouter.config import load_config
        from rwrouter.server.supervisor import supervise

        config = load_config(args.config)  # errors are one line here, not one per worker
        if door.web_config_file is not None:
            load_web_config(door.web_config_file)
        return asyncio.run(
            supervise(
                args.config, config, workers=args.workers, log_level=args.log_level, door=door
            )
        )
    if door.web_config_file is not None:
        load_web_config(door.web_config_file)  # its errors name the file
    return asyncio.run(serve(args.config, door=door))


def load_web_config(path: str) -> WebConfig:
    """:func:`rwrouter.server.webtls.load_web_config`, its ConfigError naming the file."""
    from rwrouter.server.webtls import load_web_config as load

    try:
        return load(path)
    except ConfigError as exc:
        named = [
            ConfigError(
                f"--web.config.file {path}: {e.path}" if e.path else f"--web.config.file {path}",
                e.reason,
            )
            for e in getattr(exc, "errors", (exc,))
        ]
        raise ConfigErrors.of(named) from None


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1024:
        raise argparse.ArgumentTypeError(f"expected a number of processes >= 1, got {text!r}")
    return value


def cmd_check_config(args: argparse.Namespace) -> int:
    """Every mistake in one run, one line each: the file's and its files' (load_config),
    the router's, each sigv4 destination's signing region, the web configuration file's."""
    from rwrouter.config import describe_config, load_config
    from rwrouter.config.advice import config_warnings
    from rwrouter.config.collect import Collector

    if (args.file is None) == (args.config_file is None):
        raise ConfigError("check-config", "give the configuration file: FILE or --config FILE")
    errors = Collector()
    config = errors.attempt(lambda: load_config(args.file or args.config_file), None)
    regions = {} if config is None else _checked_regions(config, errors)
    web = None
    if args.web_config_file is not None:
        web = errors.attempt(lambda: load_web_config(args.web_config_file), None)
    errors.check()
    if config is None:  # cannot happen: load_config raised
        return 2
    for note in config.notes:  # a Prometheus key accepted, with what applies here
        print(f"rwrouter: configuration note: {escape(note)}", file=sys.stderr)
    for warning in config_warnings(config):  # valid, but works against another setting
        print(f"rwrouter: configuration warning: {escape(warning)}", file=sys.stderr)
    text = describe_config(config, regions=regions)  # may hold control characters
    if web is not None:
        from rwrouter.config.webmodel import describe_web_config

        text += "\n" + describe_web_config(web)
    print("\n".join(map(escape, text.split("\n"))))
    return 0


def _checked_regions(config: Config, errors: Collector) -> dict[int, tuple[str, str]]:
    """What only the router refuses (a series budget with ``__tenant__`` rules), and where
    each sigv4 destination's region comes from, as run resolves it: its errors (no region, or
    not the workspace URL's) kept in ``errors``; the regions found, by destination index."""
    from rwrouter.auth.schemes import REGION_NOT_SET, sigv4_region_source
    from rwrouter.config.workspace import signing_region_error
    from rwrouter.routing import build_router

    errors.attempt(lambda: build_router(config), None)
    regions = {}
    for i, dest in enumerate(config.remote_write):
        found = None if dest.sigv4 is None else sigv4_region_source(dest.sigv4)
        path = f"remote_write[{i}].sigv4.region"
        if dest.sigv4 is not None and found is None:
            errors.keep(ConfigError(path, REGION_NOT_SET))
        elif found is not None:
            regions[i] = found
            if found[1] != "sigv4.region":  # the file's own region is checked at parse
                mismatch = signing_region_error(dest.url, *found, path)
                if mismatch is not None:
                    errors.keep(mismatch)
    return regions


def cmd_demo(args: argparse.Namespace) -> int:
    from rwrouter.demo.pipeline import run_demo

    return run_demo(
        nodes=args.nodes,
        duration=args.duration,
        workdir=args.workdir,
        prometheus=args.prometheus,
    )


def _web_flags(parser: argparse.ArgumentParser, *, lifecycle: bool) -> None:
    parser.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="web configuration file (Prometheus's format: TLS, basic auth, bearer tokens, "
        "roles); read again when it changes",
    )
    if lifecycle:
        parser.add_argument(
            "--web.enable-lifecycle",
            dest="web_enable_lifecycle",
            action="store_true",
            help="serve POST /-/reload (admin role); off: 403 (SIGHUP always reloads)",
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rwrouter",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rwrouter {__version__}")
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    sub = parser.add_subparsers(dest="command")
    _register_run(sub)
    _register_check_config(sub)
    _register_demo(sub)
    register_rejected(sub)  # rwrouter rejected list|replay (rwrouter.cli.rejected)
    register_relabel(sub)  # rwrouter relabel --config FILE --series S (rwrouter.cli.relabel)
    register_audit(sub)  # rwrouter audit [--url URL] (rwrouter.cli.audit)
    register_reload(sub)  # rwrouter reload [--url URL | --pid PID] (rwrouter.cli.reload)
    register_compare(sub)  # rwrouter compare --config FILE --query Q (rwrouter.cli.compare)
    return parser


def _register_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run",
        help="run the router (needs --config FILE)",
        description="Serve the configuration in FILE: receive remote write on "
        "server.listen_address, relabel, queue on disk and send to every destination. SIGHUP "
        "(or `rwrouter reload`) reloads FILE; SIGTERM or Ctrl-C drains for "
        "server.shutdown_timeout, what is left stays on disk.",
    )
    run.add_argument("--config", metavar="FILE", help="YAML configuration file (required)")
    run.add_argument(
        "--workers",
        type=_workers,
        default=1,
        metavar="N",
        help="router processes sharing the listen port (SO_REUSEPORT), each with "
        "its own queues; default 1",
    )
    _web_flags(run, lifecycle=True)
    run.add_argument("--worker", help=argparse.SUPPRESS)  # set by the supervisor of --workers
    run.set_defaults(func=cmd_run)


def _register_check_config(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = sub.add_parser(
        "check-config",
        help="validate a configuration and describe it",
        description="Validate a configuration file (every mistake, one line each, exit 2) "
        "or describe each destination as the router would run it (exit 0).",
    )
    check.add_argument("file", nargs="?", help="YAML configuration file")
    check.add_argument(
        "--config", dest="config_file", metavar="FILE", help="the same, as run takes it"
    )
    _web_flags(check, lifecycle=False)
    check.set_defaults(func=cmd_check_config)


def _register_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo",
        help="run the local demo pipeline (needs Debian's prometheus, or --prometheus)",
        description="Run the local demo pipeline on 127.0.0.1: a synthetic DCGM fleet, a "
        "real Prometheus remote-writing to rwrouter, a SigV4-verifying double of the managed "
        "workspace and a second Prometheus as the self-hosted store; prints what each store "
        "received every ten seconds until Ctrl-C (or --duration).",
    )
    demo.add_argument(
        "--nodes",
        type=int,
        default=2,
        metavar="N",
        help="simulated GPU nodes, 8 GPUs each (default: %(default)s)",
    )
    demo.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    demo.add_argument(
        "--workdir",
        default=None,
        metavar="DIR",
        help="where to keep the demo's data (default: a temporary directory, removed on exit)",
    )
    demo.add_argument(
        "--prometheus",
        default=None,
        metavar="PATH",
        help="the Prometheus binary to run (default: Debian's); a Prometheus "
        ">= 3.8 sends remote write 2.0 and the self-hosted store gets 2.0 "
        "(scripts/build-peers builds 3.16)",
    )
    demo.set_defaults(func=cmd_demo)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rwrouter`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # the help, with the commands, as git and kubectl do
        parser.print_help(sys.stderr)
        parser.exit(2, f"\nrwrouter: error: {NO_COMMAND}\n")
    if args.command == "run" and args.config is None:
        parser.error(RUN_NEEDS_CONFIG)  # exit status 2, after the usage line
    setup_logging(args.log_level)
    try:
        code: int = args.func(args)
    except ConfigError as exc:  # every mistake found, one line each (ConfigErrors)
        for error in getattr(exc, "errors", (exc,)):
            print(f"rwrouter: configuration error: {escape(error)}", file=sys.stderr)
        return 2
    except RwrouterError as exc:
        print(f"rwrouter: {escape(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `rwrouter relabel ... | head`: not an error (an OSError:
        # caught before those); stdout goes to /dev/null so that the exit's flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # e.g. storage.path not writable, or a queue in use elsewhere
        print(f"rwrouter: {escape(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
