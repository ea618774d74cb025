"""Fixtures for integration tests: a capture server (threaded) and routers started from YAML."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from moto.server import ThreadedMotoServer

from rwrouter.config import Config, parse_config
from rwrouter.metrics import Metrics
from rwrouter.server.runner import RouterServer
from tests.support.capture import CaptureServer
from tests.support.series import HEADERS

StartRouter = Callable[[str], Awaitable[RouterServer]]


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureServer]:
    with CaptureServer() as server:
        yield server


@pytest.fixture
def fresh_capture(capture: CaptureServer) -> CaptureServer:
    capture.clear()
    return capture


def router_config(yaml_text: str, storage: Path, **env: str) -> Config:
    """Parse ``yaml_text``, listen on a free port of 127.0.0.1, keep the queues in ``storage``
    (unless the YAML sets ``storage.path``)."""
    config = parse_config(yaml_text, env=env)
    server = dataclasses.replace(config.server, listen_address="127.0.0.1:0")
    if "path:" not in yaml_text:
        config = dataclasses.replace(
            config, storage=dataclasses.replace(config.storage, path=str(storage))
        )
    return dataclasses.replace(config, server=server)


@pytest.fixture
async def start_router(tmp_path: Path) -> AsyncIterator[StartRouter]:
    started: list[RouterServer] = []

    async def start(yaml_text: str) -> RouterServer:
        server = RouterServer(router_config(yaml_text, tmp_path / f"storage-{len(started)}"))
        await server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop(drain_timeout=2)


@pytest.fixture(scope="module")
def sts_url() -> Iterator[str]:
    """A moto server on 127.0.0.1 standing in for AWS STS (AssumeRole, web identity)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def post_write(
    http: aiohttp.ClientSession,
    router: RouterServer,
    body: bytes,
    *,
    headers: dict[str, str] | None = None,
    path: str = "/api/v1/write",
) -> tuple[int, str, dict[str, str]]:
    """POST a body to the router; returns (status, text, headers)."""
    async with http.post(router.url + path, data=body, headers=headers or HEADERS) as resp:
        return resp.status, await resp.text(), dict(resp.headers)


async def eventually(predicate: Callable[[], bool], *, timeout: float = 10.0) -> None:
    """Poll ``predicate`` (every 20 ms, without blocking the loop) until true, or fail."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.02)


def metric_value(source: RouterServer | Metrics, name: str, **labels: str) -> float:
    """Current value of one of the router's own metrics (0 when absent)."""
    metrics = source.metrics if isinstance(source, RouterServer) else source
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
