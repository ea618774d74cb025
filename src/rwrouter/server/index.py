"""The plain-text answer of ``GET /`` (what ``curl`` gets; pure): the endpoints, and per
destination the figures of the status page in its words (``server/status.html``): what is
unsent ("N samples in M records", or "nothing: all sent"), the disk used against
``max_disk_bytes``, the queue in memory, each with its unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["index_text"]

_ENDPOINTS = (
    "GET /metrics",
    "GET /-/status (JSON; / in a browser: the status page)",
    "GET /-/audit (JSON: active series and cost of the audited destinations)",
    "GET /-/healthy",
    "GET /-/ready",
)
_RELOAD = "POST /-/reload (--web.enable-lifecycle)"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def index_text(status: Mapping[str, Any], *, lifecycle: bool) -> str:
    """The text, from ``status`` (the ``GET /-/status`` figures:
    :func:`rwrouter.metrics.status_snapshot`; its ``destinations`` by name). ``lifecycle``:
    whether ``POST /-/reload`` is served (``--web.enable-lifecycle``); listed only then."""
    lines = ["rwrouter", "", "POST /api/v1/write (also /api/v1/push): remote write 1.0 and 2.0", ""]
    lines += [*_ENDPOINTS, *((_RELOAD,) if lifecycle else ()), "", "destinations:"]
    destinations: Mapping[str, Mapping[str, Any]] = status.get("destinations", {})
    for name in sorted(destinations):
        d = destinations[name]
        disk = f"{size(d.get('queue_disk_bytes'))} / {size(d.get('queue_disk_capacity_bytes'))}"
        lines += [
            f"  {name}:",
            f"    unsent (queued, not sent yet): {unsent(d)}",
            f"    disk used / max_disk_bytes: {disk} (segment files: sent records stay on "
            "disk until their whole segment is sent)",
            f"    queue in memory: {size(d.get('queue_memory_bytes'))}",
        ]
    if not destinations:
        lines.append("  (none sending)")
    return "\n".join(lines) + "\n"


def unsent(d: Mapping[str, Any]) -> str:
    """``N samples in M records``, ``nothing: all sent``, or ``-`` (not known yet), as the
    status page's "unsent" column."""
    samples, records = d.get("unsent_samples"), d.get("unsent_records")
    if samples is None:
        return "-"
    if not samples and not records:
        return "nothing: all sent"
    records = records or 0
    return f"{samples:,.0f} samples in {records:,.0f} record{'' if records == 1 else 's'}"


def size(value: float | None) -> str:
    """Bytes with a binary unit (``76.7 KiB``, ``1.0 GiB``, ``0 B``) as the status page writes
    them; ``-`` when unknown."""
    if value is None:
        return "-"
    i = 0
    while value >= 1024 and i < len(_UNITS) - 1:
        value /= 1024
        i += 1
    return f"{value:,.1f} {_UNITS[i]}" if i else f"{value:,.0f} B"
