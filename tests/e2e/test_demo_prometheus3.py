"""``rwrouter demo --prometheus PATH`` with a Prometheus 3: the sender writes remote write 2.0
(with each series' metadata) and rwrouter sends 2.0 to the self-hosted Prometheus 3, while the
workspace double keeps getting 1.0. One pipeline of one node, 1 s scrapes; bounded polls."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import re2  # type: ignore[import-untyped]
from botocore.auth import SigV4Auth  # type: ignore[import-untyped,unused-ignore]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped,unused-ignore]
from botocore.credentials import Credentials  # type: ignore[import-untyped,unused-ignore]

from rwrouter.demo.binaries import prometheus_version
from rwrouter.demo.configs import ALLOWLIST
from rwrouter.demo.fleet import DCGM_FIELDS, GPUS_PER_NODE
from rwrouter.demo.pipeline import (
    ACCESS_KEY,
    COMPARE_QUERY,
    REGION,
    SECRET_KEY,
    WORKSPACE_ID,
    DemoPipeline,
    run_demo,
)
from rwrouter.demo.summary import format_summary, names_of
from rwrouter.protocol import RW2_MESSAGE
from tests.support.peers import peer_binary
from tests.support.polling import wait_for

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(90)]

ALLOWED = re2.compile(ALLOWLIST)
ALLOWED_NAMES = {name for name, _, _ in DCGM_FIELDS if ALLOWED.fullmatch(name)}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoPipeline]:
    binary = peer_binary("prometheus")
    demo = DemoPipeline(
        workdir=tmp_path_factory.mktemp("demo3"),
        nodes=1,
        scrape_interval_s=1.0,
        prometheus=binary,
        rwrouter=f"{shlex.quote(sys.executable)} -m rwrouter",
        remote_write_2=True,
    )
    demo.start()
    try:
        yield demo
    finally:
        demo.stop()


def test_the_binary_is_a_prometheus_that_speaks_remote_write_2() -> None:
    version = prometheus_version(peer_binary("prometheus"))
    assert version is not None and version >= (3, 8)


def test_the_sender_writes_2_0_and_the_self_hosted_store_gets_2_0(
    pipeline: DemoPipeline,
) -> None:
    wanted = {name: GPUS_PER_NODE for name in ALLOWED_NAMES}
    wait_for(
        lambda: names_of(pipeline.workspace_series()) == wanted,
        timeout=45,
        what="every allowlisted DCGM series at the workspace double",
    )
    summary = wait_for(
        lambda: s if (s := pipeline.summary()).self_hosted_by_name else None,
        timeout=30,
        what="series at the self-hosted store",
    )
    router = summary.router
    assert router.requests_by_protocol.get("2.0", 0) > 0
    assert router.requests_by_protocol.get("1.0", 0) == 0  # the sender sends 2.0 only
    assert router.protocol_in_use == {
        "self-hosted": RW2_MESSAGE,
        "workspace": "prometheus.WriteRequest",
    }
    assert not set(summary.self_hosted_by_name) & ALLOWED_NAMES  # the workspace's only
    assert summary.rejections == {}  # the double (RW 1.0 only) refused nothing
    text = format_summary(summary)
    assert "self-hosted: remote write 2.0" in text and "2.0: " in text


def signed_get(url: str) -> tuple[int, dict[str, Any]]:
    """GET ``url`` signed with the demo's keys (botocore SigV4, service aps)."""
    request = AWSRequest(method="GET", url=url)
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "aps", REGION).add_auth(request)
    get = urllib.request.Request(url, headers=dict(request.headers.items()))
    try:
        with urllib.request.urlopen(get, timeout=10) as answer:
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"{}")


def test_the_workspace_answers_queries_signed_and_they_are_no_rejections(
    pipeline: DemoPipeline,
) -> None:
    url = pipeline.double.query_url(WORKSPACE_ID)
    assert pipeline.urls["workspace query (SigV4, service aps)"] == url
    # Spaces as %20 (botocore's encoding), not '+'.
    query = (
        f"{url}?{urllib.parse.urlencode({'query': COMPARE_QUERY}, quote_via=urllib.parse.quote)}"
    )

    def hosts() -> set[str] | None:
        status, payload = signed_get(query)
        assert status == 200, payload
        return {row["metric"]["Hostname"] for row in payload["data"]["result"]} or None

    assert len(wait_for(hosts, timeout=30, what="the DCGM query answered by the workspace")) == 1


def test_the_printed_compare_command_finds_parity(pipeline: DemoPipeline) -> None:
    """The command the demo prints, run as printed (its own rwrouter), once both stores hold
    a few scrapes of the query's family: every query answered, the same results (exit 0)."""
    command = shlex.split(pipeline.compare_command)
    assert command[:4] == [sys.executable, "-m", "rwrouter", "compare"]
    run = [*command, "--range", "30s", "--step", "1s"]
    run += ["--json", "--repeat", "2", "--timeout", "10s"]
    # A plain selector too: its series carry the sender's external labels in the workspace
    # only; the printed --external-label makes them compare equal (without it: differences).
    run += ["--query", 'DCGM_FI_DEV_GPU_UTIL{gpu="0"}']

    def parity() -> dict[str, Any] | None:
        # An --end of a few seconds ago (the default, 30 s ago, would need a minute of data).
        end = ["--end", f"{time.time() - 5:.3f}"]
        done = subprocess.run(run + end, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode in (0, 1), done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        return report if done.returncode == 0 else None

    report = wait_for(parity, timeout=60, interval=2, what="parity of the demo's compare query")
    aggregated, plain = report["queries"]
    assert aggregated["parity"]["equal"] and aggregated["parity"]["series_compared"] == 1
    assert plain["parity"]["equal"] and plain["parity"]["series_compared"] == 1  # one node
    assert aggregated["parity"]["points_compared"] > 0 and plain["parity"]["points_compared"] > 0
    assert "--external-label" in command


def test_unsigned_queries_are_query_rejections_not_write_rejections(
    pipeline: DemoPipeline,
) -> None:
    url = f"{pipeline.double.query_url(WORKSPACE_ID)}?query=up"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    refused.value.close()
    assert refused.value.code == 403
    summary = pipeline.summary()
    assert summary.rejections == {}
    assert summary.query_rejections.get("missing_auth", 0) >= 1
    assert "queries: " in format_summary(summary)


def test_a_signed_request_to_another_path_is_no_write_request(pipeline: DemoPipeline) -> None:
    """A signed probe of a path the workspace does not serve (the new user's buildinfo) gets
    403 Missing Authentication Token, as from AWS, and the summary counts it apart: not under
    the write requests' ``rejected:``."""
    base = pipeline.double.query_url(WORKSPACE_ID).removesuffix("/query")
    status, payload = signed_get(f"{base}/status/buildinfo")
    assert (status, payload) == (403, {"message": "Missing Authentication Token"})
    summary = pipeline.summary()
    assert summary.rejections == {} and summary.other_requests >= 1
    text = format_summary(summary)
    assert "rejected: none" in text and "; other requests: " in text


def test_the_audit_line_gives_the_url_then_a_command_that_runs(pipeline: DemoPipeline) -> None:
    """One line, as the demo prints it: what it is, the URL, then the ready command."""
    name = "audit (what each destination would cost)"
    line = f"  {name}: {pipeline.urls[name]}"
    assert pipeline.router is not None
    url = pipeline.router.url
    assert line == (
        f"  audit (what each destination would cost): {url}/-/audit  or: "
        f"{shlex.quote(sys.executable)} -m rwrouter audit --url {url}"
    )
    with urllib.request.urlopen(f"{url}/-/audit", timeout=10) as answer:
        assert answer.status == 200 and "destinations" in json.loads(answer.read())
    command = shlex.split(line.split("  or: ", 1)[1])
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "workspace" in done.stdout, done.stderr


def test_a_binary_that_is_no_prometheus_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "prometheus"
    fake.write_text("#!/bin/sh\necho not a prometheus\n")
    fake.chmod(0o755)
    assert prometheus_version(str(fake)) is None
    assert run_demo(duration=1, prometheus=str(fake), workdir=tmp_path / "w") == 2
    assert "prints no Prometheus version" in capsys.readouterr().err
