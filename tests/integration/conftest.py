"""Fixtures for integration tests: a capture server (threaded) and routers started from YAML."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest
from moto.server import ThreadedMotoServer

from rwrouter.config import Config, load_config, parse_config
from rwrouter.metrics import Metrics
from rwrouter.server.frontdoor import DoorOptions
from rwrouter.server.runner import RouterServer
from tests.support.capture import CaptureServer
from tests.support.series import HEADERS

StartRouter = Callable[[str], Awaitable[RouterServer]]
Start = Callable[[Path], Awaitable[RouterServer]]  # a router from a config file: start_from_file


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
    def make(yaml_text: str, n: int) -> RouterServer:
        return RouterServer(router_config(yaml_text, tmp_path / f"storage-{n}"))

    async with started_routers(make, drain_timeout=2) as start:
        yield start


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
    """POST a body to the router; returns (status, text, headers). The body goes as a
    BytesIO: aiohttp warns (ResourceWarning) of bytes over 1 MiB sent in one write."""
    data = io.BytesIO(body)
    async with http.post(router.url + path, data=data, headers=headers or HEADERS) as resp:
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


@pytest.fixture
async def start_from_file() -> AsyncIterator[Start]:
    """Start a router from a config file (reloadable: ``config_path`` is set, and
    ``POST /-/reload`` served: ``--web.enable-lifecycle``); every one started is stopped at
    the end (a stopped router's stop does nothing)."""
    door = DoorOptions(enable_lifecycle=True)

    def make(path: Path, n: int) -> RouterServer:
        return RouterServer(load_config(str(path)), config_path=str(path), door=door)

    async with started_routers(make, drain_timeout=1) as start:
        yield start


A = TypeVar("A")


@contextlib.asynccontextmanager
async def started_routers(
    make: Callable[[A, int], RouterServer], *, drain_timeout: float
) -> AsyncIterator[Callable[[A], Awaitable[RouterServer]]]:
    """``start(arg)`` builds router number n with ``make(arg, n)`` and starts it; each one
    started is stopped (draining up to ``drain_timeout`` seconds) on the way out. For a
    module's own fixture of routers built its way (a web configuration file, say)."""
    started: list[RouterServer] = []

    async def start(arg: A) -> RouterServer:
        server = make(arg, len(started))
        await server.start()
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            await server.stop(drain_timeout=drain_timeout)
