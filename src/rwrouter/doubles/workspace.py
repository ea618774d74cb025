"""A local double of the managed workspace (Amazon Managed Service for Prometheus), for tests
and the demo: an aiohttp server on 127.0.0.1 that verifies SigV4 (hashlib/hmac, see
:mod:`rwrouter.doubles.sigv4_verify`), applies the workspace's limits and stores what it accepts.

Spec: shared/reference/managed-workspace.md "Spec: our local workspace double". Checks, first
failing wins: 1 unknown path/method, 2 no Authorization (403 Missing Authentication Token),
3 malformed Authorization, 4 host/x-amz-date unsigned, 5 wrong scope, 6 X-Amz-Date over 300 s
off, 7 unknown key / bad token / expired key, 8 signature mismatch (all 403), 9 unknown
workspace (404), 10 body over the limit (413), 11 a remote write 2.0 request (415: the
workspace speaks RW 1.0 only), not snappy block / bad protobuf (400), 12 invalid series
(names outside the legacy scheme included: the workspace refuses UTF-8 names), 13 out of
order / duplicate / too new / out of bounds (400: older than ``Limits.out_of_bounds_s``, off
by default), 14 ingestion rate (429), 15 series cap (400). Nothing from
a request failing checks 1-11 is stored. With ``Limits(ha_dedup=True)`` the Cortex HA tracker
runs before check 12: a request whose first series names a replica (``__replica__``) of a
cluster (``cluster``) other than the elected one is answered 202 "replicas did not match" and
not stored (reason ``ha_replica``); an accepted one is stored without its replica label.

A request to any other path (e.g. a signed ``GET .../api/v1/status/buildinfo``) gets 403
Missing Authentication Token, as API Gateway answers a route it lacks, and is recorded apart
(``others``, ``other_count``, ``other_requests`` of ``/_double/state``), never as a write.

Records: ``requests`` and ``queries`` keep the last requests
(:class:`~rwrouter.doubles.workspace_records.RecordRing`, 10,000 each), ``request_count``,
``query_count`` and the rejection counters count them all: a long ``rwrouter demo`` does not
grow. A backend (``backends={workspace id: Prometheus URL}``,
:mod:`rwrouter.doubles.workspace_backend`) stores for real: the accepted part of a write request
(nothing of a refused request, series or sample) is written into that Prometheus before the
double answers; 16: when the backend does not take it, the answer is 503 ``backend_unavailable``
(the sender retries) or 400 ``backend_refused``. The workspace's query API is answered by the
backend (:mod:`rwrouter.doubles.workspace_query`; ``queries``, ``query_rejections``).

Use from async tests::

    ws = WorkspaceDouble(credentials={"AKID": Key("secret")}, clock=clock)
    await ws.start(); url = ws.url("ws-1"); ...; await ws.stop()

or in a thread (:func:`rwrouter.doubles.workspace_runner.run_in_thread`), or standalone:
``python -m rwrouter.doubles.workspace_runner --port 9095 --region us-east-1 --workspace ws-1
--access-key AKID --secret SECRET [--backend http://127.0.0.1:9090]``.
"""

from __future__ import annotations

import asyncio
import collections
import re
import time
from collections.abc import Callable, Iterable, Mapping

from aiohttp import web

from rwrouter.doubles.sigv4_verify import Key, Rejection, Verified, verify
from rwrouter.doubles.workspace_backend import QUERY_PATH, Backend, BackendError, write_failure
from rwrouter.doubles.workspace_decode import decode_request, is_rw2
from rwrouter.doubles.workspace_query import QueryAPI
from rwrouter.doubles.workspace_records import (
    CHECK_OF_REASON,
    MISSING_AUTH,
    Fault,
    ManualClock,
    RecordRing,
    RequestRecord,
    aws_error,
    record_of,
    retry_after,
)
from rwrouter.doubles.workspace_store import (
    Limits,
    Metadata,
    Outcome,
    Series,
    WorkspaceStore,
)

__all__ = [
    "Fault",
    "Key",
    "Limits",
    "ManualClock",
    "RequestRecord",
    "WorkspaceDouble",
]

_PATH = re.compile(r"/workspaces/([^/]+)/api/v1/remote_write")
#: Path of the JSON inspection endpoint (GET), a testing backdoor outside the AWS API.
INSPECT_PATH = "/_double/state"


class WorkspaceDouble:
    """The workspace double. Not thread-safe: use it from the loop that started it.

    ``credentials`` maps access key to :class:`Key` or to a ``(secret, session_token,
    expires_at)`` tuple; it stays mutable (:meth:`add_key`, :meth:`expire_key`). ``clock``
    returns unix seconds (signature skew, token expiry, rate limiter, too-new check).
    """

    def __init__(
        self,
        *,
        region: str = "us-east-1",
        workspaces: Iterable[str] = ("ws-1",),
        credentials: Mapping[str, Key | tuple[str, str | None, float | None]] | None = None,
        limits: Limits | None = None,
        clock: Callable[[], float] = time.time,
        service: str = "aps",
        host: str = "127.0.0.1",
        port: int = 0,
        backends: Mapping[str, str] | None = None,
        backend_timeout_s: float = 30.0,
    ) -> None:
        self.region, self.service, self.clock = region, service, clock
        self.limits = limits or Limits()
        self.keys: dict[str, Key] = {}
        for access_key, key in (credentials or {}).items():
            self.keys[access_key] = key if isinstance(key, Key) else Key(*key)
        now = clock()
        self.stores = {ws: WorkspaceStore(limits=self.limits, now_s=now) for ws in workspaces}
        self.latency_s = 0.0
        self.requests = RecordRing()  # the last write requests
        self.others = RecordRing()  # the last to other paths (the module docstring)
        self.rejections: collections.Counter[str] = collections.Counter()
        self._host, self._port = host, port
        self._runner: web.AppRunner | None = None
        self.backends: dict[str, Backend] = {}
        for ws, url in (backends or {}).items():
            self.add_backend(ws, url, timeout_s=backend_timeout_s)
        self.query_api = QueryAPI(
            workspaces=self.stores, backends=self.backends, verify=self._verify
        )
        #: Requests to the query API (:mod:`rwrouter.doubles.workspace_query`), by reason.
        self.queries, self.query_rejections = self.query_api.records, self.query_api.rejections
        self.verified_signatures = 0
        self._faults: collections.deque[Fault] = collections.deque()
        self._stopping = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on ``host`` (127.0.0.1) and a free port unless one was given."""
        app = web.Application(client_max_size=max(64 << 20, 4 * self.limits.max_body_bytes))
        app.router.add_get(INSPECT_PATH, self._inspect)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._stopping = asyncio.Event()
        for backend in self.backends.values():
            await backend.start()
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop listening; hanging requests get their connection dropped."""
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for backend in self.backends.values():
            await backend.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}"

    def url(self, workspace_id: str = "ws-1") -> str:
        """The remote write URL of a workspace (it need not exist: check 9 answers 404)."""
        return f"{self.base_url}/workspaces/{workspace_id}/api/v1/remote_write"

    def query_url(self, workspace_id: str = "ws-1") -> str:
        """The instant query URL of a workspace (``.../api/v1/query``; SigV4, service aps)."""
        return f"{self.base_url}/workspaces/{workspace_id}/api/v1/query"

    # -- configuration at runtime ----------------------------------------------------------
    def add_backend(self, workspace_id: str, url: str, *, timeout_s: float = 30.0) -> None:
        """Give ``workspace_id`` a backend Prometheus at ``url``; before :meth:`start` only."""
        if self._runner is not None:
            raise RuntimeError("add_backend: the double is already started")
        cap = self.limits.max_query_answer_bytes
        self.backends[workspace_id] = Backend(url, timeout_s=timeout_s, max_answer_bytes=cap)

    def add_key(
        self,
        access_key: str,
        secret: str,
        *,
        session_token: str | None = None,
        expires_at: float | None = None,
    ) -> None:
        self.keys[access_key] = Key(secret, session_token, expires_at)

    def expire_key(self, access_key: str) -> None:
        """Make a key expired from now on (its token answers "... is expired")."""
        key = self.keys[access_key]
        self.keys[access_key] = Key(key.secret, key.session_token, self.clock())

    def inject(self, *faults: Fault) -> None:
        """Queue scripted answers; each request takes the next one, then normal service."""
        self._faults.extend(faults)

    def pending_faults(self) -> int:
        return len(self._faults)

    # -- inspection ------------------------------------------------------------------------
    def series(self, workspace_id: str = "ws-1") -> dict[tuple[tuple[str, str], ...], Series]:
        """Accepted series by label set ((name, value) pairs, sorted)."""
        return self.stores[workspace_id].series

    def find(self, workspace_id: str = "ws-1", **labels: str) -> list[Series]:
        """Accepted series whose labels include ``labels`` (``__name__`` for the name)."""
        wanted = set(labels.items())
        return [s for key, s in self.series(workspace_id).items() if wanted <= set(key)]

    def metadata(self, workspace_id: str = "ws-1") -> dict[str, Metadata]:
        return self.stores[workspace_id].metadata

    def sample_count(self, workspace_id: str = "ws-1") -> int:
        """Accepted float samples plus histograms, ever (points forgotten under
        ``Limits.keep_points_s`` included)."""
        return self.stores[workspace_id].stored_samples

    @property
    def request_count(self) -> int:
        """Write requests answered so far; ``requests`` keeps the last."""
        return self.requests.total

    @property
    def other_count(self) -> int:
        """Requests to other paths answered so far (:attr:`others` keeps the last)."""
        return self.others.total

    @property
    def query_count(self) -> int:
        """Query API requests answered so far; ``queries`` keeps the last."""
        return self.queries.total

    @property
    def last_request(self) -> RequestRecord | None:
        return self.requests[-1] if self.requests else None

    def snapshot(self) -> dict[str, object]:
        """A JSON-able summary (served on GET :data:`INSPECT_PATH`)."""
        last = self.last_request
        return {
            "requests": self.request_count,
            "verified_signatures": self.verified_signatures,
            "rejections": dict(self.rejections),
            "queries": self.query_count,
            "query_rejections": dict(self.query_rejections),
            "other_requests": self.other_count,
            "backends": {
                ws: {"url": b.url, "writes": b.writes, "samples": b.written_samples}
                for ws, b in self.backends.items()
            },
            "workspaces": {
                ws: {
                    "series": len(store.series),
                    "samples": self.sample_count(ws),
                    "metadata": len(store.metadata),
                }
                for ws, store in self.stores.items()
            },
            "last_request": None if last is None else last.summary(),
        }

    # -- HTTP ------------------------------------------------------------------------------
    async def _inspect(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        query = QUERY_PATH.fullmatch(request.path)
        if self._faults:
            return await self._fault(request, self._faults.popleft(), query=query is not None)
        if query is not None:
            return await self.query_api.answer(request, body, query.group(1), query.group(2))
        if _PATH.fullmatch(request.path) is None:
            self.others.append(record_of(request, 403, MISSING_AUTH.reason, "", (), None, 1))
            return aws_error(403, MISSING_AUTH.error_type, MISSING_AUTH.message)
        rejection_or_outcome, signed, access_key = self._process(request, body)
        if isinstance(rejection_or_outcome, Outcome) and rejection_or_outcome.accepted:
            rejection_or_outcome = await self._forward(request.path, rejection_or_outcome)
        counted = 0
        if isinstance(rejection_or_outcome, Rejection):
            rejection = rejection_or_outcome
            status, reason, message = rejection.status, rejection.reason, rejection.message
            check: int | None = rejection.check
            response = aws_error(rejection.status, rejection.error_type, rejection.message)
        else:
            outcome = rejection_or_outcome
            status, reason, message = outcome.status, outcome.reason, outcome.message
            check = CHECK_OF_REASON.get(reason)
            counted = outcome.counted
            response = web.Response(
                status=status,
                text=message,
                headers=retry_after(reason, self.limits.ingestion_retry_after),
            )
        if reason:
            self.rejections[reason] += 1
        self._record(request, status, reason, message, signed, access_key, check, counted)
        return response

    def _process(
        self, request: web.Request, body: bytes
    ) -> tuple[Rejection | Outcome, tuple[str, ...], str | None]:
        match = _PATH.fullmatch(request.path)
        if request.method != "POST" or match is None:  # check 1: a GET on the write path
            return MISSING_AUTH, (), None
        verdict = self._verify(request, body)
        if isinstance(verdict, Rejection):
            return verdict, (), None
        self.verified_signatures += 1
        content_type = request.headers.get("Content-Type", "")
        outcome = self._ingest(match.group(1), body, content_type)
        return outcome, verdict.signed_headers, verdict.access_key

    def _verify(self, request: web.Request, body: bytes) -> Verified | Rejection:
        """Checks 2-8 (SigV4) of the bytes and headers received."""
        raw_path, _, raw_query = request.raw_path.partition("?")
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        return verify(
            method=request.method,
            raw_path=raw_path,
            raw_query=raw_query,
            headers=headers,
            body=body,
            keys=self.keys,
            region=self.region,
            service=self.service,
            now_s=self.clock(),
        )

    def _ingest(self, workspace_id: str, body: bytes, content_type: str) -> Rejection | Outcome:
        store = self.stores.get(workspace_id)
        if store is None:
            message = f"Workspace not found: {workspace_id}"
            return Rejection(9, 404, "unknown_workspace", message, "ResourceNotFoundException")
        if len(body) > self.limits.max_body_bytes:
            message = (
                f"request body too large: {len(body)} bytes, limit {self.limits.max_body_bytes}"
            )
            return Rejection(10, 413, "too_large", message, "ValidationException")
        if is_rw2(content_type):
            message = (
                f"unsupported Content-Type {content_type!r}: the workspace accepts remote "
                "write 1.0 (prometheus.WriteRequest) only"
            )
            return Rejection(
                11, 415, "unsupported_media_type", message, "UnsupportedMediaTypeException"
            )
        decoded = decode_request(body)
        if isinstance(decoded, str):
            return Rejection(11, 400, "bad_body", decoded, "ValidationException")
        return store.ingest(decoded, now_s=self.clock(), collect=workspace_id in self.backends)

    async def _forward(self, path: str, outcome: Outcome) -> Outcome | Rejection:
        """Check 16: write what the store accepted (``outcome.accepted``) into the backend."""
        match = _PATH.fullmatch(path)
        backend = self.backends.get(match.group(1)) if match else None
        if backend is None or outcome.accepted is None:
            return outcome
        try:
            await backend.write(outcome.accepted)
        except BackendError as exc:
            return write_failure(exc)
        return outcome

    async def _fault(
        self, request: web.Request, fault: Fault, *, query: bool = False
    ) -> web.StreamResponse:
        status = 0 if fault.hang else fault.status  # 0: never answered
        record = record_of(request, status, "fault", fault.body, (), None, None)
        (self.queries if query else self.requests).append(record)
        (self.query_rejections if query else self.rejections)["fault"] += 1
        if fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        if fault.hang:
            await self._stopping.wait()
            if request.transport is not None:
                request.transport.close()
            raise asyncio.CancelledError
        return web.Response(status=fault.status, text=fault.body, headers=dict(fault.headers))

    def _record(
        self,
        request: web.Request,
        status: int,
        reason: str,
        message: str,
        signed: tuple[str, ...],
        access_key: str | None,
        check: int | None,
        counted: int = 0,
    ) -> None:
        record = record_of(request, status, reason, message, signed, access_key, check, counted)
        self.requests.append(record)
