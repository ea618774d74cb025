"""X-Scope-OrgID per destination from the tenant (``tenant_header``), through a running router
(in-process ``RouterServer`` with a web configuration file, aiohttp clients, the capture server
as the destinations): a Mimir-like destination gets every request with exactly one tenant in
its header (samples and metadata, batches never mixing tenants; a request without a tenant gets
the configured default), the other destination gets none; queued records keep their tenant
across a restart; a rejected batch keeps it in the dead-letter store and
``rwrouter rejected replay`` sends it in it again."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from rwrouter.cli import main as rwrouter_main
from rwrouter.config import load_config
from rwrouter.deadletter.store import DeadLetterStore, dead_letter_dir
from rwrouter.server.frontdoor import DoorOptions
from rwrouter.server.runner import RouterServer
from rwrouter.wire import types_pb2
from tests.integration.conftest import eventually, started_routers
from tests.support.capture import CaptureServer, Received
from tests.support.series import HEADERS, Series, encode, write_request

pytestmark = pytest.mark.timeout(90)

TOKENS = {"writer-a": "token-a-0123456789", "writer-b": "token-b-0123456789"}
TOKENS |= {"writer-n": "token-n-0123456789"}
TENANTS = {"writer-a": "team-a", "writer-b": "team-b", "writer-n": None}
WEB = """
bearer_tokens:
  - {name: writer-a, token_file: writer-a.token}
  - {name: writer-b, token_file: writer-b.token}
  - {name: writer-n, token_file: writer-n.token}
access:
  writer-a: {roles: [write], tenant: team-a}
  writer-b: {roles: [write], tenant: team-b}
  writer-n: {roles: [write]}
"""
DEFAULT = "anonymous"  # the Mimir destination's configured X-Scope-OrgID: series without tenant

Start = Callable[[], Awaitable[RouterServer]]


@pytest.fixture
def config_file(tmp_path: Path, fresh_capture: CaptureServer) -> Path:
    for name, token in TOKENS.items():
        (tmp_path / f"{name}.token").write_text(token + "\n")
    (tmp_path / "web.yml").write_text(WEB)
    config = tmp_path / "rwrouter.yaml"
    queue = (
        "queue_config: {batch_send_deadline: 20ms, min_backoff: 10ms, max_backoff: 20ms,"
        " max_retry_duration: 1m}"
    )
    config.write_text(
        f"server: {{listen_address: '127.0.0.1:0'}}\nstorage: {{path: {tmp_path / 'q'}}}\n"
        "remote_write:\n"
        f"  - {{name: mimir, url: '{fresh_capture.url('/m')}', {queue},"
        f" tenant_header: X-Scope-OrgID, headers: {{x-scope-orgid: {DEFAULT}}},"
        " metadata_config: {send_interval: 2s}}\n"
        f"  - {{name: store, url: '{fresh_capture.url('/p')}', {queue}}}\n"
    )
    return config


@pytest.fixture
async def start(tmp_path: Path, config_file: Path) -> AsyncIterator[Start]:
    door = DoorOptions(web_config_file=str(tmp_path / "web.yml"), enable_lifecycle=False)

    def make(_arg: None, _n: int) -> RouterServer:
        return RouterServer(load_config(config_file), config_path=str(config_file), door=door)

    async with started_routers(make, drain_timeout=1) as started:
        yield functools.partial(started, None)


async def write(
    http: aiohttp.ClientSession, router: RouterServer, writer: str, n: int, *, meta: bool = False
) -> None:
    """One write request of ``writer``: series m{who=writer, i=n}, with metadata if ``meta``."""
    series = [Series((("__name__", "m"), ("i", str(n)), ("who", writer)), ((1_000 + n, 1.0),))]
    metadata = (
        [
            types_pb2.MetricMetadata(
                metric_family_name="m", type=types_pb2.MetricMetadata.COUNTER, help=f"from {writer}"
            )
        ]
        if meta
        else []
    )
    headers = {**HEADERS, "Authorization": f"Bearer {TOKENS[writer]}"}
    body = encode(write_request(series, metadata=metadata))
    async with http.post(router.url + "/api/v1/write", data=body, headers=headers) as resp:
        assert resp.status == 204, await resp.text()


def org_ids(received: Received) -> list[str]:
    """Every X-Scope-OrgID value of a request, whatever the header's case."""
    return [v for k, v in received.headers.items() if k.lower() == "x-scope-orgid"]


def writers_in(received: Received) -> set[str]:
    assert received.request is not None
    return {
        label.value
        for ts in received.request.timeseries
        for label in ts.labels
        if label.name == "who"
    }


def check_tenants(capture: CaptureServer) -> int:
    """Every sample request to /m carries one tenant, that of all its series; /p none.
    Returns the series that reached /m."""
    seen = 0
    for received in capture.requests("/m"):
        assert received.request is not None
        ids = org_ids(received)
        assert len(ids) == 1, received.headers
        if received.request.timeseries:
            tenants = {TENANTS[w] or DEFAULT for w in writers_in(received)}
            assert tenants == set(ids), (tenants, ids)  # one tenant per batch, the right one
            seen += len(received.request.timeseries) if received.status < 300 else 0
    assert all(not org_ids(r) for r in capture.requests("/p"))
    return seen


async def test_each_request_carries_its_tenant(
    start: Start, http: aiohttp.ClientSession, fresh_capture: CaptureServer
) -> None:
    router = await start()
    writers = list(TOKENS)
    # interleaved and concurrent: the shards see the tenants' records mixed
    await asyncio.gather(*(write(http, router, writers[i % 3], i, meta=i < 3) for i in range(30)))
    await eventually(lambda: fresh_capture.sample_count("/m") == 30)
    await eventually(lambda: fresh_capture.sample_count("/p") == 30)
    assert check_tenants(fresh_capture) == 30
    # metadata: one request per tenant, each with its own writer's help text
    await eventually(lambda: len(fresh_capture.metadata("/m")) == 3)
    helps = {
        org_ids(r)[0]: [md.help for md in r.request.metadata]
        for r in fresh_capture.requests("/m")
        if r.request is not None and r.request.metadata
    }
    assert helps == {
        "team-a": ["from writer-a"],
        "team-b": ["from writer-b"],
        DEFAULT: ["from writer-n"],
    }


async def test_queued_records_keep_their_tenant_across_a_restart(
    start: Start, http: aiohttp.ClientSession, fresh_capture: CaptureServer
) -> None:
    fresh_capture.script("/m", [503] * 10_000)  # down: everything stays queued
    router = await start()
    for i in range(12):
        await write(http, router, list(TOKENS)[i % 3], i)
    await eventually(lambda: fresh_capture.sample_count("/p") == 12)
    await eventually(lambda: len(fresh_capture.requests("/m")) >= 3)
    await router.stop(drain_timeout=0.2)
    fresh_capture.clear()  # up again
    await start()
    await eventually(lambda: fresh_capture.sample_count("/m") == 12)
    assert check_tenants(fresh_capture) == 12


async def test_a_rejected_batch_is_replayed_with_its_tenant(
    start: Start,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
    tmp_path: Path,
    config_file: Path,
) -> None:
    fresh_capture.script("/m", [400])  # the first batch is refused for good
    router = await start()
    await write(http, router, "writer-b", 7)
    await eventually(lambda: len(fresh_capture.requests("/m")) == 1)
    store = DeadLetterStore(dead_letter_dir(tmp_path / "q", "mimir"), max_bytes=1 << 20)
    await eventually(lambda: len(store.entries()) == 1)
    assert store.entries()[0].tenant == "team-b"
    await router.stop(drain_timeout=1)
    fresh_capture.clear()
    rc = await asyncio.to_thread(
        rwrouter_main, ["rejected", "replay", "--config", str(config_file), "mimir"]
    )
    assert rc == 0
    (replayed,) = fresh_capture.requests("/m")
    assert org_ids(replayed) == ["team-b"] and writers_in(replayed) == {"writer-b"}
    assert store.entries() == []
