"""``rwrouter reload``: make a running router re-read its configuration file, from inside its
container too (the image has no ``kill``).

By default it POSTs ``/-/reload`` to the router (``--url``; by default the listen address of
``--config``, else ``http://127.0.0.1:9250``), which serves it only when started with
``--web.enable-lifecycle`` and, behind a web configuration file, only to a credential with the
``admin`` role: ``--http.config.file FILE`` gives the credentials and TLS settings (as
``rwrouter audit`` and ``promtool --http.config.file`` take them). With ``--pid PID`` it sends
SIGHUP to that process instead (``kill -HUP PID``; SIGHUP always reloads; in the image the
router is PID 1).

It follows no redirect: a 3xx is reported as ``redirected to HOST:PORT (not followed)``
(exit 1), and the credential is sent nowhere else. ``--pid`` takes a process ID >= 1 (0 or a
negative one would signal a process group or every process: a usage error, exit 2).

Prints the router's answer (what the reload changed: kept, changed, restarted, added and
removed destinations) or why it failed, with what to do about a 403. Exit 0 when the
configuration was reloaded (or the signal sent); 1 when the router refused (403: lifecycle
off or no admin role; 500: the new file is bad and the running configuration stays),
cannot be reached, or the process does not exist.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import urllib.error

from rwrouter.cli.audit import DEFAULT_URL, open_router, router_request, router_url
from rwrouter.errors import RedirectError
from rwrouter.logs import escape

__all__ = ["register"]

MAX_PID = 2**31 - 1  # pid_t is a signed 32-bit integer (Linux's pid_max is at most 2**22)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rwrouter reload`` (:func:`cmd_reload`) to the ``rwrouter`` subcommands."""
    reload = sub.add_parser(
        "reload",
        help="make a running router re-read its configuration file",
        description="POST /-/reload to a running rwrouter (served with --web.enable-lifecycle, "
        "to the admin role), or send it SIGHUP with --pid. Unchanged destinations keep "
        "running; a bad file keeps the running configuration (exit 1, the reason printed).",
    )
    where = reload.add_mutually_exclusive_group()
    where.add_argument(
        "--url",
        help=f"the running router (default: the listen address of --config, else {DEFAULT_URL})",
    )
    where.add_argument(
        "--pid",
        type=_pid,
        metavar="PID",
        help="send SIGHUP to this process (>= 1) instead of POSTing (in the image: 1)",
    )
    reload.add_argument("--config", help="rwrouter's configuration (its listen address)")
    reload.add_argument(
        "--http.config.file",
        dest="http_config_file",
        metavar="FILE",
        help="how to reach the router: basic_auth or authorization (admin role), and "
        "tls_config (the HTTP client configuration promtool reads)",
    )
    reload.set_defaults(func=cmd_reload)


def _pid(text: str) -> int:
    """A process ID for ``--pid``: 1 .. 2**31 - 1. 0, -1 and other negative values are
    refused: kill(2) sends them to a process group or to every process the user may signal,
    which is never what a reload means."""
    try:
        pid = int(text)
    except ValueError:
        pid = 0
    if not 1 <= pid <= MAX_PID:
        raise argparse.ArgumentTypeError(f"expected a process ID >= 1, got {text!r}")
    return pid


def cmd_reload(args: argparse.Namespace) -> int:
    """``rwrouter reload``: 0 reloaded (or signalled), 1 refused or unreachable."""
    if args.pid is not None:
        try:
            os.kill(args.pid, signal.SIGHUP)
        except OSError as exc:
            print(f"rwrouter reload: cannot signal process {args.pid}: {exc}", file=sys.stderr)
            return 1
        print(f"rwrouter reload: SIGHUP sent to process {args.pid} (its log says the outcome)")
        return 0
    address = f"{router_url(args.url, args.config)}/-/reload"
    request, context = router_request(address, args.http_config_file)
    request.method, request.data = "POST", b""
    try:
        with open_router(request, context) as response:
            answer = response.read().decode(errors="replace").strip()
    except RedirectError as exc:  # the admin credential goes to the router, nowhere else
        print(f"rwrouter reload: {address} {exc}", file=sys.stderr)
        return 1
    except urllib.error.HTTPError as exc:
        reason = exc.read().decode(errors="replace").strip() or exc.reason
        print(
            f"rwrouter reload: {address} answered {exc.code}: {escape(reason)}{_hint(reason)}",
            file=sys.stderr,
        )
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(
            f"rwrouter reload: cannot reach {address}: {exc} (is rwrouter running there? "
            "give --config FILE for its listen address, --url URL, or --pid PID)",
            file=sys.stderr,
        )
        return 1
    print(escape(answer) or "configuration reloaded")
    return 0


def _hint(reason: str) -> str:
    """What to do about a refusal whose text is ``reason`` (the router's answer), or ""."""
    from rwrouter.server.frontdoor import LIFECYCLE_OFF

    if reason == LIFECYCLE_OFF:
        return (
            " (the router serves POST /-/reload only when started with "
            "--web.enable-lifecycle; or send it SIGHUP: `rwrouter reload --pid PID`)"
        )
    if "lacks the admin role" in reason:
        return " (give --http.config.file the credential of a user with the admin role)"
    return ""
