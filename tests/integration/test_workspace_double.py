"""The workspace double: SigV4 verification (checks 1-8), workspace checks (9-15), storage,
fault injection, inspection, thread and process runners. Requests are signed with our signer
(botocore) and, for the known-answer tests, by hand with hashlib/hmac."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import io
import json
import os
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

import aiohttp
import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]

from rwrouter.auth.credentials import FrozenCredentials, sign
from rwrouter.doubles import sigv4_verify
from rwrouter.doubles.workspace import (
    Fault,
    Key,
    Limits,
    ManualClock,
    WorkspaceDouble,
)
from rwrouter.doubles.workspace_runner import run_in_thread
from rwrouter.wire import remote_pb2, types_pb2

pytestmark = pytest.mark.timeout(30)

REGION = "us-east-1"
STATIC = FrozenCredentials("AKIDSTATIC", "static-secret")
TEMP = FrozenCredentials("ASIATEMP", "temp-secret", "temp-session-token")
Pairs = Sequence[tuple[str, str]]


def write_request(
    *series: tuple[Pairs, Sequence[tuple[int, float]]],
    metadata: Iterable[tuple[str, int, str]] = (),
) -> remote_pb2.WriteRequest:
    """Labels are encoded in the order given (so tests can send invalid ones)."""
    request = remote_pb2.WriteRequest()
    for labels, samples in series:
        ts = request.timeseries.add()
        for name, value in labels:
            ts.labels.add(name=name, value=value)
        for timestamp, sample_value in samples:
            ts.samples.add(value=sample_value, timestamp=timestamp)
    for name, kind, text in metadata:
        request.metadata.add(metric_family_name=name, type=kind, help=text)
    return request


def body_of(request: remote_pb2.WriteRequest) -> bytes:
    return bytes(snappy.compress(request.SerializeToString()))


def up(value: float = 1.0, *, ts_ms: int, job: str = "a") -> bytes:
    return body_of(write_request(((("__name__", "up"), ("job", job)), [(ts_ms, value)])))


def bits(value: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", value))[0])


def from_bits(raw: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", raw))[0])


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(time.time())  # botocore signs with the real clock


@pytest.fixture
async def make_double(clock: ManualClock) -> AsyncIterator[Callable[..., Any]]:
    started: list[WorkspaceDouble] = []

    async def make(limits: Limits | None = None) -> WorkspaceDouble:
        double = WorkspaceDouble(
            region=REGION,
            workspaces=("ws-1", "ws-2"),
            credentials={
                STATIC.access_key: (STATIC.secret_key, None, None),
                TEMP.access_key: Key(TEMP.secret_key, TEMP.token, clock() + 3600),
            },
            limits=limits,
            clock=clock,
        )
        await double.start()
        started.append(double)
        return double

    yield make
    for double in started:
        await double.stop()


@pytest.fixture
async def ws(make_double: Callable[..., Any]) -> WorkspaceDouble:
    double: WorkspaceDouble = await make_double()
    return double


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        yield session


async def post(
    http: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
) -> tuple[int, str]:
    skip = ("Accept", "Accept-Encoding")  # so only User-Agent and Content-Length are unsigned
    async with http.post(url, data=body, headers=headers, skip_auto_headers=skip) as answer:
        return answer.status, await answer.text()


def signed(
    url: str,
    body: bytes,
    *,
    credentials: FrozenCredentials = STATIC,
    region: str = REGION,
    service: str = "aps",
    headers: dict[str, str] | None = None,
) -> dict[str, str]:
    return sign(
        method="POST",
        url=url,
        headers=headers or {},
        body=body,
        credentials=credentials,
        region=region,
        service=service,
    )


async def send(
    http: aiohttp.ClientSession, ws: WorkspaceDouble, body: bytes, **kw: Any
) -> tuple[int, str]:
    url = kw.pop("url", ws.url("ws-1"))
    return await post(http, url, body, signed(url, body, **kw))


def now_ms(clock: ManualClock) -> int:
    return int(clock() * 1000)


# -- success ---------------------------------------------------------------------------------


@pytest.mark.parametrize("credentials", [STATIC, TEMP], ids=["static keys", "temporary keys"])
async def test_signed_request_is_accepted_and_stored(
    ws: WorkspaceDouble,
    http: aiohttp.ClientSession,
    clock: ManualClock,
    credentials: FrozenCredentials,
) -> None:
    ts = now_ms(clock)
    status, text = await send(http, ws, up(42.5, ts_ms=ts), credentials=credentials)
    assert (status, text) == (200, "")
    [series] = ws.find("ws-1", __name__="up", job="a")
    assert series.sample_list() == [(ts, bits(42.5))]
    last = ws.last_request
    assert last is not None and last.access_key == credentials.access_key
    expected_signed = {
        "content-encoding",
        "content-type",
        "host",
        "x-amz-date",
        "x-prometheus-remote-write-version",
    }
    if credentials.token:
        expected_signed.add("x-amz-security-token")
    assert set(last.signed_headers) == expected_signed
    unsigned = set(last.header_names) - set(last.signed_headers) - {"authorization"}
    assert unsigned == {"user-agent", "content-length"}
    assert ws.verified_signatures == 1


async def test_configured_headers_signed_tenant_header_never_sent(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    extra = {"X-Team": "gpu", "X-Scope-OrgID": "tenant-1", "X-Empty": ""}
    status, _ = await send(http, ws, up(ts_ms=now_ms(clock)), headers=extra)
    assert status == 200
    last = ws.last_request
    assert last is not None
    assert "x-team" in last.signed_headers
    assert "x-scope-orgid" not in last.header_names
    assert "x-empty" not in last.header_names


async def test_extra_unsigned_header_is_fine(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    body = up(ts_ms=now_ms(clock))
    headers = {**signed(ws.url(), body), "X-Added-After-Signing": "yes"}
    assert (await post(http, ws.url(), body, headers))[0] == 200


async def test_nan_payloads_survive_bit_for_bit(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    stale, prom_nan = 0x7FF0000000000002, 0x7FF8000000000001
    ts = now_ms(clock)
    series = ((("__name__", "gpu_util"),), [(ts, from_bits(prom_nan)), (ts + 1, from_bits(stale))])
    status, _ = await send(http, ws, body_of(write_request(series)))
    assert status == 200
    [stored] = ws.find("ws-1", __name__="gpu_util")
    assert stored.sample_list() == [(ts, prom_nan), (ts + 1, stale)]


async def test_histograms_exemplars_and_metadata_are_stored(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    ts = now_ms(clock)
    request = write_request(metadata=[("req_seconds", types_pb2.MetricMetadata.HISTOGRAM, "h")])
    series = request.timeseries.add()
    series.labels.add(name="__name__", value="req_seconds")
    histogram = series.histograms.add(count_int=3, sum=1.5, schema=0, timestamp=ts)
    histogram.positive_spans.add(offset=0, length=1)
    histogram.positive_deltas.append(3)
    exemplar = series.exemplars.add(value=0.25, timestamp=ts)
    exemplar.labels.add(name="trace_id", value="abc")
    assert (await send(http, ws, body_of(request)))[0] == 200
    [stored] = ws.find("ws-1", __name__="req_seconds")
    decoded = types_pb2.Histogram.FromString(stored.histograms[ts])
    assert (decoded.count_int, decoded.sum, list(decoded.positive_deltas)) == (3, 1.5, [3])
    assert [(e.labels, e.timestamp_ms) for e in stored.exemplars] == [((("trace_id", "abc"),), ts)]
    assert ws.metadata("ws-1")["req_seconds"].type == types_pb2.MetricMetadata.HISTOGRAM
    assert ws.sample_count("ws-1") == 1


# -- checks 1-11: nothing stored -------------------------------------------------------------


def _tamper_signed_headers(remove: str) -> Callable[[dict[str, str]], None]:
    def tamper(headers: dict[str, str]) -> None:
        auth = headers["Authorization"]
        start = auth.index("SignedHeaders=") + len("SignedHeaders=")
        end = auth.index(",", start)
        names = [n for n in auth[start:end].split(";") if n != remove]
        headers["Authorization"] = auth[:start] + ";".join(names) + auth[end:]

    return tamper


def _set(name: str, value: str) -> Callable[[dict[str, str]], None]:
    return lambda headers: headers.__setitem__(name, value)


def _drop(name: str) -> Callable[[dict[str, str]], None]:
    def drop(headers: dict[str, str]) -> None:
        del headers[name]

    return drop


# (id, sign kwargs, tamper headers, send body override, url workspace, clock shift s,
#  status, reason, message fragment)
REJECTIONS: list[tuple[Any, ...]] = [
    (
        "1 GET on the endpoint",
        {},
        None,
        None,
        "GET",
        0,
        403,
        "missing_auth",
        "Missing Authentication Token",
    ),
    (
        "2 unsigned",
        {},
        lambda h: h.clear(),
        None,
        "ws-1",
        0,
        403,
        "missing_auth",
        "Missing Authentication Token",
    ),
    (
        "3 other scheme",
        {},
        _set("Authorization", "Bearer abc"),
        None,
        "ws-1",
        0,
        403,
        "malformed_auth",
        "Unsupported AWS 'algorithm'",
    ),
    (
        "3 no signature",
        {},
        _set("Authorization", "AWS4-HMAC-SHA256 Credential=A/b/c/d/e, SignedHeaders=host"),
        None,
        "ws-1",
        0,
        403,
        "malformed_auth",
        "requires 'Signature' parameter",
    ),
    (
        "3 short credential",
        {},
        _set(
            "Authorization", "AWS4-HMAC-SHA256 Credential=AKID/x, SignedHeaders=host, Signature=00"
        ),
        None,
        "ws-1",
        0,
        403,
        "malformed_auth",
        "5 slash-delimited",
    ),
    (
        "4 host not signed",
        {},
        _tamper_signed_headers("host"),
        None,
        "ws-1",
        0,
        403,
        "unsigned_host_or_date",
        "'Host' or ':authority' must be a 'SignedHeader'",
    ),
    (
        "4 date not signed",
        {},
        _tamper_signed_headers("x-amz-date"),
        None,
        "ws-1",
        0,
        403,
        "unsigned_host_or_date",
        "X-Amz-Date",
    ),
    (
        "4 signed header missing",
        {"headers": {"X-Team": "gpu"}},
        _drop("X-Team"),
        None,
        "ws-1",
        0,
        403,
        "unsigned_host_or_date",
        "'x-team' is missing",
    ),
    (
        "5 wrong region",
        {"region": "eu-west-1"},
        None,
        None,
        "ws-1",
        0,
        403,
        "wrong_scope",
        "valid region, not 'eu-west-1'",
    ),
    (
        "5 wrong service",
        {"service": "execute-api"},
        None,
        None,
        "ws-1",
        0,
        403,
        "wrong_scope",
        "correct service: 'aps'",
    ),
    (
        "6 signature too old",
        {},
        None,
        None,
        "ws-1",
        400,
        403,
        "signature_expired",
        "Signature expired:",
    ),
    (
        "6 signature from the future",
        {},
        None,
        None,
        "ws-1",
        -400,
        403,
        "signature_expired",
        "Signature not yet current:",
    ),
    (
        "7 unknown key",
        {"credentials": FrozenCredentials("AKIDNOPE", "x")},
        None,
        None,
        "ws-1",
        0,
        403,
        "invalid_token",
        "security token included in the request is invalid",
    ),
    (
        "7 temporary key without token",
        {"credentials": FrozenCredentials("ASIATEMP", "temp-secret")},
        None,
        None,
        "ws-1",
        0,
        403,
        "invalid_token",
        "is invalid",
    ),
    (
        "7 wrong token",
        {"credentials": FrozenCredentials("ASIATEMP", "temp-secret", "other")},
        None,
        None,
        "ws-1",
        0,
        403,
        "invalid_token",
        "is invalid",
    ),
    (
        "8 wrong secret",
        {"credentials": FrozenCredentials("AKIDSTATIC", "bad")},
        None,
        None,
        "ws-1",
        0,
        403,
        "signature_mismatch",
        "does not match the signature you provided",
    ),
    (
        "8 tampered body",
        {},
        None,
        "TAMPER",
        "ws-1",
        0,
        403,
        "signature_mismatch",
        "The Canonical String for this request should have been",
    ),
    (
        "8 signed header changed",
        {},
        _set("Content-Type", "application/json"),
        None,
        "ws-1",
        0,
        403,
        "signature_mismatch",
        "content-type:application/json",
    ),
    (
        "8 signed host changed",
        {},
        _set("Host", "other.example:80"),
        None,
        "ws-1",
        0,
        403,
        "signature_mismatch",
        "host:other.example:80",
    ),
    (
        "9 unknown workspace",
        {},
        None,
        None,
        "ws-nope",
        0,
        404,
        "unknown_workspace",
        "Workspace not found: ws-nope",
    ),
    ("10 body too large", {}, None, "HUGE", "ws-1", 0, 413, "too_large", "too large"),
    ("11 not snappy", {}, None, "RAWPROTO", "ws-1", 0, 400, "bad_body", "snappy"),
    ("11 snappy framed format", {}, None, "FRAMED", "ws-1", 0, 400, "bad_body", "framed"),
    ("11 bad protobuf", {}, None, "BADPROTO", "ws-1", 0, 400, "bad_body", "proto"),
]


def _body_for(kind: str | None, good: bytes, clock: ManualClock) -> bytes:
    raw = write_request(((("__name__", "up"),), [(now_ms(clock), 1.0)])).SerializeToString()
    bodies: dict[str | None, bytes] = {
        None: good,
        "HUGE": os.urandom(1_048_577),
        "RAWPROTO": raw,
        "FRAMED": b"\xff\x06\x00\x00sNaPpY" + raw,
        "BADPROTO": bytes(snappy.compress(b"\x0a\xff\xff\xff")),
    }
    return bodies.get(kind, good)


@pytest.mark.parametrize(
    ("sign_kw", "tamper", "body_kind", "workspace", "shift", "status", "reason", "fragment"),
    [case[1:] for case in REJECTIONS],
    ids=[case[0] for case in REJECTIONS],
)
async def test_rejections_in_order_store_nothing(
    ws: WorkspaceDouble,
    http: aiohttp.ClientSession,
    clock: ManualClock,
    sign_kw: dict[str, Any],
    tamper: Callable[[dict[str, str]], None] | None,
    body_kind: str | None,
    workspace: str,
    shift: float,
    status: int,
    reason: str,
    fragment: str,
) -> None:
    url = ws.url("ws-1") if workspace == "GET" else ws.url(workspace)
    body = _body_for(body_kind, up(ts_ms=now_ms(clock)), clock)
    headers = signed(url, body, **sign_kw)
    if tamper is not None:
        tamper(headers)
    if body_kind == "TAMPER":
        body = up(2.0, ts_ms=now_ms(clock))
    clock.advance(shift)
    method = "GET" if workspace == "GET" else "POST"
    data = io.BytesIO(body)  # aiohttp warns of bytes over 1 MiB (HUGE) sent in one write
    async with http.request(method, url, data=data, headers=headers) as answer:
        got_status, text = answer.status, await answer.text()
    assert got_status == status, text
    message = json.loads(text)["message"] if got_status != 400 else text
    assert fragment in message
    assert ws.rejections == {reason: 1}
    assert ws.sample_count("ws-1") == 0 and ws.series("ws-1") == {}


async def test_signature_mismatch_shows_the_canonical_string(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    body = up(ts_ms=now_ms(clock))
    headers = signed(ws.url(), body, credentials=FrozenCredentials("AKIDSTATIC", "bad"))
    status, text = await post(http, ws.url(), body, headers)
    message = json.loads(text)["message"]
    assert status == 403
    expected_canonical = "\n".join(
        [
            "POST",
            "/workspaces/ws-1/api/v1/remote_write",
            "",
            "content-encoding:snappy",
            "content-type:application/x-protobuf",
            f"host:{ws.base_url.removeprefix('http://')}",
            f"x-amz-date:{headers['X-Amz-Date']}",
            "x-prometheus-remote-write-version:0.1.0",
            "",
            "content-encoding;content-type;host;x-amz-date;x-prometheus-remote-write-version",
            hashlib.sha256(body).hexdigest(),
        ]
    )
    assert f"'{expected_canonical}'" in message


async def test_expired_key_recovers_with_a_new_key(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    ws.expire_key(TEMP.access_key)
    body = up(ts_ms=now_ms(clock))
    status, text = await send(http, ws, body, credentials=TEMP)
    assert (status, json.loads(text)["message"]) == (
        403,
        "The security token included in the request is expired",
    )
    ws.add_key("ASIANEW", "new-secret", session_token="new-token", expires_at=clock() + 60)
    fresh = FrozenCredentials("ASIANEW", "new-secret", "new-token")
    assert (await send(http, ws, body, credentials=fresh))[0] == 200


# -- checks 12-15: partial acceptance --------------------------------------------------------

NAME = ("__name__", "gpu_util")
LONG = "x" * 2049

INVALID_SERIES = [
    ("missing metric name", (("job", "a"),), "sample missing metric name"),
    ("invalid metric name", (("__name__", "1bad"),), "sample invalid metric name"),
    ("unsorted labels", (NAME, ("job", "a"), ("gpu", "0")), "labels not sorted"),
    ("duplicate label name", (NAME, ("job", "a"), ("job", "b")), "duplicate label name"),
    ("empty label value", (NAME, ("job", "")), "empty label value"),
    ("invalid label name", (NAME, ("bad-name", "x")), "sample invalid label"),
    (
        "too many labels",
        (NAME, *((f"l{i:02d}", "v") for i in range(70))),
        'series has too many labels (actual: 71, limit: 70) series: \'{__name__="gpu_util"',
    ),
    ("label name too long", (NAME, ("n" * 1025, "v")), "label name too long"),
    ("label value too long", (NAME, ("job", LONG)), "label value too long"),
]


@pytest.mark.parametrize(
    ("labels", "fragment"), [c[1:] for c in INVALID_SERIES], ids=[c[0] for c in INVALID_SERIES]
)
async def test_12_invalid_series_rejected_valid_ones_kept(
    ws: WorkspaceDouble,
    http: aiohttp.ClientSession,
    clock: ManualClock,
    labels: Pairs,
    fragment: str,
) -> None:
    ts = now_ms(clock)
    good = ((NAME, ("job", "ok")), [(ts, 1.0)])
    body = body_of(write_request(good, (labels, [(ts, 2.0)])))
    status, text = await send(http, ws, body)
    assert status == 400 and fragment in text, text
    assert list(ws.series("ws-1")) == [(NAME, ("job", "ok"))]
    assert ws.rejections == {"invalid_series": 1}


ORDER_CASES = [
    ("older than the window", -120_000, 1.0, 400, "out of order sample"),
    ("inside the 60 s window", -30_000, 1.0, 200, ""),
    ("same timestamp same value", 0, 5.0, 200, ""),
    ("same timestamp other value", 0, 6.0, 400, "duplicate sample for timestamp"),
    ("too new", 3_600_000, 1.0, 400, "timestamp too new"),
    ("newer", 15_000, 1.0, 200, ""),
]


@pytest.mark.parametrize(
    ("offset_ms", "value", "status", "fragment"),
    [c[1:] for c in ORDER_CASES],
    ids=[c[0] for c in ORDER_CASES],
)
async def test_13_ordering_rules(
    ws: WorkspaceDouble,
    http: aiohttp.ClientSession,
    clock: ManualClock,
    offset_ms: int,
    value: float,
    status: int,
    fragment: str,
) -> None:
    ts = now_ms(clock)
    assert (await send(http, ws, up(5.0, ts_ms=ts)))[0] == 200
    got, text = await send(http, ws, up(value, ts_ms=ts + offset_ms))
    assert (got, fragment in text) == (status, True), text
    [series] = ws.series("ws-1").values()
    expected = (
        {ts: bits(5.0)}
        if status == 400 or offset_ms == 0
        else {ts: bits(5.0), ts + offset_ms: bits(value)}
    )
    assert series.samples == expected


BOUNDS_CASES = [
    ("older_than_the_bound", 3600.0, -3_601_000, 400),
    ("at_the_bound", 3600.0, -3_600_000, 200),
    ("inside_the_bound", 3600.0, -60_000, 200),
    ("off_by_default", 0.0, -86_400_000, 200),
]


@pytest.mark.parametrize(
    ("bound_s", "offset_ms", "status"),
    [c[1:] for c in BOUNDS_CASES],
    ids=[c[0] for c in BOUNDS_CASES],
)
async def test_13_out_of_bounds(
    make_double: Callable[..., Any],
    http: aiohttp.ClientSession,
    clock: ManualClock,
    bound_s: float,
    offset_ms: int,
    status: int,
) -> None:
    """Samples older than now - ``out_of_bounds_s`` (the head window; 0: off) are refused
    with 400 "out of bounds", Cortex's wording, even for a new series."""
    ws = await make_double(Limits(out_of_bounds_s=bound_s))
    ts = now_ms(clock) + offset_ms
    got, text = await send(http, ws, up(ts_ms=ts))
    assert got == status, text
    if status == 400:
        assert text.startswith(f"out of bounds. timestamp={ts}, series="), text
        assert ws.rejections == {"out_of_bounds": 1} and ws.sample_count("ws-1") == 0
    else:
        assert ws.sample_count("ws-1") == 1


async def test_14_ingestion_rate_limit_rejects_whole_request(
    make_double: Callable[..., Any], http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    ws = await make_double(Limits(ingestion_rate=2.0, ingestion_burst=3.0))
    ts = now_ms(clock)
    four = ((NAME,), [(ts + i, 1.0) for i in range(4)])
    status, text = await send(http, ws, body_of(write_request(four)))
    assert status == 429
    assert text == "ingestion rate limit (2) exceeded while adding 4 samples and 0 metadata"
    assert ws.sample_count("ws-1") == 0
    two = ((NAME,), [(ts + i, 1.0) for i in range(2)])
    body = body_of(write_request(two, metadata=[("gpu_util", 2, "GPU use")]))
    assert (await send(http, ws, body))[0] == 200
    clock.advance(1.0)  # refills 2 tokens
    assert (await send(http, ws, up(ts_ms=ts)))[0] == 200
    assert ws.sample_count("ws-1") == 3 and ws.rejections == {"rate_limited": 1}


@pytest.mark.parametrize(
    ("retry_after", "header"),
    [
        pytest.param(None, None, id="no Retry-After by default"),
        pytest.param(2.0, "2", id="Retry-After in seconds"),
        pytest.param(0.3, "1", id="a fraction rounds up to whole seconds"),
    ],
)
async def test_14_rate_limit_retry_after_and_what_it_counts(
    make_double: Callable[..., Any],
    http: aiohttp.ClientSession,
    clock: ManualClock,
    retry_after: float | None,
    header: str | None,
) -> None:
    """The rate limiter counts samples, exemplars and metadata (Cortex and Mimir
    distributors), recorded per request (``counted``); its 429 carries Retry-After when
    ``ingestion_retry_after`` is set."""
    limits = Limits(ingestion_rate=1.0, ingestion_burst=4.0, ingestion_retry_after=retry_after)
    ws = await make_double(limits)
    ts = now_ms(clock)
    request = write_request(((NAME,), [(ts, 1.0)]), metadata=[("gpu_util", 2, "GPU use")])
    request.timeseries[0].exemplars.add(value=1.0, timestamp=ts)
    body = body_of(request)
    assert (await send(http, ws, body))[0] == 200  # 1 sample + 1 exemplar + 1 metadata
    url = ws.url("ws-1")
    two = body_of(write_request(((NAME,), [(ts + 1, 1.0), (ts + 2, 1.0)])))
    skip = ("Accept", "Accept-Encoding")
    async with http.post(url, data=two, headers=signed(url, two), skip_auto_headers=skip) as got:
        assert got.status == 429
        assert got.headers.get("Retry-After") == header
    assert [(r.status, r.counted) for r in ws.requests] == [(200, 3), (429, 0)]
    assert ws.rejections == {"rate_limited": 1}


async def test_15_series_cap_keeps_existing_series(
    make_double: Callable[..., Any], http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    ws = await make_double(Limits(max_active_series=2))
    ts = now_ms(clock)
    series = [(((NAME[0], NAME[1]), ("gpu", str(i))), [(ts, 1.0)]) for i in range(3)]
    status, text = await send(http, ws, body_of(write_request(*series)))
    assert (status, text) == (400, "per-user series limit of 2 exceeded")
    assert len(ws.series("ws-1")) == 2
    more = ((NAME, ("gpu", "0")), [(ts + 1000, 2.0)])
    assert (await send(http, ws, body_of(write_request(more))))[0] == 200


async def test_first_failing_check_wins_between_12_and_13(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    ts = now_ms(clock)
    assert (await send(http, ws, up(ts_ms=ts)))[0] == 200
    stale = ((("__name__", "up"), ("job", "a")), [(ts - 600_000, 1.0)])
    invalid = ((("job", "x"),), [(ts, 1.0)])
    status, text = await send(http, ws, body_of(write_request(stale, invalid)))
    assert (status, text) == (400, "sample missing metric name")


# -- fault injection and inspection ---------------------------------------------------------


async def test_scripted_statuses_then_normal_service(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    ws.inject(
        Fault(429, '{"message":"Rate exceeded"}'),
        Fault(429),
        Fault(503, "busy", headers={"Retry-After": "2"}),
    )
    body = up(ts_ms=now_ms(clock))
    seen = []
    for _ in range(4):
        headers = signed(ws.url(), body)
        async with http.post(ws.url(), data=body, headers=headers) as answer:
            seen.append((answer.status, answer.headers.get("Retry-After")))
    assert seen == [(429, None), (429, None), (503, "2"), (200, None)]
    assert ws.sample_count("ws-1") == 1 and ws.rejections == {"fault": 3}
    assert ws.pending_faults() == 0


async def test_added_latency_delays_answers(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    ws.latency_s = 0.2
    started = time.monotonic()
    assert (await send(http, ws, up(ts_ms=now_ms(clock))))[0] == 200
    assert time.monotonic() - started >= 0.2


async def test_hanging_response_until_stopped(
    make_double: Callable[..., Any], http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    ws = await make_double()
    ws.inject(Fault(hang=True))
    body = up(ts_ms=now_ms(clock))
    pending = asyncio.create_task(post(http, ws.url(), body, signed(ws.url(), body)))
    for _ in range(200):  # poll until the double holds the request
        if ws.request_count:
            break
        await asyncio.sleep(0.01)
    assert ws.request_count == 1 and not pending.done()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(pending), 0.2)
    await ws.stop()
    with pytest.raises(aiohttp.ClientError):
        await asyncio.wait_for(pending, 5)
    assert ws.series("ws-1") == {}


OTHER_PATHS = [
    pytest.param("GET", "/workspaces/ws-1/api/v1/status/buildinfo", id="signed_buildinfo"),
    pytest.param("POST", "/api/v1/write", id="write_without_the_workspace"),
    pytest.param("POST", "/workspaces/ws-1/api/v1/remote_write/x", id="write_path_and_more"),
]


@pytest.mark.parametrize(("method", "path"), OTHER_PATHS)
async def test_other_paths_are_counted_apart_from_write_requests(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock, method: str, path: str
) -> None:
    """A signed request to a path the workspace does not serve gets what API Gateway answers
    for a route it lacks, 403 Missing Authentication Token, and is neither a write request
    nor a rejected one (a demo once showed a buildinfo probe as ``rejected: missing_auth=1``
    under the write requests)."""
    url, body = ws.base_url + path, b"" if method == "GET" else up(ts_ms=now_ms(clock))
    headers = sign(
        method=method,
        url=url,
        headers={},
        body=body,
        credentials=STATIC,
        region=REGION,
        service="aps",
    )
    async with http.request(method, url, data=body, headers=headers) as answer:
        status, reply = answer.status, await answer.json()
        error_type = answer.headers["x-amzn-ErrorType"]
    assert (status, reply) == (403, {"message": "Missing Authentication Token"})
    assert error_type == "MissingAuthenticationTokenException"
    assert (ws.request_count, ws.rejections, ws.query_count) == (0, {}, 0)
    assert ws.other_count == 1 and ws.others[-1].path == path
    async with http.get(f"{ws.base_url}/_double/state") as answer:
        state = await answer.json()
    assert (state["other_requests"], state["requests"], state["rejections"]) == (1, 0, {})


async def test_inspection_endpoint(
    ws: WorkspaceDouble, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    assert (await send(http, ws, up(ts_ms=now_ms(clock))))[0] == 200
    assert (await send(http, ws, up(ts_ms=now_ms(clock)), region="eu-west-1"))[0] == 403
    async with http.get(f"{ws.base_url}/_double/state") as answer:
        state = await answer.json()
    assert state["requests"] == 2 and state["verified_signatures"] == 1
    assert state["rejections"] == {"wrong_scope": 1}
    assert state["workspaces"]["ws-1"] == {"series": 1, "samples": 1, "metadata": 0}
    assert state["last_request"]["status"] == 403


# -- known answers: the verifier is checked without botocore -------------------------------

# AWS SigV4 test suite, "get-vanilla": fixed inputs and the published signature.
AKID, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
VANILLA_DATE = "20150830T123600Z"
VANILLA_SIGNATURE = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _hand_signature(*, canonical: str, amz_date: str, region: str, service: str) -> str:
    """SigV4 by hand, step by step from the AWS documentation."""
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    hashed = hashlib.sha256(canonical.encode()).hexdigest()
    to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashed}"
    k_date = _hmac(f"AWS4{SECRET}".encode(), amz_date[:8])
    k_signing = _hmac(_hmac(_hmac(k_date, region), service), "aws4_request")
    return hmac.new(k_signing, to_sign.encode(), hashlib.sha256).hexdigest()


def test_known_answer_get_vanilla() -> None:
    canonical = (
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
        "host;x-amz-date\n" + hashlib.sha256(b"").hexdigest()
    )
    by_hand = _hand_signature(
        canonical=canonical, amz_date=VANILLA_DATE, region="us-east-1", service="service"
    )
    assert by_hand == VANILLA_SIGNATURE
    headers = {"host": ["example.amazonaws.com"], "x-amz-date": [VANILLA_DATE]}
    assert (
        sigv4_verify.canonical_request(
            method="GET",
            raw_path="/",
            raw_query="",
            headers=headers,
            signed_headers=["host", "x-amz-date"],
            body=b"",
        )
        == canonical
    )
    auth = (
        f"AWS4-HMAC-SHA256 Credential={AKID}/20150830/us-east-1/service/aws4_request, "
        f"SignedHeaders=host;x-amz-date, Signature={VANILLA_SIGNATURE}"
    )
    verdict = sigv4_verify.verify(
        method="GET",
        raw_path="/",
        raw_query="",
        headers={**headers, "authorization": [auth]},
        body=b"",
        keys={AKID: sigv4_verify.Key(SECRET)},
        region="us-east-1",
        service="service",
        now_s=dt.datetime(2015, 8, 30, 12, 36, tzinfo=dt.UTC).timestamp(),
    )
    assert verdict == sigv4_verify.Verified(AKID, ("host", "x-amz-date"))


CANONICAL_URI_CASES = [
    ("root", "/", "/"),
    ("dot segments", "/a/./b/../c", "/a/c"),
    ("double slash", "/a//b", "/a/b"),
    ("trailing slash kept", "/a/b/", "/a/b/"),
    ("encoded again", "/a%20b", "/a%2520b"),
    ("tilde safe", "/~user", "/~user"),
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [c[1:] for c in CANONICAL_URI_CASES],
    ids=[c[0] for c in CANONICAL_URI_CASES],
)
def test_canonical_uri(raw: str, expected: str) -> None:
    assert sigv4_verify.canonical_uri(raw) == expected


def test_canonical_query_sorted_and_encoded() -> None:
    assert sigv4_verify.canonical_query("b=2&a=x y&a=1") == "a=1&a=x%20y&b=2"


async def test_hand_signed_post_is_accepted(
    make_double: Callable[..., Any], http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    ws = await make_double()
    ws.add_key(AKID, SECRET)
    clock.now = dt.datetime(2015, 8, 30, 12, 36, 30, tzinfo=dt.UTC).timestamp()
    body = up(ts_ms=now_ms(clock))
    host = ws.base_url.removeprefix("http://")
    lines = [
        "POST",
        "/workspaces/ws-1/api/v1/remote_write",
        "",
        "content-encoding:snappy",
        "content-type:application/x-protobuf",
        f"host:{host}",
        f"x-amz-date:{VANILLA_DATE}",
        "",
        "content-encoding;content-type;host;x-amz-date",
        hashlib.sha256(body).hexdigest(),
    ]
    signature = _hand_signature(
        canonical="\n".join(lines), amz_date=VANILLA_DATE, region=REGION, service="aps"
    )
    headers = {
        "Content-Encoding": "snappy",
        "Content-Type": "application/x-protobuf",
        "Host": host,
        "X-Amz-Date": VANILLA_DATE,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={AKID}/20150830/{REGION}/aps/aws4_request,"
        f" SignedHeaders=content-encoding;content-type;host;x-amz-date, Signature={signature}",
    }
    assert await post(http, ws.url(), body, headers) == (200, "")
    assert ws.sample_count("ws-1") == 1


# -- runners --------------------------------------------------------------------------------


def test_run_in_thread_serves_sync_callers() -> None:
    double = WorkspaceDouble(credentials={STATIC.access_key: Key(STATIC.secret_key)})
    with run_in_thread(double) as running:
        body = up(ts_ms=int(time.time() * 1000))
        headers = signed(double.url(), body)
        request = urllib.request.Request(double.url(), data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert answer.status == 200
        assert running.double.sample_count("ws-1") == 1
    assert double.request_count == 1


def test_module_entry_point_serves_until_terminated() -> None:
    command = [
        sys.executable,
        "-m",
        "rwrouter.doubles.workspace_runner",
        "--port",
        "0",
        "--region",
        REGION,
        "--workspace",
        "ws-9",
        "--access-key",
        "AKID",
        "--secret",
        "S",
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            first = process.stdout.readline()  # blocks at most until the timeout marker fires
            assert first.startswith("workspace ws-9: http://127.0.0.1:")
            url = first.split(": ", 1)[1].strip()
            state_url = url.split("/workspaces/")[0] + "/_double/state"
            with urllib.request.urlopen(state_url, timeout=5) as answer:
                assert json.load(answer)["workspaces"] == {
                    "ws-9": {"series": 0, "samples": 0, "metadata": 0}
                }
        finally:
            process.terminate()
            assert process.wait(timeout=10) == 0


# -- names the workspace refuses, and remote write 2.0 -----------------------------------------

UTF8_NAMES = [
    # (name, labels of the refused series, the whole message: Cortex's shapes)
    (
        "metric name with dots",
        (("__name__", "http.server.duration"), ("job", "a")),
        'sample invalid metric name: "http.server.duration"',
    ),
    ("metric name utf-8", (("__name__", "größe"),), 'sample invalid metric name: "größe"'),
    (
        "label name with a dot",
        (NAME, ("service.name", "api")),
        'sample invalid label: "service.name" metric "gpu_util{service.name=\\"api\\"}"',
    ),
    (
        "label name with a colon",
        (NAME, ("a:b", "x")),
        'sample invalid label: "a:b" metric "gpu_util{a:b=\\"x\\"}"',
    ),
]


@pytest.mark.parametrize(
    ("labels", "message"), [c[1:] for c in UTF8_NAMES], ids=[c[0] for c in UTF8_NAMES]
)
async def test_12_utf8_names_are_refused_with_cortex_messages(
    ws: WorkspaceDouble,
    http: aiohttp.ClientSession,
    clock: ManualClock,
    labels: Pairs,
    message: str,
) -> None:
    ts = now_ms(clock)
    good = ((NAME, ("job", "ok")), [(ts, 1.0)])
    status, text = await send(http, ws, body_of(write_request((labels, [(ts, 2.0)]), good)))
    assert (status, text) == (400, message)
    assert list(ws.series("ws-1")) == [(NAME, ("job", "ok"))]  # the valid series is stored
    assert ws.rejections == {"invalid_series": 1}
    assert ws.last_request is not None and ws.last_request.check == 12


def botocore_signed(url: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
    """Sign exactly ``headers`` (plus Host) with botocore: for a Content-Type our signer does
    not send to the workspace."""
    from botocore.auth import SigV4Auth  # type: ignore[import-untyped,unused-ignore]
    from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped,unused-ignore]
    from botocore.credentials import Credentials  # type: ignore[import-untyped,unused-ignore]

    request = AWSRequest(
        method="POST", url=url, data=body, headers={**headers, "Host": url.split("/")[2]}
    )
    SigV4Auth(Credentials(STATIC.access_key, STATIC.secret_key), "aps", REGION).add_auth(request)
    return {str(name): str(value) for name, value in request.headers.items()}


CONTENT_TYPES = [
    # (name, Content-Type, status)
    ("rw2", "application/x-protobuf;proto=io.prometheus.write.v2.Request", 415),
    (
        "rw2 spaced and quoted",
        'application/x-protobuf; proto="io.prometheus.write.v2.request"',
        415,
    ),
    ("rw1 named", "application/x-protobuf;proto=prometheus.WriteRequest", 200),
    ("rw1", "application/x-protobuf", 200),
]


@pytest.mark.parametrize(
    ("content_type", "status"), [c[1:] for c in CONTENT_TYPES], ids=[c[0] for c in CONTENT_TYPES]
)
async def test_11_remote_write_2_is_unsupported_media_type(
    ws: WorkspaceDouble,
    http: aiohttp.ClientSession,
    clock: ManualClock,
    content_type: str,
    status: int,
) -> None:
    body = up(ts_ms=now_ms(clock))
    headers = {
        "Content-Encoding": "snappy",
        "Content-Type": content_type,
        "X-Prometheus-Remote-Write-Version": "2.0.0" if status == 415 else "0.1.0",
    }
    got, text = await post(http, ws.url(), body, botocore_signed(ws.url(), body, headers))
    assert got == status, text
    if status == 415:
        assert json.loads(text)["message"].endswith(
            "the workspace accepts remote write 1.0 (prometheus.WriteRequest) only"
        )
        assert ws.sample_count("ws-1") == 0 and ws.verified_signatures == 1
        assert ws.rejections == {"unsupported_media_type": 1}
        assert ws.last_request is not None and ws.last_request.check == 11
    else:
        assert ws.sample_count("ws-1") == 1 and not ws.rejections
