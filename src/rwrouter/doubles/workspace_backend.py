"""The real Prometheus behind a workspace of the double: what the double accepts is written
into it through its remote-write receiver, and the workspace's query API is answered by it.

A :class:`Backend` holds one aiohttp client session (opened by :meth:`Backend.start`, closed by
:meth:`Backend.stop`) and bounds every call by ``timeout_s`` seconds:

- :meth:`Backend.write` POSTs an accepted remote write 1.0 request (snappy block) to
  ``<url>/api/v1/write`` (Prometheus ``--web.enable-remote-write-receiver``); writes of one
  workspace go one at a time, in the order the double accepted them.
- :meth:`Backend.query` forwards a query (method, ``api/v1/...`` path, raw query string, form
  body) to ``<url>/api/v1/...`` and returns the backend's status, body and content type, the
  body read up to ``max_answer_bytes`` (``Limits.max_query_answer_bytes``, 64 MiB): a larger
  answer is not buffered but refused as the workspace refuses a query over its limits, 422
  with a Prometheus API error (:func:`too_large_answer`).

Both raise :class:`BackendError` when the backend does not answer (refused connection,
``timeout_s`` passed); :meth:`Backend.write` also when it answers other than 2xx.

:func:`backend_config` is the ``prometheus.yml`` such a backend needs: no scraping, and an
out-of-order window as wide as the double's (``Limits.out_of_order_window_s``, the workspace's
1 min), so that what the double accepts out of order is not refused by the backend.
Source: managed-workspace.md "Quotas that matter" (out-of-order window), Prometheus
``storage.tsdb.out_of_order_time_window`` (since 2.39); Prometheus HTTP API docs (422 when an
expression cannot be executed), Cortex ``pkg/util/limiter`` (``ErrMaxDataBytesHit``: "the
query hit the aggregated data size limit (limit: N bytes)", answered 422 ``execution``).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass

import aiohttp
import snappy  # type: ignore[import-untyped,unused-ignore]
import yaml  # type: ignore[import-untyped,unused-ignore]

from rwrouter.doubles.sigv4_verify import Rejection
from rwrouter.errors import WorkspaceBackendError as BackendError
from rwrouter.wire import remote_pb2

__all__ = [
    "QUERY_PATH",
    "Backend",
    "BackendError",
    "QueryAnswer",
    "backend_config",
    "no_backend",
    "query_failure",
    "query_methods",
    "too_large_answer",
    "write_failure",
]

#: The workspace's query API (managed-workspace.md "Query API"; AMP QueryMetrics, GetSeries,
#: GetLabels): ``/workspaces/<id>/api/v1/<query|query_range|series|labels|label/<name>/values>``.
QUERY_PATH = re.compile(
    r"/workspaces/([^/]+)/(api/v1/(?:query|query_range|series|labels|label/[^/]+/values))"
)


def query_methods(api_path: str) -> frozenset[str]:
    """The methods the workspace answers on ``api_path`` (``api/v1/...``): GET and POST (a
    form body), but GET only for ``api/v1/label/<name>/values`` (AMP GetLabels)."""
    if api_path.startswith("api/v1/label/"):
        return frozenset({"GET"})
    return frozenset({"GET", "POST"})


#: Remote write 1.0 request headers (remote-write.md).
_RW1_HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}


@dataclass(frozen=True)
class QueryAnswer:
    """The backend's answer to a query: HTTP status, body bytes, ``Content-Type``;
    ``too_large``: the answer was over the cap, and this is :func:`too_large_answer`."""

    status: int
    body: bytes
    content_type: str
    too_large: bool = False


def too_large_answer(limit: int) -> QueryAnswer:
    """What the double answers for a backend answer over ``limit`` bytes: 422 with the
    Prometheus API error Cortex gives for a query over its data size limit."""
    error = f"expanding series: the query hit the aggregated data size limit (limit: {limit} bytes)"
    body = json.dumps({"status": "error", "errorType": "execution", "error": error})
    return QueryAnswer(422, body.encode(), "application/json", too_large=True)


def backend_config(*, out_of_order_window_s: float = 60.0) -> str:
    """``prometheus.yml`` text of a backend: no scrape targets (data arrives by remote write
    only) and ``storage.tsdb.out_of_order_time_window`` of ``out_of_order_window_s`` seconds."""
    config = {
        "global": {"external_labels": {"prometheus": "workspace-double-backend"}},
        "storage": {"tsdb": {"out_of_order_time_window": f"{round(out_of_order_window_s)}s"}},
    }
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    return f"# The workspace double's backend: stores what the double accepted.\n{body}"


class Backend:
    """The Prometheus at ``url`` (``http://host:port``, no trailing path) behind a workspace.
    Use from the loop that started it."""

    def __init__(
        self, url: str, *, timeout_s: float = 30.0, max_answer_bytes: int = 64 << 20
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_answer_bytes = max_answer_bytes
        self.writes = 0  # requests it took
        self.written_samples = 0  # samples and histograms in them
        self._session: aiohttp.ClientSession | None = None
        self._write_lock = asyncio.Lock()

    async def start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout)
        self._write_lock = asyncio.Lock()

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise BackendError(f"backend {self.url}: not started")
        return self._session

    async def write(self, request: remote_pb2.WriteRequest) -> None:
        """Write ``request`` (remote write 1.0) into the backend; :class:`BackendError` unless
        it answers 2xx within ``timeout_s``."""
        body = bytes(snappy.compress(request.SerializeToString()))
        url = f"{self.url}/api/v1/write"
        async with self._write_lock:
            try:
                async with self._client().post(url, data=body, headers=_RW1_HEADERS) as answer:
                    text = (await answer.text(errors="replace")).strip()
                    status = answer.status
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise _unreachable(url, exc, self.timeout_s) from exc
        if not 200 <= status < 300:
            raise BackendError(f"{url} answered {status}: {text[:500]}", status=status)
        self.writes += 1
        self.written_samples += sum(
            len(ts.samples) + len(ts.histograms) for ts in request.timeseries
        )

    async def query(
        self, *, method: str, api_path: str, raw_query: str, body: bytes, content_type: str
    ) -> QueryAnswer:
        """Forward one query: ``method`` (GET/POST) to ``<url>/<api_path>?<raw_query>`` with
        ``body`` (a POST's form) and its ``content_type``. Any answer up to
        ``max_answer_bytes`` is returned as is, a larger one as :func:`too_large_answer`;
        :class:`BackendError` when none comes within ``timeout_s``."""
        url = f"{self.url}/{api_path}" + (f"?{raw_query}" if raw_query else "")
        headers = {"Content-Type": content_type} if body and content_type else {}
        try:
            async with self._client().request(
                method, url, data=body or None, headers=headers
            ) as answer:
                payload = await self._read(answer)
                if payload is None:
                    return too_large_answer(self.max_answer_bytes)
                kind = answer.headers.get("Content-Type", "application/json")
                return QueryAnswer(answer.status, payload, kind)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _unreachable(url, exc, self.timeout_s) from exc

    async def _read(self, answer: aiohttp.ClientResponse) -> bytes | None:
        """The body, or None as soon as it is over ``max_answer_bytes``."""
        if (answer.content_length or 0) > self.max_answer_bytes:
            return None
        chunks, size = [], 0
        async for chunk in answer.content.iter_chunked(1 << 16):
            size += len(chunk)
            if size > self.max_answer_bytes:
                return None
            chunks.append(chunk)
        return b"".join(chunks)


def _unreachable(url: str, exc: BaseException, timeout_s: float) -> BackendError:
    if isinstance(exc, TimeoutError):
        return BackendError(f"{url}: no answer within {timeout_s:g} s", timed_out=True)
    return BackendError(f"{url}: {type(exc).__name__}: {exc}")


def write_failure(exc: BackendError) -> Rejection:
    """Check 16 of a write: the backend did not store what the double accepted. 400
    ``backend_refused`` when it refused it (4xx: its rules are narrower than the double's, e.g.
    a sample older than its head), else 503 ``backend_unavailable`` (the sender retries)."""
    if 400 <= exc.status < 500:
        message = f"the double's backend Prometheus refused what the double accepted: {exc}"
        return Rejection(16, 400, "backend_refused", message, "ValidationException")
    message = f"the double's backend Prometheus did not store it (send again): {exc}"
    return Rejection(16, 503, "backend_unavailable", message, "ServiceUnavailableException")


def query_failure(exc: BackendError) -> Rejection:
    """Check 16 of a query: the backend did not answer; 504 after the timeout, else 503."""
    message = f"the double's backend Prometheus did not answer: {exc}"
    status = 504 if exc.timed_out else 503
    return Rejection(16, status, "backend_unavailable", message, "ServiceUnavailableException")


def no_backend(workspace_id: str) -> Rejection:
    """A query of a workspace that has no backend: 501 ``no_backend``, saying how to get one."""
    message = (
        f"the workspace double answers no queries for {workspace_id}: it has no backend "
        "Prometheus (WorkspaceDouble(backends=...), or --backend URL of python -m "
        "rwrouter.doubles.workspace_runner; `rwrouter demo` starts one)"
    )
    return Rejection(16, 501, "no_backend", message, "NotImplementedException")
