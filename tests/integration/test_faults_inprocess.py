"""Delivery guarantees under faults, with the router in-process (issue "Delivery guarantees").

The router runs as :class:`RouterServer` (``start_router``) in the test's loop, sending to real
aiohttp servers on 127.0.0.1: the SigV4-verifying workspace double, the capture server and the
faulty peers of :mod:`tests.support.faults`. Delivery is counted by unique (label set,
timestamp) pairs, so a sample sent twice is counted once and a lost one is always seen.

- a destination that accepts connections and never answers: timeouts and retries, while the
  other destination and the receive side keep their latency; everything arrives once it answers;
- temporary credentials that expire mid-run (credential_process, web identity with moto's
  STS): refreshed, later requests signed with the new key, nothing lost;
- requests of 20,000 series with 200-byte label values: every request to the workspace within
  its size limit, or split after a 413, and what it stores is exactly the input;
- a poison series refused with 400 lands alone in the dead-letter store; a destination
  answering 503 beyond ``max_retry_duration`` sends the batch there too, and the queue moves on.
"""

from __future__ import annotations

import base64
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from rwrouter.auth.credentials import open_source
from rwrouter.deadletter.store import DeadLetter, DeadLetterStore, dead_letter_dir
from rwrouter.doubles.workspace import Key, Limits, WorkspaceDouble
from rwrouter.server.runner import RouterServer
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.capture import CaptureServer
from tests.support.faults import (
    BlackholeProxy,
    Issued,
    Point,
    Sink,
    SizeRecordingDouble,
    StsRecorder,
    capture_points,
    double_points,
    points,
)
from tests.support.series import Series, build_body, decode

pytestmark = pytest.mark.timeout(30)

ACCESS_KEY, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
STATIC_SIGV4 = f"{{region: us-east-1, access_key: {ACCESS_KEY}, secret_key: '{SECRET}'}}"
ROLE_ARN = "arn:aws:iam::123456789012:role/rwrouter-writer"
T0 = 1_700_000_000_000  # ms; the double refuses only timestamps over 10 min in its future


# -- fixtures and helpers -------------------------------------------------------------------


@pytest.fixture
async def double() -> AsyncIterator[WorkspaceDouble]:
    ws = WorkspaceDouble(credentials={ACCESS_KEY: Key(SECRET)})
    await ws.start()
    yield ws
    await ws.stop()


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    server = Sink()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An AWS environment with nothing in it: no keys, empty files, no instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    (tmp_path / "aws-config").write_text("")
    (tmp_path / "aws-credentials").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


def gpu_series(step: int, count: int = 20) -> list[Series]:
    """``count`` series of one scrape (``step``: its timestamp T0 + step s, its value)."""
    return [
        Series(
            (("__name__", "DCGM_FI_DEV_GPU_UTIL"), ("gpu", str(g))),
            ((T0 + step * 1000, float(step)),),
        )
        for g in range(count)
    ]


def dropped(router: RouterServer, destination: str) -> dict[str, float]:
    """``rwrouter_samples_dropped_total`` of a destination, by reason (non-zero ones)."""
    found: dict[str, float] = {}
    for family in router.metrics.registry.collect():
        for sample in family.samples:
            if (
                sample.name == "rwrouter_samples_dropped_total"
                and sample.value
                and sample.labels.get("destination") == destination
            ):
                found[sample.labels["reason"]] = sample.value
    return found


def holds(capture: CaptureServer, path: str, count: int) -> Callable[[], bool]:
    """A predicate: the capture server accepted at least ``count`` samples on ``path``."""
    return lambda: len(capture_points(capture, path)) >= count


def delivered(router: RouterServer, destination: str) -> float:
    """``rwrouter_sent_samples_total`` of a destination: samples answered with a 2xx."""
    return metric_value(router, "rwrouter_sent_samples_total", destination=destination)


def rejected_store(router: RouterServer, destination: str) -> DeadLetterStore:
    directory = dead_letter_dir(router.config.storage.path, destination)
    return DeadLetterStore(directory, max_bytes=1 << 30)


def entry_points(store: DeadLetterStore, entry: DeadLetter) -> list[Point]:
    request, _ = decode(store.body(entry))
    return [
        (tuple((lb.name, lb.value) for lb in ts.labels), sample.timestamp)
        for ts in request.timeseries
        for sample in ts.samples
    ]


async def send(http: aiohttp.ClientSession, router: RouterServer, batch: list[Series]) -> float:
    """POST one request, check the 204; returns how long the answer took (seconds)."""
    started = time.perf_counter()
    status, text, _ = await post_write(http, router, build_body(batch))
    assert status == 204, text
    return time.perf_counter() - started


# -- 1. a destination that never answers ----------------------------------------------------


async def test_hanging_destination_is_retried_while_the_other_keeps_its_latency(
    start_router: StartRouter,
    double: WorkspaceDouble,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
) -> None:
    """The workspace sits behind a proxy that accepts and reads but never writes. The router
    times out after remote_timeout (1 s) and retries (reason network); meanwhile the
    self-hosted destination gets every sample within its normal latency and every write is
    answered 204 at once. Once the proxy forwards, the workspace gets every sample."""
    proxy = BlackholeProxy(backend_port=int(double.base_url.rsplit(":", 1)[1]))
    await proxy.start()
    try:
        router = await start_router(f"""
remote_write:
  - name: workspace
    url: http://127.0.0.1:{proxy.port}/workspaces/ws-1/api/v1/remote_write
    remote_timeout: 1s
    sigv4: {STATIC_SIGV4}
    queue_config: {{batch_send_deadline: 20ms, min_backoff: 50ms, max_backoff: 200ms}}
  - name: self-hosted
    url: {fresh_capture.url("/self-hosted")}
    queue_config: {{batch_send_deadline: 20ms}}
""")
        sent: list[Series] = []
        answer_s: list[float] = []
        arrival_s: list[float] = []
        while (
            metric_value(
                router, "rwrouter_retries_total", destination="workspace", reason="network"
            )
            < 2
        ):
            assert len(arrival_s) < 300, "no network retry for the hanging destination"
            batch = gpu_series(len(arrival_s))
            started = time.perf_counter()
            answer_s.append(await send(http, router, batch))
            sent.extend(batch)
            await eventually(holds(fresh_capture, "/self-hosted", len(sent)), timeout=3)
            arrival_s.append(time.perf_counter() - started)
        hang_s = sum(arrival_s)

        assert proxy.hung >= 2 and proxy.swallowed > 0  # requests went out and were swallowed
        assert double.request_count == 0
        assert sorted(capture_points(fresh_capture, "/self-hosted")) == sorted(points(sent))
        assert max(answer_s) < 0.5, answer_s
        assert max(arrival_s) < 0.5, arrival_s  # far below the 1 s the hanging peer costs

        proxy.hanging = False
        started = time.perf_counter()
        await eventually(lambda: double_points(double) == points(sent), timeout=10)
        catch_up_s = time.perf_counter() - started
        await eventually(lambda: delivered(router, "workspace") == len(sent))  # the 200 read
    finally:
        await proxy.stop()
    assert {r.status for r in double.requests} == {200}
    assert dropped(router, "workspace") == {} and dropped(router, "self-hosted") == {}
    print(
        f"\nhang {hang_s:.2f}s, {len(sent)} samples; answer max {max(answer_s) * 1000:.0f} ms;"
        f" self-hosted arrival max {max(arrival_s) * 1000:.0f} ms; hung connections "
        f"{proxy.hung}; workspace caught up in {catch_up_s:.2f}s"
    )


# -- 2. temporary credentials expiring mid-run ---------------------------------------------


@dataclass
class Rotation:
    """How a credential source is set up for the router (``sigv4`` YAML), what to do just
    before the workspace expires the key in use (``rotate``), and what the source saw
    (``calls()``: how many times credentials were fetched)."""

    sigv4: str
    rotate: Callable[[], None]
    calls: Callable[[], int]
    check: Callable[[int], None] = lambda calls: None


CREDENTIAL_PROCESS = """
import datetime as dt, json, pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text() or 0) + 1
counter.write_text(str(n))
expires = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
print(json.dumps({"Version": 1, "AccessKeyId": f"ASIAROT{n}", "SecretAccessKey": f"secret-{n}",
                  "SessionToken": f"token-{n}",
                  "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}))
"""


def credential_process(double: WorkspaceDouble, env: Path) -> Rotation:
    """A profile whose credential_process hands out a new key at every call (ASIAROT1, 2...);
    the workspace knows the first 20 keys."""
    counter, script = env / "calls", env / "creds.py"
    counter.write_text("0")
    script.write_text(CREDENTIAL_PROCESS)
    (env / "aws-config").write_text(
        f"[profile rotating]\ncredential_process = {sys.executable} {script} {counter}\n"
    )
    for n in range(1, 21):
        double.add_key(
            f"ASIAROT{n}", f"secret-{n}", session_token=f"token-{n}", expires_at=time.time() + 3600
        )
    return Rotation(
        sigv4="{region: us-east-1, profile: rotating}",
        rotate=lambda: None,
        calls=lambda: int(counter.read_text()),
    )


def web_identity(
    double: WorkspaceDouble, env: Path, monkeypatch: pytest.MonkeyPatch, sts: StsRecorder
) -> Rotation:
    """EKS IRSA: a projected token file and a role, AssumeRoleWithWebIdentity at moto's STS
    (through a recorder that tells the workspace each key issued); the token file is rotated
    before the key expires, so a refresh must present the new token."""
    token_file = env / "token"
    token_file.write_text("token-1")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("AWS_ROLE_ARN", ROLE_ARN)
    monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "rwrouter-test")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)

    def rotate() -> None:
        token_file.write_text("token-2")

    def check(calls: int) -> None:
        assert sts.tokens == ["token-1"] + ["token-2"] * (calls - 1)

    return Rotation(
        sigv4="{region: us-east-1}",
        rotate=rotate,
        calls=lambda: len(sts.tokens),
        check=check,
    )


SOURCES = [
    pytest.param("credential_process", id="credential_process"),
    pytest.param("web_identity", id="web_identity"),
]


@pytest.mark.parametrize("source", SOURCES)
async def test_credentials_expiring_mid_run_are_refreshed_without_loss(
    start_router: StartRouter,
    double: WorkspaceDouble,
    http: aiohttp.ClientSession,
    no_aws_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    sts_url: str,
    source: str,
) -> None:
    """Writes keep coming while the workspace expires the temporary key in use (403 "security
    token ... expired"); the source hands out a new key on refresh. Every 403 costs one
    refresh and one retry (credential_refresh); later requests carry the new key; every
    acknowledged sample is stored; nothing is dropped or dead-lettered."""

    def learn(issued: Issued) -> None:
        double.add_key(
            issued.access_key,
            issued.secret_key,
            session_token=issued.session_token,
            expires_at=issued.expires_at,
        )

    sts = StsRecorder(sts_url=sts_url, on_issued=learn)
    await sts.start()
    try:
        if source == "credential_process":
            rotation = credential_process(double, no_aws_env)
        else:
            rotation = web_identity(double, no_aws_env, monkeypatch, sts)
        router = await start_router(f"""
remote_write:
  - name: workspace
    url: {double.url("ws-1")}
    sigv4: {rotation.sigv4}
    queue_config: {{min_shards: 2, max_shards: 2, batch_send_deadline: 20ms,
                    min_backoff: 20ms, max_backoff: 200ms}}
""")
        sent: list[Series] = []
        for step in range(10):  # the first key at work
            sent.extend(gpu_series(step))
            await send(http, router, gpu_series(step))
        await eventually(lambda: double_points(double) == points(sent))
        last = double.last_request
        assert last is not None and last.access_key is not None
        first_key = last.access_key
        rotation.rotate()
        double.expire_key(first_key)
        for step in range(10, 40):  # mid-run: writes keep coming during the refresh
            sent.extend(gpu_series(step))
            await send(http, router, gpu_series(step))
        await eventually(  # complete, or given up (then fail at once, below)
            lambda: (
                delivered(router, "workspace") == len(sent) or bool(dropped(router, "workspace"))
            ),
            timeout=15,
        )
        rotation_calls = rotation.calls()
    finally:
        await sts.stop()

    assert dropped(router, "workspace") == {}, "samples given up after the refresh"
    assert double_points(double) == points(sent)
    requests = list(double.requests)
    refused = [i for i, r in enumerate(requests) if r.status == 403]
    assert refused, "the expired key was never refused"
    assert all("expired" in requests[i].message for i in refused)
    assert {r.status for r in requests} == {200, 403}
    after = [r for r in requests[refused[0] :] if r.status == 200]
    assert after and all(r.access_key != first_key for r in after)
    last = double.last_request
    assert last is not None and last.status == 200 and last.access_key != first_key
    assert metric_value(
        router, "rwrouter_retries_total", destination="workspace", reason="credential_refresh"
    ) == len(refused)
    # one fetch at start, then at least one more (concurrent refreshes may share one)
    assert 2 <= rotation_calls <= 1 + len(refused)
    rotation.check(rotation_calls)
    assert dropped(router, "workspace") == {}
    assert len(rejected_store(router, "workspace")) == 0
    assert (
        metric_value(
            router, "rwrouter_credentials_expiry_timestamp_seconds", destination="workspace"
        )
        > time.time() + 1800
    )
    print(
        f"\n{source}: {len(refused)} refusal(s) 403, keys "
        f"{first_key} -> {last.access_key}, {len(sent)} samples stored"
    )


async def test_forced_refresh_of_web_identity_credentials_fetches_new_keys(
    no_aws_env: Path, monkeypatch: pytest.MonkeyPatch, sts_url: str
) -> None:
    """The smallest reproduction of the web identity case above: after a forced refresh (what
    a 403 "security token ... expired" triggers) the source must call STS again, with the
    token file's current content, and sign with the keys it returns."""
    sts = StsRecorder(sts_url=sts_url, on_issued=lambda issued: None)
    await sts.start()
    try:
        web_identity(WorkspaceDouble(), no_aws_env, monkeypatch, sts)
        source = await open_source(region="us-east-1")
        first = await source.frozen()
        (no_aws_env / "token").write_text("token-2")
        refreshed = await source.force_refresh()
    finally:
        await sts.stop()
    assert sts.tokens == ["token-1", "token-2"]
    assert refreshed.access_key == sts.issued[-1].access_key != first.access_key


# -- 3. large requests against the workspace's size limit -----------------------------------


def heavy_label_sets(
    count: int, random_labels: int, value_bytes: int, *, seed: int
) -> list[tuple[tuple[str, str], ...]]:
    """``count`` label sets, each with ``random_labels`` labels of ``value_bytes`` random
    base64 characters (snappy finds almost nothing to compress in them)."""
    rnd = random.Random(seed)
    return [
        (
            ("__name__", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
            ("instance", f"node-{i:05d}"),
            *(
                (f"label_{k}", base64.b64encode(rnd.randbytes(value_bytes * 3 // 4)).decode())
                for k in range(random_labels)
            ),
        )
        for i in range(count)
    ]


LARGE = [  # the double's limit (compressed bytes), random labels per series, their size,
    # series per request
    pytest.param(1 << 20, 3, 200, 20_000, id="limit_1MiB_3x200B"),
    pytest.param(1_000_000, 3, 200, 20_000, id="limit_1MB_3x200B"),
    pytest.param(1_000_000, 8, 200, 2_500, id="limit_1MB_8x200B"),
    pytest.param(1_000_000, 1, 2_000, 1_000, id="limit_1MB_1x2000B"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("limit", "random_labels", "value_bytes", "count"), LARGE)
async def test_large_requests_reach_the_workspace_within_its_size_limit(
    start_router: StartRouter,
    http: aiohttp.ClientSession,
    limit: int,
    random_labels: int,
    value_bytes: int,
    count: int,
) -> None:
    """Three scrapes of ``count`` series with large random label values. The sigv4 destination
    cuts bodies at max_request_bytes (1 MiB uncompressed, its default); the double refuses
    compressed bodies over ``limit`` with 413. Every body it stores is within the limit, a
    413 (if any) is split and delivered, and what it stores is exactly the input."""
    double = SizeRecordingDouble(
        credentials={ACCESS_KEY: Key(SECRET)}, limits=Limits(max_body_bytes=limit)
    )
    await double.start()
    try:
        router = await start_router(f"""
remote_write:
  - name: workspace
    url: {double.url("ws-1")}
    sigv4: {STATIC_SIGV4}
    queue_config: {{batch_send_deadline: 50ms}}
""")
        label_sets = heavy_label_sets(count, random_labels, value_bytes, seed=random_labels)
        sent: list[Series] = []
        for scrape in range(3):
            batch = [
                Series(labels, ((T0 + scrape * 15_000, float(i)),))
                for i, labels in enumerate(label_sets)
            ]
            await send(http, router, batch)
            sent.extend(batch)
        await eventually(
            lambda: (
                delivered(router, "workspace") == len(sent) or bool(dropped(router, "workspace"))
            ),
            timeout=45,
        )
        assert dropped(router, "workspace") == {}
        assert double_points(double) == points(sent)
    finally:
        await double.stop()
    statuses = [r.status for r in double.requests]
    assert set(statuses) <= {200, 413} and len(double.body_sizes) == len(statuses)
    stored = [
        size for size, status in zip(double.body_sizes, statuses, strict=True) if status == 200
    ]
    refused = [
        size for size, status in zip(double.body_sizes, statuses, strict=True) if status == 413
    ]
    assert max(declared for _, declared in double.body_sizes) <= 1 << 20  # the router's cut
    assert max(compressed for compressed, _ in stored) <= limit
    if limit >= 1 << 20:  # snappy never grows a protobuf body: 1 MiB raw fits 1 MiB compressed
        assert not refused
    biggest = max(double.body_sizes)
    print(
        f"\nlimit {limit}: {len(statuses)} requests, {len(refused)} refused 413 "
        f"(largest {max(refused, default=(0, 0))}), largest stored {max(stored)} "
        f"(compressed, uncompressed), largest body {biggest}"
    )


# -- 4. the dead-letter store ---------------------------------------------------------------


POISON = "x" * 2_100  # over the workspace's 2,048-byte label value limit


@pytest.mark.parametrize("kind", ["workspace_double", "rollback_tsdb"])
async def test_poison_series_alone_goes_to_the_dead_letter_store(
    start_router: StartRouter,
    double: WorkspaceDouble,
    sink: Sink,
    http: aiohttp.ClientSession,
    kind: str,
) -> None:
    """50 series in two writes, one of them poisoned (a 2,100-byte label value). The
    workspace double refuses the request with 400 (keeping its valid series); the TSDB rolls
    the whole request back with 400. Either way the batch is split until exactly the poison
    series is refused for good: it alone is in the dead-letter store, the 49 others arrive."""
    if kind == "workspace_double":
        destination = f"url: {double.url('ws-1')}\n    sigv4: {STATIC_SIGV4}"
    else:
        destination = f"url: {sink.url}"
    router = await start_router(f"""
remote_write:
  - name: {kind}
    {destination}
    queue_config: {{max_shards: 1, max_samples_per_send: 1000, batch_send_deadline: 50ms}}
""")
    series = gpu_series(0, 50)
    poisoned = Series((*series[17].labels, ("poison", POISON)), series[17].samples)
    series[17] = poisoned
    for part in (series[:25], series[25:]):
        await send(http, router, part)
    store = rejected_store(router, kind)
    # entries() lists the directory; len() trusts its cached count for TOTALS_TTL seconds.
    await eventually(lambda: delivered(router, kind) == 49 and len(store.entries()) == 1)
    assert dropped(router, kind) == {"4xx": 1}
    (entry,) = store.entries()
    assert (entry.kind, entry.status, entry.reason, entry.series, entry.samples) == (
        "samples",
        400,
        "4xx",
        1,
        1,
    )
    assert entry_points(store, entry) == sorted(points([poisoned]))
    wanted = points(series) - points([poisoned])
    if kind == "workspace_double":
        assert double_points(double) == wanted
    else:
        assert sorted(sink.stored) == sorted(wanted)  # each once


async def test_503_beyond_max_retry_duration_goes_to_the_dead_letter_store_and_the_queue_moves_on(
    start_router: StartRouter, sink: Sink, http: aiohttp.ClientSession
) -> None:
    """The destination answers 503 until the first batch has spent max_retry_duration (1 s):
    that batch goes to the dead-letter store (reason retry_budget, last status 503) and the
    batch queued behind it is delivered once the destination answers again."""
    router = await start_router(f"""
remote_write:
  - name: tsdb
    url: {sink.url}
    queue_config: {{max_shards: 1, batch_send_deadline: 20ms, min_backoff: 50ms,
                    max_backoff: 200ms, max_retry_duration: 1s}}
""")
    sink.failing = True
    first, later = gpu_series(0, 10), gpu_series(1, 10)
    started = time.perf_counter()
    await send(http, router, first)
    await eventually(lambda: len(sink.attempts) >= 1)  # in flight: the next write waits
    await send(http, router, later)
    await eventually(lambda: dropped(router, "tsdb").get("retry_budget") == 10, timeout=5)
    given_up_s = time.perf_counter() - started
    sink.failing = False
    await eventually(lambda: delivered(router, "tsdb") == 10, timeout=5)
    store = rejected_store(router, "tsdb")
    await eventually(lambda: len(store.entries()) == 1)  # (len() may be a cached count)
    assert sorted(sink.stored) == sorted(points(later))
    assert dropped(router, "tsdb") == {"retry_budget": 10}
    (entry,) = store.entries()
    assert (entry.status, entry.reason, entry.series, entry.samples) == (
        503,
        "retry_budget",
        10,
        10,
    )
    assert entry_points(store, entry) == sorted(points(first))
    assert 0.8 <= given_up_s < 2.0  # the last retry starts within the 1 s budget
    assert metric_value(router, "rwrouter_retries_total", destination="tsdb", reason="503") >= 3
