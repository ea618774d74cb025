"""``rwrouter audit``: what the audited destinations would cost — metric names ranked by active
series and samples per second, total active series against the workspace limit, projected
monthly ingestion cost (:mod:`rwrouter.audit`).

It reads ``GET /-/audit`` of a running router (``--url``; by default the listen address of
``--config``, else ``http://127.0.0.1:9250``), whose destinations with ``shadow: true`` (counted,
never sent) or ``audit: true`` (sent and counted) are counted as requests arrive.

Output: a table per destination (``--top`` names, sorted by ``--sort``), or ``--json`` (the
endpoint's JSON, ``--top`` names per destination; 0: all). Exit 0; 1 when the router cannot be
reached or answers with an error; 2 for a bad configuration file (usage).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:9250"
TIMEOUT = 30.0  # seconds to wait for the router's answer (it merges every worker's counts)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``audit`` command to the ``rwrouter`` subcommands."""
    from rwrouter.audit import SORT_KEYS

    audit = sub.add_parser(
        "audit",
        help="active series and monthly cost per metric name of the audited destinations",
        description="Read the audit of a running rwrouter (destinations with `shadow: true` or "
        "`audit: true`): metric names ranked by active series and samples/s, active series "
        "against the workspace limit, projected monthly ingestion cost.",
    )
    audit.add_argument("--url", help=f"the running router (default: the listen address of "
                                     f"--config, else {DEFAULT_URL})")  # fmt: skip
    audit.add_argument("--config", help="rwrouter's configuration (for its listen address)")
    audit.add_argument("--json", action="store_true", help="print the JSON report")
    audit.add_argument("--top", type=_count, default=20,
                       help="metric names per destination (default 20; 0: all)")  # fmt: skip
    audit.add_argument("--sort", choices=SORT_KEYS, default="series",
                       help="rank names by active series (default) or samples/s")  # fmt: skip
    audit.set_defaults(func=cmd_audit)


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def router_url(url: str | None, config_path: str | None) -> str:
    """The base URL to ask: ``url``, else the listen address of ``config_path`` (a wildcard
    host asked on 127.0.0.1), else :data:`DEFAULT_URL`. Raises ConfigError for a bad file."""
    if url:
        return url.rstrip("/")
    if config_path is None:
        return DEFAULT_URL
    from rwrouter.config import load_config

    server = load_config(config_path).server
    host = server.listen_host or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{server.listen_port}"


def cmd_audit(args: argparse.Namespace) -> int:
    """``rwrouter audit``: print the report; 0, 1 (router unreachable or refusing)."""
    from rwrouter.audit import format_table

    base = router_url(args.url, args.config)
    address = f"{base}/-/audit?top={args.top if args.json else 0}"
    try:
        with urllib.request.urlopen(address, timeout=TIMEOUT) as response:
            report = json.load(response)
    except urllib.error.HTTPError as exc:
        reason = exc.read().decode(errors="replace").strip() or exc.reason
        print(f"rwrouter audit: {address} answered {exc.code}: {reason}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"rwrouter audit: cannot read {address}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report, sort=args.sort, top=args.top), end="")
    return 0
