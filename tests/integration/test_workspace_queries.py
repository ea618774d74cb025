"""The workspace double with a real backend Prometheus: what it accepts is stored there (and
only that), and the workspace's query API answers from it, SigV4-verified like the write path.

One backend Prometheus for the module (the Prometheus 3 the project builds, else Debian's),
each test with its own metric names; writes are signed by our signer (botocore), queries by
botocore's SigV4Auth directly (a query is no remote write request)."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from botocore.auth import SigV4Auth  # type: ignore[import-untyped,unused-ignore]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped,unused-ignore]
from botocore.credentials import Credentials  # type: ignore[import-untyped,unused-ignore]
from yarl import URL

from rwrouter.auth.credentials import FrozenCredentials, sign
from rwrouter.doubles.workspace import Key, Limits, ManualClock, WorkspaceDouble
from rwrouter.doubles.workspace_backend import backend_config
from rwrouter.wire import remote_pb2
from tests.support.peers import peer_path
from tests.support.prometheus import PrometheusProcess, free_port, prometheus_binary

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(30)]

REGION = "us-east-1"
KEY = FrozenCredentials("AKIDQUERY", "query-secret")
FORM = "application/x-www-form-urlencoded"


def backend_binary() -> str | None:
    """The Prometheus 3 of the peers cache when built, else None (Debian's, on PATH)."""
    built = peer_path("prometheus")
    return str(built) if os.access(built, os.X_OK) else None


@pytest.fixture(scope="module")
def backend() -> Iterator[PrometheusProcess]:
    binary = backend_binary() or prometheus_binary()  # skips (fails on CI) when neither
    with PrometheusProcess.start(backend_config(), binary=binary) as prom:
        yield prom


@pytest.fixture
async def make_double(
    backend: PrometheusProcess,
) -> AsyncIterator[Callable[..., Any]]:
    started: list[WorkspaceDouble] = []

    async def make(
        *, limits: Limits | None = None, url: str | None = None, clock: ManualClock | None = None
    ) -> WorkspaceDouble:
        double = WorkspaceDouble(
            clock=clock or ManualClock(time.time()),
            region=REGION,
            workspaces=("ws-1", "ws-2"),
            credentials={KEY.access_key: Key(KEY.secret_key)},
            limits=limits,
            backends={"ws-1": url or backend.url},
            backend_timeout_s=5.0,
        )
        await double.start()
        started.append(double)
        return double

    yield make
    for double in started:
        await double.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


def write_body(*series: tuple[str, dict[str, str], float], ts_ms: int) -> bytes:
    request = remote_pb2.WriteRequest()
    for name, labels, value in series:
        ts = request.timeseries.add()
        for label, label_value in sorted({"__name__": name, **labels}.items()):
            ts.labels.add(name=label, value=label_value)
        ts.samples.add(value=value, timestamp=ts_ms)
    return bytes(snappy.compress(request.SerializeToString()))


async def write(
    http: aiohttp.ClientSession, double: WorkspaceDouble, body: bytes, ws: str = "ws-1"
) -> tuple[int, str]:
    url = double.url(ws)
    headers = sign(
        method="POST", url=url, headers={}, body=body, credentials=KEY, region=REGION, service="aps"
    )
    skip = ("Accept", "Accept-Encoding")
    async with http.post(url, data=body, headers=headers, skip_auto_headers=skip) as answer:
        return answer.status, await answer.text()


def signed_query_headers(
    method: str,
    url: str,
    body: bytes,
    *,
    secret: str = KEY.secret_key,
    service: str = "aps",
    content_type: str = "",
) -> dict[str, str]:
    """SigV4 headers of a query (botocore, as Grafana's or awscurl's signer would)."""
    headers = {"Content-Type": content_type} if content_type else {}
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(Credentials(KEY.access_key, secret), service, REGION).add_auth(request)
    return {str(k): str(v) for k, v in request.headers.items()}


async def query(
    http: aiohttp.ClientSession,
    double: WorkspaceDouble,
    api: str,
    params: list[tuple[str, str]],
    *,
    method: str = "GET",
    ws: str = "ws-1",
    headers: dict[str, str] | None = None,
    **signing: Any,
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One query of ``/workspaces/<ws>/api/v1/<api>``; params in the query string (GET) or
    as a form (POST). ``headers=None``: signed with ``signing``; else sent as given."""
    base = f"{double.base_url}/workspaces/{ws}/api/v1/{api}"
    encoded = urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
    url, body = (f"{base}?{encoded}", b"") if method == "GET" else (base, encoded.encode())
    if headers is None:
        kind = FORM if method == "POST" else ""
        headers = signed_query_headers(method, url, body, content_type=kind, **signing)
    async with http.request(
        method, URL(url, encoded=True), data=body or None, headers=headers
    ) as answer:
        text = await answer.text()
        return answer.status, json.loads(text) if text else {}, dict(answer.headers)


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize(
    ("method", "api", "params", "expected"),
    [
        pytest.param("GET", "query", [("query", "q_gpu_util")], {"query"}, id="query GET"),
        pytest.param("POST", "query", [("query", "q_gpu_util")], {"query"}, id="query POST form"),
        pytest.param(
            "GET",
            "query_range",
            [("query", "q_gpu_util"), ("start", "{start}"), ("end", "{end}"), ("step", "1")],
            {"query"},
            id="query_range GET",
        ),
        pytest.param(
            "POST",
            "series",
            [("match[]", "q_gpu_util"), ("start", "{start}"), ("end", "{end}")],
            {"series"},
            id="series POST form",
        ),
        pytest.param("GET", "labels", [], {"labels"}, id="labels GET"),
        pytest.param("GET", "label/node/values", [], {"values"}, id="label values GET"),
    ],
)
async def test_a_signed_write_is_queryable_through_the_workspace(
    make_double: Callable[..., Any],
    http: aiohttp.ClientSession,
    method: str,
    api: str,
    params: list[tuple[str, str]],
    expected: set[str],
) -> None:
    double = await make_double()
    ts = now_ms()
    body = write_body(
        ("q_gpu_util", {"node": "gpu-1"}, 87.5), ("q_gpu_util", {"node": "gpu-2"}, 12.0), ts_ms=ts
    )
    assert await write(http, double, body) == (200, "")
    window = {"start": str(ts / 1000 - 60), "end": str(ts / 1000 + 60)}
    filled = [(k, v.format(**window)) for k, v in params]
    status, payload, headers = await query(http, double, api, filled, method=method)
    assert status == 200, payload
    assert payload["status"] == "success"
    data = payload["data"]
    if expected == {"query"}:
        result = data["result"]
        values = {row["metric"]["node"]: row.get("value") or row["values"][-1] for row in result}
        assert {node: float(v[1]) for node, v in values.items()} == {
            "gpu-1": 87.5,
            "gpu-2": 12.0,
        }
    elif expected == {"series"}:
        assert {s["node"] for s in data} == {"gpu-1", "gpu-2"}
    elif expected == {"labels"}:
        assert {"__name__", "node"} <= set(data)
    else:
        assert {"gpu-1", "gpu-2"} <= set(data)
    assert "x-amzn-RequestId" in headers
    assert double.queries[-1].status == 200 and double.query_rejections == {}
    assert double.rejections == {}  # queries are not write requests


@pytest.mark.parametrize(
    ("how", "status", "reason", "message"),
    [
        pytest.param(
            "unsigned", 403, "missing_auth", "Missing Authentication Token", id="unsigned"
        ),
        pytest.param(
            "wrong secret",
            403,
            "signature_mismatch",
            "The request signature we calculated does not match",
            id="badly signed",
        ),
        pytest.param(
            "wrong service", 403, "wrong_scope", "scoped to correct service", id="wrong service"
        ),
        pytest.param(
            "POST label values",
            403,
            "missing_auth",
            "Missing Authentication Token",
            id="POST label values",
        ),
        pytest.param("unknown workspace", 404, "unknown_workspace", "ws-9", id="unknown workspace"),
        pytest.param(
            "no backend", 501, "no_backend", "has no backend", id="workspace without backend"
        ),
        pytest.param(  # the signature first: an unsigned request learns no workspace
            "no backend, unsigned",
            403,
            "missing_auth",
            "Missing Authentication Token",
            id="workspace without backend, unsigned",
        ),
        pytest.param(
            "no backend, wrong secret",
            403,
            "signature_mismatch",
            "The request signature we calculated does not match",
            id="workspace without backend, badly signed",
        ),
    ],
)
async def test_a_query_that_fails_a_check_is_refused(
    make_double: Callable[..., Any],
    http: aiohttp.ClientSession,
    how: str,
    status: int,
    reason: str,
    message: str,
) -> None:
    double = await make_double()
    params = [("query", "q_refused")]
    ws, method, api = "ws-1", "GET", "query"
    signing: dict[str, Any] = {}
    headers: dict[str, str] | None = None
    if how == "unsigned":
        headers = {}
    elif how == "wrong secret":
        signing["secret"] = "not-the-secret"
    elif how == "wrong service":
        signing["service"] = "execute-api"
    elif how == "POST label values":
        method, api, params = "POST", "label/node/values", []
    elif how == "unknown workspace":
        ws = "ws-9"
    else:
        ws = "ws-2"
        headers = {} if how.endswith("unsigned") else None
        signing = {"secret": "not-the-secret"} if how.endswith("secret") else {}
    answer = await query(
        http, double, api, params, method=method, ws=ws, headers=headers, **signing
    )
    assert (answer[0], answer[1]["message"][: len(message) + 200].count(message)) == (status, 1)
    assert answer[2]["x-amzn-ErrorType"]
    assert double.query_rejections == {reason: 1}
    assert double.rejections == {} and double.request_count == 0


async def test_only_what_the_double_accepted_reaches_the_backend(
    make_double: Callable[..., Any], http: aiohttp.ClientSession, backend: PrometheusProcess
) -> None:
    # Burst 2: the first request (2 samples) passes, the second is refused whole (429).
    clock = ManualClock(time.time())  # botocore signs with the real clock
    double = await make_double(limits=Limits(ingestion_rate=1, ingestion_burst=2), clock=clock)
    ts = now_ms()
    ok = write_body(("q_kept", {"n": "1"}, 1.0), ("q_kept", {"n": "2"}, 2.0), ts_ms=ts)
    assert (await write(http, double, ok))[0] == 200
    refused = write_body(("q_rate_limited", {"n": "1"}, 3.0), ts_ms=ts)
    assert (await write(http, double, refused))[0] == 429
    # A request with an invalid series: 400, its valid series stored (and in the backend).
    partly = request_with_invalid_series(ts)
    clock.advance(5)  # the bucket refills (within the 300 s signature skew)
    status, text = await write(http, double, partly)
    assert status == 400 and "sample has empty label value" in text
    names = {
        row["metric"]["__name__"]
        for row in backend.query('{__name__=~"q_(kept|rate_limited|partly)"}')
    }
    assert names == {"q_kept", "q_partly"}
    [partly_row] = backend.query("q_partly")
    assert partly_row["metric"] == {"__name__": "q_partly", "valid": "yes"}
    assert double.backends["ws-1"].writes == 2


async def test_the_state_counts_the_samples_written_to_the_backend(
    make_double: Callable[..., Any], http: aiohttp.ClientSession, backend: PrometheusProcess
) -> None:
    """``/_double/state``'s figure of a backend is the samples written to it (it once said
    ``series`` for the series of every write summed: the demo's sample count)."""
    double = await make_double()
    ts = now_ms()
    request = remote_pb2.WriteRequest()
    for n, points in (("1", (ts - 1000, ts)), ("2", (ts,))):
        series = request.timeseries.add()
        series.labels.add(name="__name__", value="q_points")
        series.labels.add(name="n", value=n)
        for at in points:
            series.samples.add(value=1.0, timestamp=at)
    assert await write(http, double, bytes(snappy.compress(request.SerializeToString()))) == (
        200,
        "",
    )
    async with http.get(f"{double.base_url}/_double/state") as answer:
        state = await answer.json()
    assert state["backends"] == {"ws-1": {"url": backend.url, "writes": 1, "samples": 3}}
    assert state["workspaces"]["ws-1"]["samples"] == 3


def request_with_invalid_series(ts_ms: int) -> bytes:
    request = remote_pb2.WriteRequest()
    for valid in ("yes", ""):  # an empty label value is refused (check 12)
        series = request.timeseries.add()
        series.labels.add(name="__name__", value="q_partly")
        series.labels.add(name="valid", value=valid)
        series.samples.add(value=5.0, timestamp=ts_ms)
    return bytes(snappy.compress(request.SerializeToString()))


async def test_a_backend_that_is_down_gives_aws_style_errors(
    make_double: Callable[..., Any], http: aiohttp.ClientSession
) -> None:
    double = await make_double(url=f"http://127.0.0.1:{free_port()}")  # nothing listens
    status, payload, headers = await query(http, double, "query", [("query", "up")])
    assert status == 503
    assert headers["x-amzn-ErrorType"] == "ServiceUnavailableException"
    assert payload["message"].startswith("the double's backend Prometheus did not answer")
    body = write_body(("q_down", {}, 1.0), ts_ms=now_ms())
    status, text = await write(http, double, body)
    assert status == 503 and "send again" in text  # retryable: the sender keeps it
    assert double.rejections == {"backend_unavailable": 1}
    assert double.query_rejections == {"backend_unavailable": 1}


@pytest.mark.parametrize(
    ("cap", "status", "rejections"),
    [
        pytest.param(64 << 20, 200, {}, id="within the cap: as the backend answers"),
        pytest.param(300, 422, {"too_large": 1}, id="over the cap: 422, not buffered"),
    ],
)
async def test_an_answer_over_the_cap_is_refused_as_the_workspace_does(
    make_double: Callable[..., Any],
    http: aiohttp.ClientSession,
    cap: int,
    status: int,
    rejections: dict[str, int],
) -> None:
    double = await make_double(limits=Limits(max_query_answer_bytes=cap))
    ts = now_ms()
    nodes = [("q_big_answer", {"node": f"gpu-{i}"}, float(i)) for i in range(20)]
    assert await write(http, double, write_body(*nodes, ts_ms=ts)) == (200, "")
    answer = await query(
        http, double, "query", [("query", "q_big_answer"), ("time", str(ts / 1000))]
    )
    assert (answer[0], double.query_rejections) == (status, rejections)
    if status == 200:
        assert len(answer[1]["data"]["result"]) == 20
    else:
        assert answer[1] == {
            "status": "error",
            "errorType": "execution",
            "error": "expanding series: the query hit the aggregated data size limit "
            f"(limit: {cap} bytes)",
        }
    assert (double.query_count, double.queries[-1].status) == (1, status)
