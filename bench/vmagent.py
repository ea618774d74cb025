"""The vmagent the benchmark runs: by default the one ``scripts/build-peers`` built (the version
``scripts/peers.txt`` pins, in the peers cache), else ``--vmagent PATH``. Its version line, the
flags its ``-help`` lists (a flag the runner passes must be listed: renamed flags fail the run
before it starts), and its own remote-write counters from ``/metrics``.

The peers cache is ``$RWROUTER_PEERS_DIR`` or ``${XDG_CACHE_HOME:-~/.cache}/rwrouter-peers``,
a binary ``<name>-<version>/<name>`` (the layout of tests/support/peers.py and
scripts/build-peers; tests/bench/test_vmagent.py checks the three agree).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PEERS_FILE = REPO / "scripts" / "peers.txt"
BUILD_HINT = "scripts/build-peers"


def pinned_version(name: str = "vmagent", peers_text: str | None = None) -> str:
    """The version ``scripts/peers.txt`` pins for peer ``name`` (e.g. "v1.151.0"). Raises
    KeyError when it is not listed."""
    text = PEERS_FILE.read_text() if peers_text is None else peers_text
    for line in text.splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#") and fields[0] == name:
            return fields[2]
    raise KeyError(f"{name} is not in {PEERS_FILE}")


def built_path(environ: Mapping[str, str] | None = None, name: str = "vmagent") -> Path:
    """Where ``scripts/build-peers`` puts the pinned ``name`` (it may not exist)."""
    env = os.environ if environ is None else environ
    if env.get("RWROUTER_PEERS_DIR"):
        cache = Path(env["RWROUTER_PEERS_DIR"])
    else:
        home = env.get("HOME") or str(Path.home())
        cache = Path(env.get("XDG_CACHE_HOME") or str(Path(home) / ".cache")) / "rwrouter-peers"
    return cache / f"{name}-{pinned_version(name)}" / name


def _output(argv: list[str]) -> str:
    """stdout + stderr of a short command (vmagent prints usage and version on either)."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return proc.stdout + proc.stderr


def version(path: Path) -> str:
    """The first line ``vmagent -version`` prints (e.g. ``vmagent-20261201-194337-tags-v1.151.0``),
    "" when it prints none (an unstamped build)."""
    lines = _output([str(path), "-version"]).strip().splitlines()
    return lines[0].strip() if lines else ""


def listed_flags(help_text: str) -> frozenset[str]:
    """The flag names (without the dash) a Go ``-help`` text lists: lines ``  -name [type]``."""
    return frozenset(re.findall(r"^  -([A-Za-z0-9_.]+)", help_text, flags=re.MULTILINE))


def help_flags(path: Path) -> frozenset[str]:
    """The flags ``path -help`` lists."""
    return listed_flags(_output([str(path), "-help"]))


def flag_name(flag: str) -> str:
    """``-remoteWrite.url=X`` -> ``remoteWrite.url``."""
    return flag.lstrip("-").split("=", 1)[0]


def unknown_flags(argv: list[str], listed: frozenset[str]) -> list[str]:
    """The flags of a vmagent argv (``argv[0]`` the binary) its ``-help`` does not list."""
    return [flag_name(a) for a in argv[1:] if flag_name(a) not in listed]


def parse_metrics(text: str) -> dict[str, Any]:
    """vmagent's own remote-write counters from its ``/metrics`` text, summed over URLs:
    ``requests_by_code`` (``vmagent_remotewrite_requests_total`` by ``status_code``: "2XX", or
    the code of a refused request, e.g. 400 when a sink refused a zstd body), ``retries``
    (``vmagent_remotewrite_retries_count_total``), ``packets_dropped``
    (``vmagent_remotewrite_packets_dropped_total``) and ``version`` (``vm_app_version``)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {"requests_by_code": {}, "retries": 0, "packets_dropped": 0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "vmagent_remotewrite_requests_total":
                code = s.labels.get("status_code", "?")
                out["requests_by_code"][code] = out["requests_by_code"].get(code, 0) + s.value
            elif s.name == "vmagent_remotewrite_retries_count_total":
                out["retries"] += s.value
            elif s.name == "vmagent_remotewrite_packets_dropped_total":
                out["packets_dropped"] += s.value
            elif s.name == "vm_app_version":
                out["version"] = s.labels.get("short_version") or s.labels.get("version")
    return out


def metrics_summary(vm: dict[str, Any]) -> list[str]:
    """Report lines for :func:`parse_metrics`' result (or an ``{"error": ...}``)."""
    if not vm:
        return []
    if "error" in vm:
        return [f"/metrics: {vm['error']}"]
    codes = ", ".join(f"{c}={n:,.0f}" for c, n in sorted(vm["requests_by_code"].items()))
    return [
        f"remote write requests sent by code: {codes or 'none'}; retries "
        f"{vm['retries']:,.0f}; packets dropped {vm['packets_dropped']:,.0f}"
    ]
