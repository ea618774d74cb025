"""The benchmark runner end to end in --smoke mode: real vmagent, real rwrouter, real sinks.

Asserts correctness only (both contenders delivered exactly the expected samples to A and B,
vmagent sent remote write 1.0 from its first request and retried nothing, the versions are
recorded, the table is well-formed, the run exits cleanly); never speed. The vmagent is the one
scripts/build-peers built: without it the test skips locally and fails when ``CI`` is set (CI
must not silently skip a real-peer test).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.peers import peer_binary, peers

REPO = Path(__file__).resolve().parents[2]
ROWS = (
    "samples per CPU-second",
    "CPU seconds",
    "wall seconds (load -> delivered)",
    "p50 latency ms",
    "p99 latency ms",
    "peak RSS MiB",
    "delivered A / expected",
    "delivered B / expected",
    "requests sent to A / B",
    "retries (503/429)",
    "ok",
)


@pytest.mark.timeout(240)
def test_smoke_run_delivers_everything(tmp_path: Path) -> None:
    vmagent = peer_binary("vmagent")
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["vmagent", "rwrouter"])
    assert lines[header].split()[-1] == "rwrouter/vmagent"
    body = lines[header + 1 : header + 1 + len(ROWS)]
    assert [line[: len(label)] for line, label in zip(body, ROWS, strict=True)] == list(ROWS)
    for line, label in zip(body, ROWS, strict=True):
        cells = line[len(label) :].split()
        assert len(cells) == 3, line  # vmagent, rwrouter, ratio
    ok_cells = body[ROWS.index("ok")][len("ok") :].split()
    assert ok_cells[:2] == ["yes", "yes"]
    assert any(line.startswith("floor (snappy decompress + compress):") for line in lines)

    report = json.loads(out.read_text())
    pinned = peers()["vmagent"].version
    assert report["peers"]["vmagent"]["path"] == vmagent
    assert pinned in report["peers"]["vmagent"]["version"]
    assert f"vmagent: {vmagent}: {report['peers']['vmagent']['version']}" in lines
    assert report["rwrouter_version"] and report["rwrouter_version"] != "unknown"
    vm_own = report["contenders"]["vmagent"]["router_metrics"]
    assert vm_own["version"] == pinned  # vm_app_version of the process that ran
    assert set(vm_own["requests_by_code"]) == {"2XX"}, vm_own  # no zstd refused by a sink
    assert (vm_own["retries"], vm_own["packets_dropped"]) == (0, 0)
    expected_a = report["workload"]["samples_a"]
    expected_b = report["workload"]["samples_b"]
    assert expected_a > 0 and expected_b > 0
    assert set(report["contenders"]) == {"vmagent", "rwrouter"}
    for name, m in report["contenders"].items():
        assert m["ok"], (name, m["error"], m["notes"])
        assert (m["delivered_a"], m["delivered_b"]) == (expected_a, expected_b), name
        assert m["driver"]["lost"] == 0
        assert m["driver"]["requests"] == report["workload"]["requests"]
        assert m["cpu_seconds"] > 0 and m["peak_rss_mib"] > 0
        assert m["exit_status"] is not None  # stopped, not left running
    # Every row of delivered A / B shows exactly expected/expected for both.
    delivered_rows = (
        ("delivered A / expected", expected_a),
        ("delivered B / expected", expected_b),
    )
    for label, exp in delivered_rows:
        cells = body[ROWS.index(label)][len(label) :].split()
        assert cells[:2] == [f"{exp}/{exp}"] * 2
