"""The benchmark runner end to end in --smoke mode: real vmagent, real rwrouter, real sinks.

Asserts correctness only (every contender - vmagent and rwrouter fed remote write 1.0,
rwrouter fed the same requests as remote write 2.0 - delivered exactly the expected samples to
A and B, the same samples by the sinks' digests, as remote write 1.0; every RW 2.0 answer
carried exact Written headers; vmagent sent remote write 1.0 from its first request and
retried nothing; the versions are recorded, the table is well-formed, the run exits cleanly);
never speed. The vmagent is the one scripts/build-peers built: without it the test skips
locally and fails when ``CI`` is set (CI must not silently skip a real-peer test).
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
    "request bytes per sample (snappy)",
    "delivered A / expected",
    "delivered B / expected",
    "content at the sinks",
    "requests sent to A / B",
    "Written headers (exact/2xx)",
    "retries (503/429)",
    "ok",
)
NAMES = ["vmagent", "rwrouter", "rwrouter-rw2"]
RW1_CONTENT_TYPE = "application/x-protobuf"


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
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == NAMES)
    assert lines[header].split()[3:] == ["rwrouter/vmagent", "rw2/rw1"]
    body = lines[header + 1 : header + 1 + len(ROWS)]
    assert [line[: len(label)] for line, label in zip(body, ROWS, strict=True)] == list(ROWS)
    cells = {label: line[len(label) :].split() for line, label in zip(body, ROWS, strict=True)}
    for label, row in cells.items():
        assert len(row) == 5, (label, row)  # three contenders, two ratios
    assert cells["ok"][:3] == ["yes"] * 3
    assert cells["content at the sinks"][:3] == ["same"] * 3
    assert any(line.startswith("floor (snappy decompress + compress") for line in lines)
    assert any(line.startswith("request bodies, bytes per sample: RW 1.0 ") for line in lines)
    assert any(line.startswith("load average 1/5/15 min: before ") for line in lines)

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
    requests = report["workload"]["requests"]
    assert set(report["contenders"]) == set(NAMES)
    for name, m in report["contenders"].items():
        assert m["ok"], (name, m["error"], m["notes"])
        assert (m["delivered_a"], m["delivered_b"]) == (expected_a, expected_b), name
        assert m["content"] == "same", name  # the sinks' sample digests
        assert m["sink_errors"] == 0, name
        assert set(m["sink_content_types"]) == {RW1_CONTENT_TYPE}, name  # A and B are RW 1.0
        assert m["driver"]["lost"] == 0
        assert m["driver"]["requests"] == requests
        assert m["driver"]["written_missing"] == m["driver"]["written_wrong"] == 0
        assert m["cpu_seconds"] > 0 and m["peak_rss_mib"] > 0
        assert m["exit_status"] is not None  # stopped, not left running
    rw2 = report["contenders"]["rwrouter-rw2"]
    assert rw2["input"] == "rw2"
    assert rw2["driver"]["message"] == "io.prometheus.write.v2.Request"
    assert rw2["driver"]["written_exact"] == requests  # every answer counted its samples
    assert rw2["router_metrics"]["requests_by_protocol"] == {"2.0": requests}
    assert report["contenders"]["rwrouter"]["router_metrics"]["requests_by_protocol"] == {
        "1.0": requests
    }
    assert report["workload_rw2"]["samples"] == report["workload"]["samples"]
    assert (
        report["workload_rw2"]["compressed_bytes_per_series"]
        < report["workload"]["compressed_bytes_per_series"]
    )
    # Every row of delivered A / B shows exactly expected/expected for both.
    delivered_rows = (
        ("delivered A / expected", expected_a),
        ("delivered B / expected", expected_b),
    )
    for label, exp in delivered_rows:
        assert cells[label][:3] == [f"{exp}/{exp}"] * 3
    assert cells["Written headers (exact/2xx)"][2] == f"{requests}/{requests}"
