"""The workspace double's query API: ``/workspaces/<id>/api/v1/`` ``query``, ``query_range``,
``series``, ``labels`` (GET, POST form) and ``label/<name>/values`` (GET), answered by the
workspace's backend Prometheus (:mod:`rwrouter.doubles.workspace_backend`).

Checks, first failing wins: 1 method (403 Missing Authentication Token), 2-8 SigV4 of
method, path, query string and form body, exactly as for a write (service ``aps``), 9 unknown
workspace (404), then 501 ``no_backend`` when the workspace has no backend (after the
signature: an unsigned request learns nothing about which workspaces exist); then the query
is forwarded and the backend's answer returned as is (status, body, ``Content-Type``), but
for one over ``Limits.max_query_answer_bytes``: 422 (reason ``too_large``, never buffered
whole); 16: a backend that does not answer gives 503 (504 after its timeout), reason
``backend_unavailable``. ``records`` keeps the last requests (:class:`RecordRing`), its
``total`` and ``rejections`` count them all. Source: managed-workspace.md "Query API"; AMP
API reference (QueryMetrics, GetSeries, GetLabels: GET and POST, label values GET only).
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Callable, Collection, Mapping

from aiohttp import web

from rwrouter.doubles.sigv4_verify import Rejection, Verified
from rwrouter.doubles.workspace_backend import (
    Backend,
    BackendError,
    no_backend,
    query_failure,
    query_methods,
)
from rwrouter.doubles.workspace_records import MISSING_AUTH, RecordRing, aws_error, record_of

__all__ = ["QueryAPI"]


class QueryAPI:
    """The query half of a :class:`~rwrouter.doubles.workspace.WorkspaceDouble`: ``verify``
    runs checks 2-8 of a request (its bytes and headers); ``records`` and ``rejections`` (by
    reason) keep what it answered, apart from the write requests."""

    def __init__(
        self,
        *,
        workspaces: Collection[str],
        backends: Mapping[str, Backend],
        verify: Callable[[web.Request, bytes], Verified | Rejection],
    ) -> None:
        self.workspaces = workspaces
        self.backends = backends
        self.verify = verify
        self.records = RecordRing()
        self.rejections: collections.Counter[str] = collections.Counter()

    def check(
        self, request: web.Request, body: bytes, workspace_id: str, api_path: str
    ) -> Verified | Rejection:
        """Checks 1, 2-8, 9 and no backend (the module's list) of one query."""
        if request.method not in query_methods(api_path):
            return MISSING_AUTH
        verdict = self.verify(request, body)
        if isinstance(verdict, Rejection):
            return verdict
        if workspace_id not in self.workspaces:
            message = f"Workspace not found: {workspace_id}"
            return Rejection(9, 404, "unknown_workspace", message, "ResourceNotFoundException")
        if workspace_id not in self.backends:
            return no_backend(workspace_id)
        return verdict

    async def answer(
        self, request: web.Request, body: bytes, workspace_id: str, api_path: str
    ) -> web.StreamResponse:
        """Answer one query (``api_path``: ``api/v1/...``) from the workspace's backend."""
        verdict = self.check(request, body, workspace_id, api_path)
        if isinstance(verdict, Verified):
            try:
                answer = await self.backends[workspace_id].query(
                    method=request.method,
                    api_path=api_path,
                    raw_query=request.raw_path.partition("?")[2],
                    body=body,
                    content_type=request.headers.get("Content-Type", ""),
                )
            except BackendError as exc:
                verdict = query_failure(exc)
            else:
                signed, key = verdict.signed_headers, verdict.access_key
                reason = "too_large" if answer.too_large else ""
                if reason:
                    self.rejections[reason] += 1
                self.records.append(
                    record_of(request, answer.status, reason, "", signed, key, None)
                )
                headers = {
                    "Content-Type": answer.content_type,
                    "x-amzn-RequestId": str(uuid.uuid4()),
                }
                return web.Response(status=answer.status, body=answer.body, headers=headers)
        self.rejections[verdict.reason] += 1
        self.records.append(
            record_of(
                request, verdict.status, verdict.reason, verdict.message, (), None, verdict.check
            )
        )
        return aws_error(verdict.status, verdict.error_type, verdict.message)
