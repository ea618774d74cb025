"""What ``rwrouter compare`` asks, and where (pure): the two stores' query URLs from the
configuration, the queries of a file, the window of a range query.

The stores are two ``remote_write`` destinations of the configuration: the **workspace** is
the one with ``sigv4`` (its queries are signed with its credentials), the **self-hosted**
store the ``fallback: true`` one, else the only other destination with a URL. Each one's
query URL is its Prometheus API base (what Grafana's Prometheus data source and ``promtool
query`` take: ``http://prometheus:9090``, ``https://aps-workspaces.<region>.amazonaws.com/
workspaces/<id>``), to which ``/api/v1/query_range`` is appended. It is derived from the
remote write URL when that ends in ``/api/v1/remote_write`` (the managed workspace) or
``/api/v1/write`` (Prometheus's receiver); any other shape needs ``--self-hosted URL`` /
``--workspace URL``.

Sources: AWS "Amazon Managed Service for Prometheus HTTP APIs" (``RemoteWrite`` and
``QueryMetrics`` under ``/workspaces/<id>/api/v1/``); Prometheus HTTP API ("Range queries":
at most 11,000 points per series); the Prometheus web UI's default step (range / 250).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from rwrouter.config.model import Config, DestinationConfig
from rwrouter.config.values import redact_url
from rwrouter.errors import ConfigError

__all__ = [
    "MAX_POINTS",
    "Window",
    "check_base",
    "choose_destinations",
    "parse_queries",
    "query_base",
    "store_url",
    "window",
]

#: Remote write paths whose query API base is the path before them.
WRITE_SUFFIXES = ("/api/v1/remote_write", "/api/v1/write")
#: Prometheus refuses a range query of more points per series ("exceeded maximum resolution").
MAX_POINTS = 11_000


def query_base(url: str) -> str | None:
    """The Prometheus API base of a remote write ``url`` (scheme, host, the path before
    ``/api/v1/remote_write`` or ``/api/v1/write``; no query string), or None for another
    shape."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    for suffix in WRITE_SUFFIXES:
        if path.endswith(suffix):
            return urlunsplit((parts.scheme, parts.netloc, path[: -len(suffix)], "", ""))
    return None


def _pick(
    candidates: Sequence[DestinationConfig], name: str | None, role: str, flag: str
) -> DestinationConfig:
    if name is not None:
        for dest in candidates:
            if dest.name == name:
                return dest
        names = ", ".join(d.name for d in candidates) or "none"
        raise ConfigError(flag, f"no {role} destination named {name!r} (candidates: {names})")
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ConfigError("remote_write", f"no {role} destination in the configuration")
    names = ", ".join(d.name for d in candidates)
    raise ConfigError(flag, f"several {role} destinations ({names}): name one with {flag}")


def choose_destinations(
    config: Config, *, workspace: str | None = None, self_hosted: str | None = None
) -> tuple[DestinationConfig, DestinationConfig]:
    """The (workspace, self-hosted) destinations of ``config``: the destination named
    ``workspace`` (else the only one with ``sigv4``) and the one named ``self_hosted`` (else
    the ``fallback: true`` one, else the only other one). Shadow destinations are never
    stores. Raises ConfigError (naming the flag to use) when none or several fit."""
    real = [d for d in config.remote_write if not d.shadow]
    ws = _pick([d for d in real if d.sigv4 is not None], workspace, "sigv4", "--workspace-name")
    others = [d for d in real if d is not ws]
    if self_hosted is None and any(d.fallback for d in others):
        others = [d for d in others if d.fallback]
    elif self_hosted is None:
        others = [d for d in others if d.sigv4 is None]
    return ws, _pick(others, self_hosted, "self-hosted", "--self-hosted-name")


def check_base(url: str, flag: str) -> str:
    """``url`` (trailing ``/`` removed) if it is a usable Prometheus API base: http or https,
    a host (and a valid port), no ``user:password@`` (it would be shown in the report and the
    process list: use the destination's ``basic_auth``), no query string or fragment (the API
    path is appended to it). Raises ConfigError naming ``flag``; the message never shows a
    URL with an ``@`` and shows others :func:`~rwrouter.config.redact_url`-ed."""
    if "@" in url:
        raise ConfigError(
            flag,
            "a URL with user:password@ (an @) is refused, as it would be printed: "
            "use the destination's basic_auth",
        )
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise ConfigError(flag, f"not a valid URL: {shown!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(flag, f"expected an http(s) URL such as http://host:9090, got {shown!r}")
    if "?" in url or "#" in url:
        raise ConfigError(
            flag, f"a query string or fragment cannot take an API path after it: {shown!r}"
        )
    return url.rstrip("/")


def store_url(dest: DestinationConfig, override: str | None, flag: str) -> str:
    """The query API base of a store: ``override`` (:func:`check_base`), else derived from
    ``dest.url`` (:func:`query_base`). Raises ConfigError naming ``flag`` when neither gives
    one, the override is not a usable base, or the remote write URL has a query string or
    fragment (the query API would not get it: give ``flag``)."""
    if override is not None:
        return check_base(override, flag)
    base = query_base(dest.url)
    if base is None or "?" in dest.url or "#" in dest.url:
        raise ConfigError(
            flag,
            f"cannot derive the query URL of destination {dest.name!r} from "
            f"{redact_url(dest.url)!r} (not .../api/v1/write or .../api/v1/remote_write, "
            f"without a query string): give {flag} URL",
        )
    return check_base(base, flag)


def parse_queries(text: str) -> list[str]:
    """The queries of a file: one per line, lines ending at ``\\n`` (or ``\\r\\n``) only
    (not at ``\\v``, ``\\f``, ``\\x1c``, U+2028 or the other characters
    :meth:`str.splitlines` breaks at: a query holding one stays one query, which the store
    judges); a leading UTF-8 byte order mark is dropped; blank lines and lines whose first
    non-blank character is ``#`` are skipped (a ``#`` later in a line is PromQL's own comment
    and stays in the query).
    Raises ValueError when there is none."""
    lines = (line.strip() for line in text.removeprefix("\ufeff").split("\n"))
    queries = [line for line in lines if line and not line.startswith("#")]
    if not queries:
        raise ValueError("no query in the file (one PromQL query per line, # comments)")
    return queries


@dataclass(frozen=True, slots=True)
class Window:
    """A range query's ``start_ms`` and ``end_ms`` (ms since the epoch) and ``step_ms``
    (ms): whole milliseconds, Prometheus's resolution, so that they are sent exactly
    (:func:`seconds_text`). ``start``, ``end`` (unix seconds) and ``step`` (seconds) are the
    same as floats, for the report."""

    start_ms: int
    end_ms: int
    step_ms: int

    @property
    def start(self) -> float:
        return self.start_ms / 1000

    @property
    def end(self) -> float:
        return self.end_ms / 1000

    @property
    def step(self) -> float:
        return self.step_ms / 1000


def seconds_text(ms: int) -> str:
    """``ms`` (>= 0) as exact decimal seconds, as the query API takes times and steps:
    ``15``, ``0.5``, ``1700000000.123`` (never rounded, never an exponent)."""
    whole, frac = divmod(ms, 1000)
    return f"{whole}.{frac:03d}".rstrip("0").rstrip(".") if frac else str(whole)


#: The last second datetime can show (9999-12-31T23:59:59Z): the latest ``--end``.
LATEST_S = 253_402_300_799


#: Round steps (seconds) :func:`default_step` picks from: what dashboards offer.
ROUND_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)
#: How far back from now the default ``--end`` is (seconds): a sample reaches the
#: workspace after the sender's and rwrouter's batching and the workspace's ingestion, some
#: seconds; the newest points are not in both stores yet.
DEFAULT_LAG_S = 30.0


def default_step(range_s: float) -> float:
    """About 250 points per series, as the Prometheus web UI picks (``range / 250``), rounded
    up to a round step (:data:`ROUND_STEPS`; whole days beyond), so that a range that is a
    multiple of it (``1h``: 15 s; ``24h``: 10 min) gives a window of exactly that range."""
    wanted = range_s / 250
    for step in ROUND_STEPS:
        if step >= wanted:
            return float(step)
    return float(86400 * math.ceil(wanted / 86400))


def _ms(seconds: float, flag: str, low_ms: int, high_ms: int, expected: str) -> int:
    # Bounded before it is multiplied: 1e306 s would be an infinite number of ms.
    if not math.isfinite(seconds) or not low_ms - 1000 <= seconds * 1000 <= high_ms + 1000:
        raise ConfigError(flag, f"expected {expected}, got {seconds!r}")
    ms = round(seconds * 1000)
    if not low_ms <= ms <= high_ms:
        raise ConfigError(flag, f"expected {expected}, got {seconds!r}")
    return ms


def window(*, now: float, range_s: float, step_s: float | None, end: float | None) -> Window:
    """The window of every query: ``range_s`` long, every ``step_s`` seconds (default:
    :func:`default_step`), ending at ``end`` (unix seconds; default ``now`` less
    :data:`DEFAULT_LAG_S`); ``start`` and
    ``end`` are rounded down to multiples of the step, as Grafana and the Prometheus UI
    align them and as a Cortex-style query frontend (the managed workspace's) aligns them
    itself ("align queries with step"): both stores then evaluate at the same timestamps,
    run after run, and the window covers at least ``range_s``.

    Raises ConfigError naming the flag for a time that is not finite or outside 1970-9999
    (``--end``, and the start it gives with ``--range``), a range or step under 1 ms (whole
    ms: Prometheus's resolution), or more than :data:`MAX_POINTS` steps, which Prometheus
    refuses ("exceeded maximum resolution of 11,000 points per timeseries": web/api/v1/
    api.go, ``end.Sub(start)/step > 11000``)."""
    latest_ms = LATEST_S * 1000
    range_ms = _ms(range_s, "--range", 1, latest_ms, "a duration from 1ms to 8,000 years")
    step = default_step(range_s) if step_s is None else step_s
    step_ms = _ms(step, "--step", 1, latest_ms, "a duration from 1ms to 8,000 years")
    stop = now - DEFAULT_LAG_S if end is None else end
    stop_ms = _ms(stop, "--end", 0, latest_ms, "a time in 1970-9999")
    stop_ms -= stop_ms % step_ms
    start_ms = stop_ms - range_ms
    start_ms -= start_ms % step_ms
    if start_ms < 0:
        raise ConfigError("--range", f"{seconds_text(range_ms)}s before --end is before 1970")
    if (stop_ms - start_ms) // step_ms > MAX_POINTS:
        raise ConfigError(
            "--step",
            f"{(stop_ms - start_ms) // step_ms + 1:,} points per series: Prometheus answers "
            f"at most {MAX_POINTS:,} steps (use a larger --step)",
        )
    return Window(start_ms=start_ms, end_ms=stop_ms, step_ms=step_ms)
