"""``rwrouter compare`` against two real Prometheus processes holding the same data: Debian's
2.42 as the self-hosted store, and a Prometheus 3 behind the workspace double
(:mod:`rwrouter.doubles.workspace`: it stores what it accepts there and answers the
workspace's query API from it, SigV4-verified) — with a deliberately missing family, a value
that differs, a workspace too slow for ``--timeout`` and credentials it refuses. The command
runs as a process, as an operator runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]

from rwrouter.auth.credentials import FrozenCredentials, sign
from rwrouter.doubles.workspace import Key, WorkspaceDouble
from rwrouter.doubles.workspace_backend import backend_config
from rwrouter.doubles.workspace_runner import ThreadedWorkspace, run_in_thread
from rwrouter.wire import remote_pb2
from tests.support.peers import peer_binary
from tests.support.prometheus import PrometheusProcess

pytestmark = pytest.mark.timeout(90)

REGION = "us-east-1"
WORKSPACE = "ws-compare"
KEY = FrozenCredentials("AKIDCOMPARE", "compare-secret")
STEP_MS = 15_000
ROOT = Path(__file__).resolve().parents[2]

Labels = tuple[tuple[str, str], ...]
Samples = dict[Labels, list[tuple[int, float]]]


def series() -> list[Labels]:
    out: list[Labels] = []
    for family in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"):
        for host in ("n1", "n2"):
            for gpu in ("0", "1"):
                out.append((("__name__", family), ("Hostname", host), ("gpu", gpu)))
    return out


#: A family the workspace holds with the sender's external label, its self-hosted copy
#: without it (the self-hosted store is the sender's own TSDB).
TENSOR = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
EXTERNAL = ("prometheus", "sender")


def tensor_series() -> list[Labels]:
    return [(("__name__", TENSOR), ("Hostname", "n1"), ("gpu", gpu)) for gpu in ("0", "1")]


def body_of(samples: Samples) -> bytes:
    request = remote_pb2.WriteRequest()
    for labels, points in samples.items():
        ts = request.timeseries.add()
        for name, text in sorted(labels):  # as Prometheus sends them
            ts.labels.add(name=name, value=text)
        for timestamp, value in points:
            ts.samples.add(timestamp=timestamp, value=value)
    return bytes(snappy.compress(request.SerializeToString()))


def write_signed(url: str, body: bytes) -> None:
    """A remote write 1.0 request to the double, signed as rwrouter signs them."""
    headers = sign(
        method="POST", url=url, headers={}, body=body, credentials=KEY, region=REGION, service="aps"
    )
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=10):
            pass
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"the double answered {exc.code}: {exc.read()!r}") from None


class Stores:
    """The self-hosted Prometheus and the workspace double (its Prometheus 3 behind it),
    holding the same series but for the DCGM_FI_DEV_FB_USED family (missing in the
    workspace) and one GPU_UTIL value of n2/gpu 1 (1 more in the workspace): 41 samples 15 s
    apart, the last one (``end``, unix seconds) a minute ago."""

    def __init__(self, self_hosted: str, threaded: ThreadedWorkspace, end: float) -> None:
        self.self_hosted, self.threaded, self.end = self_hosted, threaded, end
        self.double = threaded.double

    def queries_verified(self) -> int:
        return sum(r.reason == "" for r in self.double.queries)


@pytest.fixture(scope="module")
def stores() -> Iterator[Stores]:
    end_ms = (int(time.time() * 1000) // STEP_MS - 4) * STEP_MS
    points = [(end_ms - i * STEP_MS, float(i % 7) + 0.25) for i in range(40, -1, -1)]
    changed = [(t, v + 1.0 if t == end_ms - 10 * STEP_MS else v) for t, v in points]
    with (
        PrometheusProcess.start(backend_config()) as self_hosted,
        PrometheusProcess.start(backend_config(), binary=peer_binary("prometheus")) as backend,
    ):
        everything = {labels: points for labels in series() + tensor_series()}
        status, answer = self_hosted.write(body_of(everything))
        assert status == 204, answer
        double = WorkspaceDouble(
            region=REGION,
            workspaces=(WORKSPACE,),
            credentials={KEY.access_key: Key(KEY.secret_key)},
            backends={WORKSPACE: backend.url},
            backend_timeout_s=10.0,
        )
        threaded = run_in_thread(double)
        try:
            sent = {
                labels: changed if labels[1:] == (("Hostname", "n2"), ("gpu", "1")) else points
                for labels in series()
                if labels[0][1] == "DCGM_FI_DEV_GPU_UTIL"
            }
            sent.update({(*labels, EXTERNAL): points for labels in tensor_series()})
            write_signed(double.url(WORKSPACE), body_of(sent))
            yield Stores(self_hosted.url, threaded, end_ms / 1000)
        finally:
            threaded.stop()


def config(
    tmp_path: Path, stores: Stores, *, keep: str, secret: str = KEY.secret_key, drop: str = "x"
) -> Path:
    path = tmp_path / "rwrouter.yaml"
    path.write_text(
        f"""
remote_write:
  - name: workspace
    url: {stores.double.url(WORKSPACE)}
    sigv4: {{region: {REGION}, access_key: {KEY.access_key}, secret_key: {secret}}}
    write_relabel_configs:
      - {{source_labels: [__name__], regex: "{keep}", action: keep}}
      - {{regex: "{drop}", action: labeldrop}}
  - name: self-hosted
    url: {stores.self_hosted}/api/v1/write
"""
    )
    return path


def compare(stores: Stores, path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(name, None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rwrouter",
            "compare",
            "--config",
            str(path),
            "--range",
            "8m",
            "--step",
            "15s",
            "--end",
            f"{stores.end:.3f}",
            "--repeat",
            "3",
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


BOTH = "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED"
#: A ~28 KB query: as a GET its request line is over the 8 KB the workspace double (aiohttp)
#: reads, and it answers 400; compare POSTs it as a form, signed with the body's hash.
GPUS = "|".join(f"gpu-{i:05d}" for i in range(2800))
LONG = f'avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{{Hostname="n1", gpu=~"0|1|{GPUS}"}})'


@pytest.mark.parametrize(
    ("keep", "drop", "query", "code", "status", "parity"),
    [
        pytest.param(
            BOTH,
            "x",
            'avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{Hostname="n1"})',
            0,
            "parity",
            {"series_compared": 1, "points_compared": 33, "differing_series": 0},
            id="aggregation_equal",
        ),
        pytest.param(
            BOTH,
            "x",
            LONG,
            0,
            "parity",
            {"series_compared": 1, "points_compared": 33, "differing_series": 0},
            id="long_query_posted_and_signed",
        ),
        pytest.param(
            BOTH,
            "x",
            '{__name__=~"DCGM_FI_DEV_.*"}',
            1,
            "differences",
            {"series_compared": 4, "missing_in_workspace": 4, "differing_series": 1},
            id="missing_family_and_a_value",
        ),
        pytest.param(
            "DCGM_FI_DEV_GPU_UTIL",
            "x",
            'DCGM_FI_DEV_FB_USED{Hostname="n1"}',
            1,
            "no data",
            {"series_compared": 0, "not_migrated": 2, "missing_in_workspace": 0},
            id="family_not_migrated_is_no_data",
        ),
        pytest.param(
            BOTH,
            "x",
            'DCGM_FI_DEV_GPU_UTILL{Hostname="n1"}',
            1,
            "no data",
            {"series_compared": 0, "not_migrated": 0, "equal": True, "no_data": True},
            id="typo_is_no_data",
        ),
        pytest.param(
            "DCGM_FI_DEV_FB_USED",
            "x",
            'DCGM_FI_DEV_GPU_UTIL{Hostname="n1"}',
            1,
            "differences",
            {"not_migrated": 2, "unexpected_in_workspace": 2, "missing_in_self_hosted": 0},
            id="in_the_workspace_but_not_routed_there",
        ),
        pytest.param(
            BOTH,
            "gpu",
            'DCGM_FI_DEV_GPU_UTIL{Hostname="n1"}',
            1,
            "differences",
            {"collisions": 1, "series_compared": 0, "missing_in_workspace": 2},
            id="labeldrop_collision",
        ),
    ],
)
def test_compare(
    tmp_path: Path,
    stores: Stores,
    keep: str,
    drop: str,
    query: str,
    code: int,
    status: str,
    parity: dict[str, int],
) -> None:
    verified, refused = stores.queries_verified(), len(stores.double.query_rejections)
    path = config(tmp_path, stores, keep=keep, drop=drop)
    exit_code, report = compare(stores, path, "--query", query)
    (result,) = report["queries"]
    assert (exit_code, report["exit_code"], result["status"]) == (code, code, status), report
    assert {k: result["parity"][k] for k in parity} == parity
    for side in ("self_hosted", "workspace"):
        assert result[side]["answered"] == 3 and result[side]["p95_seconds"] > 0
    assert stores.queries_verified() - verified == 3  # every run signed and verified
    assert len(stores.double.query_rejections) == refused
    assert report["summary"].startswith("rwrouter compare ")


@pytest.mark.parametrize(
    ("query", "args", "code", "parity"),
    [
        pytest.param(
            TENSOR,
            (),
            1,
            {
                "missing_in_workspace": 2,
                "missing_in_self_hosted": 2,
                "labels_only_in_workspace": {"prometheus": "sender"},
            },
            id="without_the_flag_every_series_is_missing_with_a_hint",
        ),
        pytest.param(
            TENSOR,
            ("--external-label", "prometheus=sender"),
            0,
            {"series_compared": 2, "missing_in_workspace": 0, "labels_only_in_workspace": {}},
            id="plain_selector_equal",
        ),
        pytest.param(
            # Not rate(): the self-hosted 2.42 and the backend's Prometheus 3 evaluate range
            # selectors differently (3.x leaves out the sample at the range's left end).
            f"{TENSOR} * 2",
            ("--external-label", "prometheus=sender"),
            0,
            {"series_compared": 2, "missing_in_self_hosted": 0},
            id="no_name_result_keeps_the_label_in_the_workspace_only",
        ),
        pytest.param(
            f"avg({TENSOR})",
            ("--external-label", "prometheus=sender"),
            0,
            {"series_compared": 1},
            id="aggregation_has_none",
        ),
        pytest.param(
            TENSOR,
            ("--external-label", "prometheus=other"),
            1,
            {"series_compared": 0, "missing_in_workspace": 2},
            id="another_value_is_not_stripped",
        ),
    ],
)
def test_the_senders_external_labels(
    tmp_path: Path,
    stores: Stores,
    query: str,
    args: Sequence[str],
    code: int,
    parity: dict[str, Any],
) -> None:
    path = config(tmp_path, stores, keep=TENSOR)
    exit_code, report = compare(stores, path, "--query", query, *args)
    (result,) = report["queries"]
    assert (exit_code, {k: result["parity"][k] for k in parity}) == (code, parity), report


def test_compare_names_the_missing_family_and_the_value(tmp_path: Path, stores: Stores) -> None:
    _, report = compare(
        stores, config(tmp_path, stores, keep=BOTH), "--query", '{__name__=~"DCGM_FI_DEV_.*"}'
    )
    parity = report["queries"][0]["parity"]
    assert parity["families"]["DCGM_FI_DEV_FB_USED"]["missing_in_workspace"] == 4
    assert parity["families"]["DCGM_FI_DEV_GPU_UTIL"] == {
        "in_both": 4,
        "missing_in_workspace": 0,
        "missing_in_self_hosted": 0,
        "unexpected_in_workspace": 0,
        "colliding": 0,
        "differing": 1,
        "not_migrated": 0,
    }
    (difference,) = parity["examples"]["differences"]
    assert difference["series"] == 'DCGM_FI_DEV_GPU_UTIL{Hostname="n2", gpu="1"}'
    assert float(difference["workspace"]) == float(difference["self_hosted"]) + 1


@pytest.mark.parametrize(
    ("delay", "secret", "args", "error", "summary"),
    [
        pytest.param(
            3.0,
            KEY.secret_key,
            ("--timeout", "1s"),
            "timed out after 1s",
            "workspace timed out on 1 query",
            id="timeout",
        ),
        pytest.param(
            0.0,
            "wrong",
            (),
            "HTTP 403: error: The request signature",
            "workspace failed on 1 query",
            id="refused",
        ),
    ],
)
def test_a_store_that_does_not_answer_is_reported(
    tmp_path: Path,
    stores: Stores,
    delay: float,
    secret: str,
    args: Sequence[str],
    error: str,
    summary: str,
) -> None:
    stores.double.latency_s = delay
    try:
        code, report = compare(
            stores,
            config(tmp_path, stores, keep=BOTH, secret=secret),
            "--query",
            "count(DCGM_FI_DEV_GPU_UTIL)",
            "--repeat",
            "1",
            *args,
        )
    finally:
        stores.double.latency_s = 0.0
    (result,) = report["queries"]
    assert (code, result["status"], result["parity"]) == (3, "not compared", None)
    assert result["self_hosted"]["answered"] == 1
    assert result["workspace"]["answered"] == 0 and result["workspace"]["error"].startswith(error)
    assert report["summary"].endswith(summary)


def test_a_query_both_stores_refuse_is_a_usage_error(tmp_path: Path, stores: Stores) -> None:
    code, report = compare(
        stores, config(tmp_path, stores, keep=BOTH), "--query", "avg(", "--repeat", "1"
    )
    (result,) = report["queries"]
    assert (code, result["status"]) == (2, "bad query"), report
    for side in ("self_hosted", "workspace"):
        assert result[side]["error"].startswith("HTTP 400: bad_data: "), result[side]
    assert "bad query 1" in report["summary"]
