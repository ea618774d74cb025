"""bench/vmagent.py and the runner's vmagent command line, without running vmagent: the flags
its -help lists, the flags the runner passes, its /metrics counters, the pinned version."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import contenders
from bench import vmagent as vm

# Shape of `vmagent -help` (Go's flag package): two spaces, the flag, its type, then the usage
# indented by a tab. Excerpt of v1.151.0's, cut to the flags the runner passes.
HELP_1_151 = """\
vmagent-20261201-194337-tags-v1.151.0
  -httpListenAddr array
    \tAddress to listen for incoming http requests.
  -loggerLevel string
    \tMinimum level of errors to log. Possible values: INFO, WARN, ERROR, FATAL, PANIC
  -memory.allowedPercent float
    \tAllowed percent of system memory VictoriaMetrics caches may occupy. (default 60)
  -remoteWrite.forcePromProto array
    \tWhether to force Prometheus remote write protocol for sending data
  -remoteWrite.maxRowsPerBlock int
    \tThe maximum number of samples to send in each block to remote storage. (default 10000)
  -remoteWrite.queues array
    \tThe number of concurrent queues to each -remoteWrite.url.
  -remoteWrite.tmpDataPath string
    \tPath to directory for storing pending data (default "vmagent-remotewrite-data")
  -remoteWrite.url array
    \tRemote storage URL to write data to. Example url: http://<host>:8428/api/v1/write
  -remoteWrite.urlRelabelConfig array
    \tOptional path to relabel configs for the corresponding -remoteWrite.url.
"""
HELP_OLD = HELP_1_151.replace("  -remoteWrite.forcePromProto array\n", "  -x.y bool\n")

FLAG_CASES = [
    ("current_forces_rw1", HELP_1_151, True, []),
    ("older_without_the_protocol_flag", HELP_OLD, False, []),
    (
        "renamed_flag_reported",
        HELP_1_151.replace("-remoteWrite.queues", "-remoteWrite.q"),
        True,
        ["remoteWrite.queues"],
    ),
]


@pytest.mark.parametrize(
    ("help_text", "forced", "unknown"), [c[1:] for c in FLAG_CASES], ids=[c[0] for c in FLAG_CASES]
)
def test_flags_passed_follow_the_help(help_text: str, forced: bool, unknown: list[str]) -> None:
    listed = vm.listed_flags(help_text)
    flags = contenders.vmagent_flags(listed)
    assert ("-remoteWrite.forcePromProto" in flags) is forced
    assert flags[:3] == [flag for flag, _ in contenders.VMAGENT_FLAGS]
    argv = contenders.vmagent_argv(
        Path("/bin/vmagent"),
        port=8429,
        workdir=Path("/w"),
        urls=("http://a/w", "http://b/w"),
        batch=10_000,
        flags=flags,
    )
    assert argv[:3] == [
        "/bin/vmagent",
        "-httpListenAddr=127.0.0.1:8429",
        "-remoteWrite.url=http://a/w",
    ]
    assert "-remoteWrite.maxRowsPerBlock=10000" in argv
    assert vm.unknown_flags(argv, listed) == unknown


def test_listed_flags_reads_flag_lines_only() -> None:
    listed = vm.listed_flags(HELP_1_151)
    assert "remoteWrite.url" in listed and "loggerLevel" in listed
    assert not any(name.startswith(("Whether", "Address")) for name in listed)
    assert len(listed) == HELP_1_151.count("\n  -")


EXPOSITION = """\
vmagent_remotewrite_requests_total{url="1:secret-url", status_code="2XX"} 3
vmagent_remotewrite_requests_total{url="1:secret-url", status_code="400"} 1
vmagent_remotewrite_requests_total{url="2:secret-url", status_code="2XX"} 2
vmagent_remotewrite_requests_total{url="2:secret-url", status_code="400"} 1
vmagent_remotewrite_retries_count_total{url="1:secret-url"} 1
vmagent_remotewrite_retries_count_total{url="2:secret-url"} 1
vmagent_remotewrite_packets_dropped_total{url="1:secret-url"} 0
vm_app_version{version="vmagent-20261201-194337-tags-v1.151.0", short_version="v1.151.0"} 1
vm_app_uptime_seconds 12
"""


def test_parse_metrics_sums_over_urls() -> None:
    got = vm.parse_metrics(EXPOSITION)
    assert got == {
        "requests_by_code": {"2XX": 5, "400": 2},
        "retries": 2,
        "packets_dropped": 0,
        "version": "v1.151.0",
    }
    assert vm.metrics_summary(got) == [
        "remote write requests sent by code: 2XX=5, 400=2; retries 2; packets dropped 0"
    ]
    assert vm.metrics_summary({"error": "GET x answered 0"}) == ["/metrics: GET x answered 0"]


PEERS_TEXT = """\
# name module version package tags
prometheus  github.com/prometheus/prometheus  v0.316.0  cmd/prometheus  remove_all_sd
vmagent  github.com/VictoriaMetrics/VictoriaMetrics  v1.151.0  app/vmagent  -
"""


@pytest.mark.parametrize(
    ("name", "version"),
    [("vmagent", "v1.151.0"), ("prometheus", "v0.316.0")],
    ids=["vmagent", "prometheus"],
)
def test_pinned_version(name: str, version: str) -> None:
    assert vm.pinned_version(name, PEERS_TEXT) == version


def test_pinned_version_of_an_unlisted_peer() -> None:
    with pytest.raises(KeyError, match="alloy"):
        vm.pinned_version("alloy", PEERS_TEXT)
