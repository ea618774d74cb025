"""``rwrouter audit`` and ``rwrouter capture``: what the audited destinations would cost —
metric names ranked by active series and samples per second, total active series against the
workspace limit, projected monthly ingestion cost (:mod:`rwrouter.audit`).

``rwrouter audit`` reads ``GET /-/audit`` of a running router (``--url``; by default the listen
address of ``--config``, else ``http://127.0.0.1:9250``), whose destinations with
``shadow: true`` (counted, never sent) or ``audit: true`` (sent and counted) are counted as
requests arrive; ``--http.config.file FILE`` gives the credentials and TLS settings to reach a
router with a web configuration file (as ``promtool --http.config.file``:
:mod:`rwrouter.config.httpclient`). No redirect is followed (:func:`open_router`: the
credential goes to the router only): a 3xx is reported, exit 1. With ``--capture FILE`` it
instead routes the requests of a capture file through ``--config``'s rules and counts
**every** destination, offline (nothing is sent): try several configurations on the same
traffic.

``rwrouter capture --output FILE`` records the remote write requests it receives
(:mod:`rwrouter.server.capture`) for ``--capture``.

Output: a table per destination (``--top`` names, sorted by ``--sort``), or ``--json`` (the
report's JSON, ``--top`` names per destination; 0: all). Exit 0; 1 when the router cannot be
reached or answers with an error, or the capture file cannot be read; 2 for a bad
configuration file (usage).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message
from typing import IO, Any

from rwrouter.auth.schemes import authenticator_for
from rwrouter.config.files import CONFIG_FILE_MAX_BYTES, read_regular
from rwrouter.config.httpclient import HTTPClientConfig, parse_http_client_config
from rwrouter.errors import ConfigError, RedirectError
from rwrouter.logs import escape
from rwrouter.send.transport import ssl_context_for

DEFAULT_URL = "http://127.0.0.1:9250"
TIMEOUT = 30.0  # seconds to wait for the router's answer (it merges every worker's counts)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``audit`` and ``capture`` commands to the ``rwrouter`` subcommands."""
    _register_audit(sub)
    _register_capture(sub)


def _register_audit(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rwrouter audit`` (:func:`cmd_audit`) and its options."""
    from rwrouter.audit import SORT_KEYS

    audit = sub.add_parser(
        "audit",
        help="active series and monthly cost per metric name of the audited destinations",
        description="Read the audit of a running rwrouter (destinations with `shadow: true` or "
        "`audit: true`): metric names ranked by active series and samples/s, active series "
        "against the workspace limit, projected monthly ingestion cost.",
    )
    audit.add_argument(
        "--url",
        help=f"the running router (default: the listen address of --config, else {DEFAULT_URL})",
    )
    audit.add_argument(
        "--config",
        help="rwrouter's configuration (its listen address; with --capture: the rules to apply)",
    )
    audit.add_argument(
        "--http.config.file",
        dest="http_config_file",
        metavar="FILE",
        help="how to reach the router: basic_auth or authorization, and tls_config (the HTTP "
        "client configuration promtool reads)",
    )
    audit.add_argument(
        "--capture",
        metavar="FILE",
        help="count the requests of this capture file (rwrouter capture) under "
        "--config's rules, offline, every destination",
    )
    audit.add_argument("--json", action="store_true", help="print the JSON report")
    audit.add_argument(
        "--top",
        type=_whole_number,
        default=20,
        help="metric names per destination (default 20; 0: all)",
    )
    audit.add_argument(
        "--sort",
        choices=SORT_KEYS,
        default="series",
        help="rank names by active series (default) or samples/s",
    )
    audit.set_defaults(func=cmd_audit)


def _register_capture(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rwrouter capture`` (:func:`cmd_capture`) and its options."""
    capture = sub.add_parser(
        "capture",
        help="record received remote write requests to a file (for rwrouter audit --capture)",
        description="A remote write receiver that records every request in a capture file: point "
        "a Prometheus remote_write entry at it for a while, then count the file offline with "
        "`rwrouter audit --config FILE --capture FILE`.",
    )
    capture.add_argument("--output", required=True, help="the capture file (appended to)")
    capture.add_argument(
        "--listen",
        default="127.0.0.1:9251",
        help="host:port to receive on (default 127.0.0.1:9251); POST /api/v1/write",
    )
    capture.add_argument(
        "--duration",
        type=_duration,
        default=None,
        help="stop after this long (e.g. 1h; default: a signal)",
    )
    capture.add_argument(
        "--max-bytes",
        type=_size,
        default=1 << 30,
        help="stop recording (still answering 204) at this file size (default 1GiB)",
    )
    capture.set_defaults(func=cmd_capture)


def _duration(text: str) -> float:
    from rwrouter.config import parse_duration
    from rwrouter.errors import ConfigError

    try:
        return parse_duration(text, "--duration")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(text: str) -> int:
    from rwrouter.config import parse_size
    from rwrouter.errors import ConfigError

    try:
        return parse_size(text, "--max-bytes")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole_number(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def router_url(url: str | None, config_path: str | None) -> str:
    """The base URL to ask: ``url``, else the listen address of ``config_path`` (a wildcard
    host asked on 127.0.0.1), else :data:`DEFAULT_URL`. Raises ConfigError for a bad file."""
    if url:
        url = url.rstrip("/")
        return url if "://" in url else f"http://{url}"  # host:port alone
    if config_path is None:
        return DEFAULT_URL
    from rwrouter.config import load_config_offline

    server = load_config_offline(config_path)[0].server  # no credentials, no ${VAR} needed
    host = server.listen_host or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{server.listen_port}"


def cmd_audit(args: argparse.Namespace) -> int:
    """``rwrouter audit``: print the report; 0, 1 (router unreachable or refusing)."""

    if args.capture is not None:
        return _audit_capture(args)
    base = router_url(args.url, args.config)
    # The router ranks (and lists at most 1000 names per destination: top_capped says so).
    address = f"{base}/-/audit?top={args.top}&sort={args.sort}"
    request, context = router_request(address, args.http_config_file)
    try:
        with open_router(request, context) as response:
            report = json.load(response)
    except RedirectError as exc:
        print(f"rwrouter audit: {address} {exc}", file=sys.stderr)
        return 1
    except urllib.error.HTTPError as exc:
        reason = exc.read().decode(errors="replace").strip() or exc.reason
        print(f"rwrouter audit: {address} answered {exc.code}: {escape(reason)}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        hint = ""
        if isinstance(exc, urllib.error.URLError | ConnectionError):
            hint = " (is rwrouter running there? give --config FILE for its address, or --url)"
        print(f"rwrouter audit: cannot read {address}: {exc}{hint}", file=sys.stderr)
        return 1
    budgets = _budgets(f"{base}/-/status", args.http_config_file)
    _print(report, args, budgets)
    return 0


def _budgets(address: str, http_config_file: str | None) -> dict[str, Any]:
    """The series budgets of the router's ``GET /-/status`` (every worker's), by destination
    with a ``series_limit``: limit, active series, series over it by metric name (most
    first) and the counter of series limited; {} when it cannot be read (the audit is
    printed anyway)."""
    request, context = router_request(address, http_config_file)
    try:
        with open_router(request, context) as response:
            status = json.load(response)
    except (RedirectError, urllib.error.URLError, OSError, ValueError):
        return {}
    return {
        name: {
            "series_limit": d["series_limit"],
            "active_series": d.get("series_limit_active_series"),
            "series_over": d.get("series_over", []),
            "series_limited_total": d.get("series_limited_total"),
        }
        for name, d in status.get("destinations", {}).items()
        if d.get("series_limit") is not None
    }


def _budget_lines(budgets: dict[str, Any]) -> list[str]:
    """The series budgets as text: one line per destination, then its over series by name."""
    lines = []
    for name, b in budgets.items():
        lines.append(
            f"series budget {name}: {b['active_series'] or 0:,.0f} of {b['series_limit']:,.0f}"
            f" active series; over it (fallback or dropped), by metric name:"
            + ("" if b["series_over"] else " none")
        )
        lines += [f"  {metric}  {count:,.0f}" for metric, count in b["series_over"]]
    return lines


def _host_port(location: str) -> str:
    """``host:port`` of a redirect's target (the scheme's port when it names none), or the
    location as it came when it has no host."""
    parts = urllib.parse.urlsplit(location)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port that is not one
        return location
    return f"{parts.hostname}:{port}" if parts.hostname else location


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        fp.close()
        message = f"redirected to {_host_port(newurl)} (not followed)"
        raise RedirectError(message, location=newurl)


def open_router(
    request: urllib.request.Request, context: ssl.SSLContext | None
) -> http.client.HTTPResponse:
    """Send ``request`` (:func:`router_request`) and return the answer, within
    :data:`TIMEOUT` seconds, following no redirect: the credential is for the router only
    (``urllib.request.urlopen`` would follow it, ``Authorization`` included). Raises
    RedirectError for a 3xx with a Location, urllib.error.HTTPError for another answer that
    is not 2xx, URLError or OSError when the router cannot be reached."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context), _RefuseRedirects
    )
    response: http.client.HTTPResponse = opener.open(request, timeout=TIMEOUT)
    return response


def router_request(
    address: str, path: str | None
) -> tuple[urllib.request.Request, ssl.SSLContext | None]:
    """The request for ``address`` with the ``Authorization`` and the TLS context of the HTTP
    client configuration file ``path`` (None: none). Raises ConfigError for a bad file,
    OSError when it or a file it names cannot be read, CredentialsError for a secret file."""
    client = HTTPClientConfig()
    if path is not None:
        try:  # a regular file, bounded: a FIFO or /dev/zero is refused, not read
            text = read_regular(path, CONFIG_FILE_MAX_BYTES).decode("utf-8")
        except ValueError as exc:  # UnicodeDecodeError too
            raise ConfigError("--http.config.file", f"{path!r} {exc}") from None
        base_dir = os.path.dirname(os.path.abspath(path))
        client = parse_http_client_config(text, source=path, env=os.environ, base_dir=base_dir)
    authenticator = asyncio.run(authenticator_for(client, path="http_config"))
    headers = asyncio.run(authenticator.headers(url=address, body=b"", base={}))
    context = ssl_context_for(client.tls_config) if client.tls_config is not None else None
    return urllib.request.Request(address, headers=headers), context


def _print(
    report: dict[str, Any], args: argparse.Namespace, budgets: dict[str, Any] | None = None
) -> None:
    """The report as JSON (``--top`` names per destination by ``--sort``) or as tables; then
    the series ``budgets`` (:func:`_budgets`; JSON: ``series_budgets``), if any."""
    from rwrouter.audit import format_table, reranked

    if args.json:
        out = reranked(report, args.sort, args.top)
        print(json.dumps({**out, "series_budgets": budgets} if budgets else out, indent=2))
    else:
        table = format_table(report, sort=args.sort, top=args.top)  # metric names: outside data
        lines = table.split("\n") + _budget_lines(budgets or {})
        print("\n".join(map(escape, lines)), end="\n" if budgets else "")


def _audit_capture(args: argparse.Namespace) -> int:
    from rwrouter.audit.capture import CaptureError
    from rwrouter.audit.live import audit_capture
    from rwrouter.config import load_config_offline

    if args.config is None:
        print("rwrouter audit: --capture needs --config (the rules to apply)", file=sys.stderr)
        return 2
    config, _ = load_config_offline(args.config)  # counts only: no URL or credential used
    try:
        with open(args.capture, "rb") as stream:
            result = audit_capture(config, stream, top=None)
    except (OSError, CaptureError) as exc:
        print(f"rwrouter audit: cannot read {args.capture}: {exc}", file=sys.stderr)
        return 1
    reader = result.reader
    notes = [f"{result.requests:,} requests counted"]
    if result.skipped:
        notes.append(f"{result.skipped:,} not valid write requests, skipped")
    if reader.corrupt:
        notes.append(f"{reader.corrupt:,} records failed their checksum, skipped")
    if reader.torn:
        notes.append(
            "read up to an incomplete or unreadable record (a capture still being "
            "written, or a damaged file)"
        )
    print(f"rwrouter audit: {args.capture}: {'; '.join(notes)}", file=sys.stderr)
    _print(result.report, args)
    return 0


def cmd_capture(args: argparse.Namespace) -> int:
    """``rwrouter capture``: serve until --duration or a signal; print what was recorded."""
    import asyncio
    from pathlib import Path

    from rwrouter.audit.capture import CaptureError
    from rwrouter.server.capture import run_capture

    def listening(url: str) -> None:
        print(
            f"rwrouter capture: receiving on {url}/api/v1/write, recording to {args.output}",
            file=sys.stderr,
            flush=True,
        )

    try:
        summary = asyncio.run(
            run_capture(
                Path(args.output),
                listen_address=args.listen,
                duration=args.duration,
                max_bytes=args.max_bytes,
                on_listening=listening,
            )
        )
    except CaptureError as exc:
        print(f"rwrouter capture: {exc}", file=sys.stderr)
        return 1
    print(
        f"rwrouter capture: {summary.requests:,} requests recorded ({summary.bytes:,} bytes) "
        f"to {args.output}; {summary.refused:,} refused, {summary.discarded:,} not recorded "
        "(file full)",
        file=sys.stderr,
    )
    return 0
