"""Pieces of the fault tests: a workspace double with an outage window, a tap that counts
deliveries, the parts a test gets from its fixtures (:class:`SelfHosted`, :class:`Workspace`,
:class:`Routers`), the router's configuration, a reader of its disk queue, bounded polling
(:func:`wait_for`, :func:`wait_drained`).

- :class:`OutageWorkspace`: the SigV4 workspace double; while :meth:`~OutageWorkspace.down`,
  every request gets a scripted 503 through the double's own fault injection (``inject``: each
  request in the window queues one :class:`Fault` and takes one, so nothing is left over when
  the window ends and the double's request records show reason ``fault``).
- :class:`DeliveryTap`: a pass-through HTTP proxy in front of a store that counts, per sample
  key, how many times the store acknowledged it (2xx): duplicates = deliveries - unique keys.
  Headers go through unchanged (``Host`` included), so SigV4 signatures still verify.
- :class:`Protocol` (:data:`PROTOCOLS`): the remote write version a test's ledger sends, for
  the tests that run once per version (ids ``rw1``, ``rw2``).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import snappy  # type: ignore[import-untyped,unused-ignore]
import yaml
from aiohttp import web

from rwrouter.doubles.prometheus import PrometheusProcess, free_port
from rwrouter.doubles.router import RouterProcess
from rwrouter.doubles.workspace import Fault, Key, Limits, WorkspaceDouble
from rwrouter.doubles.workspace_runner import ThreadedWorkspace
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE
from rwrouter.wire import remote_pb2
from tests.support.ledger import SampleKey, by_name
from tests.support.series import label_set

T = TypeVar("T")

REGION = "us-east-1"
WORKSPACE_ID = "ws-1"
ACCESS_KEY = "AKIDFAULTTESTS"
SECRET_KEY = "fault-tests-secret"
_HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "transfer-encoding", "content-length", "te", "upgrade")
)
_ANSWER_HEADERS = frozenset(("retry-after", "content-type", "x-amzn-errortype"))


def wait_for(
    probe: Callable[[], T | None], *, timeout_s: float, what: str, interval_s: float = 0.2
) -> T:
    """Poll ``probe`` until it returns something truthy; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


# -- the workspace, down on demand -----------------------------------------------------------
class OutageWorkspace(WorkspaceDouble):
    """The workspace double (one workspace, static key) with an outage window; ``limits``:
    the double's (default :class:`~rwrouter.doubles.workspace.Limits`)."""

    def __init__(self, limits: Limits | None = None) -> None:
        super().__init__(
            region=REGION,
            workspaces=(WORKSPACE_ID,),
            credentials={ACCESS_KEY: Key(SECRET_KEY)},
            limits=limits,
        )
        self._down_until = 0.0  # time.monotonic()

    def down(self, seconds: float = math.inf) -> None:
        """Answer 503 to every request for ``seconds`` from now (default: until :meth:`up`)."""
        self._down_until = time.monotonic() + seconds

    def up(self) -> None:
        self._down_until = 0.0

    @property
    def is_down(self) -> bool:
        return time.monotonic() < self._down_until

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.is_down:
            self.inject(Fault(503, "Service Unavailable (fault test outage)"))
        return await super()._handle(request)

    def fault_window(self) -> tuple[float, float, int]:
        """(first, last, count) of the requests answered with a scripted fault, monotonic
        seconds; (nan, nan, 0) when none."""
        times = [r.received_at for r in list(self.requests) if r.reason == "fault"]
        if not times:
            return math.nan, math.nan, 0
        return min(times), max(times), len(times)

    def accepted_during(self, since: float, until: float) -> int:
        """Requests accepted (200) that arrived in [since, until] (monotonic seconds)."""
        return sum(
            1 for r in list(self.requests) if r.status == 200 and since <= r.received_at <= until
        )


# -- counting deliveries ---------------------------------------------------------------------
class DeliveryTap:
    """A proxy to ``upstream`` (base URL) counting sample keys the store acknowledged (2xx);
    it can hold answers back (:attr:`answer_delay_s`) to widen the window in which a delivery
    is done but not yet confirmed.

    Runs its own event loop in a daemon thread; ``start()``/``stop()`` or ``with``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.port = 0
        self._lock = threading.Lock()
        self._counts: Counter[SampleKey] = Counter()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._thread = threading.Thread(target=self._run, name="delivery-tap", daemon=True)
        #: Seconds the answer is held after the store answered (a slow network back).
        self.answer_delay_s = 0.0
        #: Answers being held now: deliveries the store has and the sender does not know of.
        self.answers_pending = 0

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def start(self) -> DeliveryTap:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("delivery tap did not start")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> DeliveryTap:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._open())
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _open(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, auto_decompress=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.Response:
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        try:
            async with self._session.request(
                request.method,
                self.upstream + request.path_qs,
                data=body,
                headers=headers,
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
            ) as response:
                payload = await response.read()
                status = response.status
                answer = {k: v for k, v in response.headers.items() if k.lower() in _ANSWER_HEADERS}
        except (aiohttp.ClientError, TimeoutError) as exc:
            return web.Response(status=502, text=f"tap: upstream failed: {exc}")
        if 200 <= status < 300 and body:
            self._count(body)
        if self.answer_delay_s:  # stored, not yet confirmed to the sender
            self.answers_pending += 1
            try:
                await asyncio.sleep(self.answer_delay_s)
            finally:
                self.answers_pending -= 1
        return web.Response(status=status, body=payload, headers=answer)

    def _count(self, body: bytes) -> None:
        request = remote_pb2.WriteRequest.FromString(snappy.uncompress(body))
        keys = [
            (label_set((lb.name, lb.value) for lb in ts.labels), sample.timestamp)
            for ts in request.timeseries
            for sample in ts.samples
        ]
        with self._lock:
            self._counts.update(keys)

    def deliveries(self, name: str = ".+") -> Counter[SampleKey]:
        """Times each key was acknowledged by the store, for names fully matching ``name``."""
        with self._lock:
            counts = Counter(self._counts)
        wanted = by_name(counts, name)
        return Counter({key: n for key, n in counts.items() if key in wanted})


def duplicates(deliveries: Counter[SampleKey]) -> tuple[int, set[SampleKey]]:
    """(deliveries beyond the first, keys delivered more than once)."""
    extra = sum(n - 1 for n in deliveries.values() if n > 1)
    return extra, {key for key, n in deliveries.items() if n > 1}


# -- the parts of a test ----------------------------------------------------------------------
Report = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Protocol:
    """A remote write version the ledger sends: ``name`` (the test id and the figures'
    ``protocol``), the protobuf ``message`` and the router's ``protocol`` metric label."""

    name: str
    message: str
    label: str

    def tag(self, base: str) -> str:
        """The metric-name tag of a test's run: ``base`` for RW 1.0, ``<base>_<name>`` for
        the others (the self-hosted Prometheus is shared by the package's tests)."""
        return base if self.message == RW1_MESSAGE else f"{base}_{self.name}"


#: The versions a per-protocol fault test runs with:
#: ``pytest.mark.parametrize("protocol", PROTOCOLS, ids=PROTOCOL_IDS)``.
PROTOCOLS = (Protocol("rw1", RW1_MESSAGE, "1.0"), Protocol("rw2", RW2_MESSAGE, "2.0"))
PROTOCOL_IDS = tuple(protocol.name for protocol in PROTOCOLS)


def received_by_protocol(router: RouterProcess) -> dict[str, float]:
    """Requests the router read, by protocol name (``rwrouter_received_protocol_requests_total``
    since its start), for a test to check its input was read as the version it sent."""
    return {
        protocol.name: router.metric_value(
            "rwrouter_received_protocol_requests_total", protocol=protocol.label
        )
        for protocol in PROTOCOLS
    }


@dataclass
class SelfHosted:
    """The self-hosted store: a real Prometheus, and the tap the router writes through."""

    prom: PrometheusProcess
    tap: DeliveryTap

    @property
    def write_url(self) -> str:
        return self.tap.url("/api/v1/write")


@dataclass
class Workspace:
    """The workspace double (in a thread), and the tap the router writes through."""

    double: OutageWorkspace
    runner: ThreadedWorkspace
    tap: DeliveryTap

    @property
    def write_url(self) -> str:
        return self.tap.url(f"/workspaces/{WORKSPACE_ID}/api/v1/remote_write")


@dataclass
class Routers:
    """Starts rwrouter subprocesses (config from :func:`router_yaml`) in ``workdir``; the
    fixture kills every one at teardown."""

    workdir: Path
    started: list[RouterProcess] = field(default_factory=list)

    def start(
        self, *, workspace: Workspace, self_hosted: SelfHosted, **options: Any
    ) -> RouterProcess:
        """Write the config (:func:`router_yaml` with ``options``), start, wait for ready."""
        port = free_port()
        config = self.workdir / "rwrouter.yaml"
        config.write_text(
            router_yaml(
                port=port,
                storage=self.workdir / "storage",
                workspace_url=workspace.write_url,
                self_hosted_url=self_hosted.write_url,
                **options,
            )
        )
        router = RouterProcess(
            config_path=config, port=port, log_path=self.workdir / "rwrouter.log"
        )
        self.started.append(router)
        router.wait_ready(timeout_s=20)
        return router

    @property
    def storage(self) -> Path:
        return self.workdir / "storage"


# -- the router's configuration --------------------------------------------------------------
def router_yaml(
    *,
    port: int,
    storage: Path,
    workspace_url: str,
    self_hosted_url: str,
    keep: str = "critical_.*",
    workspace_queue: dict[str, Any] | None = None,
    self_hosted_queue: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
) -> str:
    """Series whose name matches ``keep`` go to the workspace (SigV4, static key of the double),
    the others to the self-hosted store (``fallback: true``). Short deadlines and backoffs so a
    recovery shows within a second or two."""
    queue = {
        "batch_send_deadline": "500ms",
        "min_backoff": "50ms",
        "max_backoff": "1s",
        "max_shards": 4,
    }
    settings = {
        "listen_address": f"127.0.0.1:{port}",
        "shutdown_timeout": "2s",
        "queue_full_retry_after": "1s",
    }
    config = {
        "server": {**settings, **(server or {})},
        "storage": {"path": str(storage)},
        "remote_write": [
            {
                "name": "workspace",
                "url": workspace_url,
                "sigv4": {"region": REGION, "access_key": ACCESS_KEY, "secret_key": SECRET_KEY},
                "write_relabel_configs": [
                    {"source_labels": ["__name__"], "regex": keep, "action": "keep"}
                ],
                "queue_config": {**queue, **(workspace_queue or {})},
            },
            {
                "name": "self-hosted",
                "url": self_hosted_url,
                "fallback": True,
                "queue_config": {**queue, **(self_hosted_queue or {})},
            },
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def wait_drained(
    router: RouterProcess,
    *,
    timeout_s: float,
    destinations: tuple[str, ...] = ("workspace", "self-hosted"),
) -> None:
    """Poll the router's ``rwrouter_queue_blocks`` until no destination has a block left (on
    disk or in flight): everything was delivered or refused for good."""

    def left() -> dict[str, float]:
        return {
            d: router.metric_value("rwrouter_queue_blocks", destination=d) for d in destinations
        }

    wait_for(
        lambda: not any(left().values()) or None,
        timeout_s=timeout_s,
        what="the router's queues to drain",
    )
