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
at most 11,000 points per series); the Prometheus web UI's default step (range / 250, at
least 1 s).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from rwrouter.config.model import Config, DestinationConfig
from rwrouter.errors import ConfigError

__all__ = [
    "MAX_POINTS",
    "Window",
    "choose_destinations",
    "parse_queries",
    "query_base",
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


def store_url(dest: DestinationConfig, override: str | None, flag: str) -> str:
    """The query API base of a store: ``override`` (trailing ``/`` removed), else derived
    from ``dest.url`` (:func:`query_base`). Raises ConfigError naming ``flag`` when neither
    gives one, or the override is not an http(s) URL."""
    if override is not None:
        parts = urlsplit(override)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(
                flag, f"expected an http(s) URL such as http://host:9090, got {override!r}"
            )
        return override.rstrip("/")
    base = query_base(dest.url)
    if base is None:
        raise ConfigError(
            flag,
            f"cannot derive the query URL of destination {dest.name!r} from {dest.url!r} "
            f"(not .../api/v1/write or .../api/v1/remote_write): give {flag} URL",
        )
    return base


def parse_queries(text: str) -> list[str]:
    """The queries of a file: one per line; blank lines and lines whose first non-blank
    character is ``#`` are skipped (a ``#`` later in a line is PromQL's own comment and stays
    in the query). Raises ValueError when there is none."""
    queries = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    if not queries:
        raise ValueError("no query in the file (one PromQL query per line, # comments)")
    return queries


@dataclass(frozen=True, slots=True)
class Window:
    """A range query's ``start`` and ``end`` (unix seconds) and ``step`` (seconds)."""

    start: float
    end: float
    step: float


def default_step(range_s: float) -> float:
    """The Prometheus web UI's step for a range: ``range / 250`` whole seconds, at least 1."""
    return float(max(1, math.floor(range_s / 250)))


def window(*, now: float, range_s: float, step_s: float | None, end: float | None) -> Window:
    """The window of every query: ending at ``end`` (unix seconds) or at ``now`` rounded
    down to a multiple of the step (as Grafana aligns it: both stores then evaluate at the
    same timestamps run after run), ``range_s`` long, every ``step_s`` seconds (default:
    :func:`default_step`). Raises ValueError for a range or step <= 0, or more than
    :data:`MAX_POINTS` points per series."""
    step = default_step(range_s) if step_s is None else step_s
    if range_s <= 0 or step <= 0:
        raise ValueError("--range and --step must be more than 0")
    if range_s / step + 1 > MAX_POINTS:
        raise ValueError(
            f"{range_s / step + 1:,.0f} points per series: Prometheus answers at most "
            f"{MAX_POINTS:,} (use a larger --step)"
        )
    stop = end if end is not None else math.floor(now / step) * step
    return Window(start=stop - range_s, end=stop, step=step)
