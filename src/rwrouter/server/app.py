"""The receive side: an aiohttp web application (the only aiohttp.web importer).

Endpoints: ``POST /api/v1/write`` and ``POST /api/v1/push`` (remote write 1.0 and 2.0,
negotiated by ``Content-Type``: :func:`rwrouter.protocol.message_of`), ``GET /metrics``,
``GET /-/healthy``, ``GET /-/ready``, ``POST /-/reload``, ``GET /`` (the status page) and
``GET /-/status`` (its figures as JSON), ``GET /-/audit`` (the audit report as JSON). Other
methods on a known path get 405 (aiohttp).

Answers (RW 1.0 and 2.0 specs; the sender's mistakes are 4xx with a one-line reason, never
5xx): 204 accepted; 400 undecodable body (for RW 2.0 also a label ref outside the symbols
table, an odd number of refs, symbols[0] not empty: :mod:`rwrouter.wire.rw2_in`); 408 body too
slow to arrive; 413 body or declared decoded size over the limit, or a share larger than a
destination's whole queue; 415 another Content-Encoding, Content-Type or ``proto=``; 503 with
``Retry-After`` when a destination queue is full, too many requests wait to be decoded, or
no read came within ``server.read_wait_timeout`` (:mod:`rwrouter.server.bodies`; nothing of
the request was kept; the sender retries), or when a disk queue could not be written. 204
means the request is in every destination's durable queue. Bodies are decoded and routed
in worker threads (:mod:`rwrouter.server.decoders`); a sender that gave up before its answer
gets nothing enqueued (it will send again). Every answer to an RW 2.0 request
carries the three ``X-Prometheus-Remote-Write-*-Written`` headers: on 204 the samples,
histograms and exemplars it carried (written = accepted and routed, including series the rules
drop), zeros on every other answer; RW 1.0 answers carry none. With ``--workers``, a 204 may end its
connection (``Connection: close``) to balance the connections over the workers
(:mod:`rwrouter.server.balance`).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.resources
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from rwrouter.config import ServerConfig
from rwrouter.errors import RequestError, RwrouterError, StorageError, TenantError, UnsupportedError
from rwrouter.logs import Throttle, escape, kv
from rwrouter.metrics import Metrics, ReceiveMetrics
from rwrouter.pipeline.fanout import Accepted, FanOut, Stale
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE, Written, message_of
from rwrouter.reasons import RefuseReason
from rwrouter.server.bodies import BodyGate, ClientGone, ReadWaitTimeout, read_body
from rwrouter.server.decoders import LARGE_BODY, Busy, Decoders, work_size
from rwrouter.server.frontdoor import write_tenant
from rwrouter.server.index import index_text
from rwrouter.server.reads import AuditAnswers, AuditReport, StatusAnswers, audit_query
from rwrouter.wire import declared_size
from rwrouter.wire.accelerator import ACCELERATED

if TYPE_CHECKING:
    from rwrouter.server.frontdoor import FrontDoor

log = logging.getLogger("rwrouter.server")

FANOUT = web.AppKey("fanout", FanOut)
RECEIVE_METRICS = web.AppKey("receive_metrics", ReceiveMetrics)  # what handle_write counts
SETTINGS = web.AppKey("settings", ServerConfig)
READY = web.AppKey("ready", list)  # [bool]: set once the destinations run
DECODERS = web.AppKey("decoders", Decoders)
REFUSALS_LOGGED = web.AppKey("refusals_logged", Throttle)  # the write refusals' log lines
BODIES = web.AppKey("bodies", BodyGate)  # the bound on bodies being read and held
Reload = Callable[[], Awaitable[str]]
RELOAD: web.AppKey[Reload] = web.AppKey("reload")
Expose = Callable[[], Awaitable[tuple[bytes, str]]]  # the /metrics body and its content type
# Called once a write request is accepted, with its connection (transport): True to end that
# connection (rwrouter run --workers: :meth:`rwrouter.server.balance.Balancer.end_connection`).
EndConnection = Callable[[asyncio.BaseTransport], bool]
BALANCE: web.AppKey[EndConnection | None] = web.AppKey("balance")
EXPOSE: web.AppKey[Expose] = web.AppKey("expose")  # rwrouter run --workers: all workers' metrics
# (top, sort) -> the report of top names per destination ranked by sort (rwrouter.audit.rank)
AUDIT: web.AppKey[AuditReport] = web.AppKey("audit")  # rwrouter run --workers: all workers'
AUDIT_ANSWERS = web.AppKey("audit_answers", AuditAnswers)  # GET /-/audit, built and kept
STATUS_ANSWERS = web.AppKey("status_answers", StatusAnswers)  # GET /-/status, built and kept
LIFECYCLE = web.AppKey("lifecycle", bool)  # POST /-/reload served (--web.enable-lifecycle)

WRITE_PATHS = ("/api/v1/write", "/api/v1/push")
_REASONS = {
    400: RefuseReason.DECODE,
    408: RefuseReason.SLOW_BODY,
    413: RefuseReason.TOO_LARGE,
    415: RefuseReason.UNSUPPORTED,
}
PROTOCOLS = {RW1_MESSAGE: "1.0", RW2_MESSAGE: "2.0"}  # the protocol label of the metrics
NOTHING_WRITTEN = Written()


def named_message(content_type: str | None) -> str | None:
    """The message ``Content-Type`` names, or None when it names none rwrouter takes (so a
    415 for a bad ``Content-Encoding`` still answers an RW 2.0 sender as one)."""
    try:
        return message_of(None, content_type)
    except UnsupportedError:
        return None


def written_headers(message: str | None, written: Written | None = None) -> dict[str, str]:
    """The ``X-Prometheus-Remote-Write-*-Written`` headers of an answer: for an RW 2.0
    request always (``written``, or zeros on a failure: RW 2.0 spec, "Required Written
    Response Headers"); none for RW 1.0 (exact counts or none, and rwrouter does not send
    them)."""
    if message != RW2_MESSAGE:
        return {}
    return (written or NOTHING_WRITTEN).headers()


async def handle_write(request: web.Request) -> web.Response:
    """Receive one remote write request (1.0 or 2.0, by its Content-Type); route and enqueue
    it (see module docstring)."""
    app = request.app
    metrics, settings, fanout = app[RECEIVE_METRICS], app[SETTINGS], app[FANOUT]
    started = time.perf_counter()
    body = None
    headers = request.headers
    message = named_message(headers.get("Content-Type"))
    try:
        message = message_of(headers.get("Content-Encoding"), headers.get("Content-Type"))
        metrics.protocol_requests.labels(PROTOCOLS[message]).inc()
        tenant = write_tenant(request)  # before the body is read: refused whole (400)
        body = await read_body(request, app[BODIES])
        limit = settings.max_decoded_bytes
        decode = functools.partial(
            fanout.decode, body, max_decoded_bytes=limit, message=message, tenant=tenant
        )
        while True:
            routed = await app[DECODERS].run(work_size(declared_size(body), message), decode)
            if request.transport is None or request.transport.is_closing():
                raise ClientGone  # the sender gave up (its timeout): it will send again
            try:
                accepted = await fanout.accept(routed)
                break
            except Stale:  # a reload swapped the destinations meanwhile: route it again
                continue
    except StorageError as exc:
        return _unavailable(request, RefuseReason.STORAGE, str(exc), message)
    except ClientGone:
        metrics.refused.labels(RefuseReason.CLIENT_GONE).inc()
        return web.Response(
            status=400,
            text="connection closed before the answer\n",
            headers=written_headers(message),
        )
    except Busy as exc:
        return _unavailable(
            request, RefuseReason.BUSY, f"too many {exc} requests being decoded", message
        )
    except ReadWaitTimeout as exc:  # its body was not read: the connection is not reused
        return _unavailable(request, RefuseReason.READ_WAIT, str(exc), message, close=True)
    except RequestError as exc:
        return _refused(request, exc, metrics=metrics, message=message, body_read=body is not None)
    finally:
        if body is not None:
            app[BODIES].release(len(body))
    if accepted.full:
        text = f"queue full for destination(s) {', '.join(accepted.full)}"
        return _unavailable(request, RefuseReason.QUEUE_FULL, text, message)
    return _accepted(
        request,
        accepted,
        metrics=metrics,
        end_connection=app[BALANCE],
        message=message,
        started=started,
    )


def _refused(
    request: web.Request,
    exc: RequestError,
    *,
    metrics: ReceiveMetrics,
    message: str | None,
    body_read: bool,
) -> web.Response:
    """The 4xx answer to a request the sender got wrong (``exc``: its status and one-line
    reason), counted, and logged at most once per client address and minute
    (:data:`REFUSALS_LOGGED`); ``body_read``: else the connection is not reused."""
    metrics.requests.labels(str(exc.status)).inc()
    reason = RefuseReason.TENANT if isinstance(exc, TenantError) else None
    metrics.refused.labels(reason or _REASONS.get(exc.status, RefuseReason.BAD_REQUEST)).inc()
    remote = request.remote or "-"
    unlogged = request.app[REFUSALS_LOGGED].admit(remote, now=time.monotonic())
    if unlogged is not None:  # at most one line per client and minute: a client can send many
        log.info(kv(remote=remote, status=exc.status, reason=exc, unlogged=unlogged))
    response = web.Response(status=exc.status, text=f"{exc}\n", headers=written_headers(message))
    if not body_read:  # the body was not read: do not reuse the connection for the next one
        response.force_close()
    return response


def _accepted(
    request: web.Request,
    accepted: Accepted,
    *,
    metrics: ReceiveMetrics,
    end_connection: EndConnection | None,
    message: str | None,
    started: float,
) -> web.Response:
    """The 204 answer to a request in every destination's queue (``accepted``: what it
    carried), counted; ``end_connection``: the app's :data:`BALANCE`; ``started``:
    :func:`time.perf_counter` seconds when the request came."""
    response = web.Response(status=204, headers=written_headers(message, accepted.written))
    transport = request.transport
    if end_connection is not None and transport is not None and end_connection(transport):
        # With --workers, this worker has more than its share of the write connections: the
        # sender reconnects and the kernel hashes the new connection to any worker.
        response.force_close()
    metrics.requests.labels("204").inc()
    metrics.series.inc(accepted.series)
    metrics.samples.inc(accepted.samples)
    metrics.metadata.inc(accepted.metadata)
    metrics.duration.observe(time.perf_counter() - started)
    return response


def _unavailable(
    request: web.Request,
    reason: RefuseReason,
    text: str,
    message: str | None,
    *,
    close: bool = False,
) -> web.Response:
    """503 with Retry-After: nothing of the request was kept; the sender retries it
    (``close``: on a new connection, this one's body being unread)."""
    metrics, settings = request.app[RECEIVE_METRICS], request.app[SETTINGS]
    metrics.requests.labels("503").inc()
    metrics.refused.labels(reason).inc()
    retry_after = max(1, round(settings.queue_full_retry_after))
    headers = {"Retry-After": str(retry_after), **written_headers(message)}
    response = web.Response(status=503, headers=headers, text=f"{text}; retry later\n")
    if close:
        response.force_close()
    return response


async def handle_metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition of rwrouter's own metrics (with ``--workers``: of every
    worker, :mod:`rwrouter.server.workers`)."""
    body, content_type = await request.app[EXPOSE]()
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type
    return response


async def handle_healthy(request: web.Request) -> web.Response:
    """200 while the process serves HTTP."""
    return web.Response(text="rwrouter is healthy.\n")


async def handle_ready(request: web.Request) -> web.Response:
    """200 once the destinations' senders run; 503 before that, while shutting down, and while
    a destination's senders are stopped by a bug (:attr:`FanOut.failed`, until a reload or a
    restart)."""
    if not request.app[READY][0]:
        return web.Response(status=503, text="rwrouter is not ready.\n")
    failed = request.app[FANOUT].failed
    if failed:
        return web.Response(
            status=503,
            text=f"rwrouter is not ready: destination "
            f"{','.join(failed)} stopped sending on a bug (see the log).\n",
        )
    return web.Response(text="rwrouter is ready.\n")


async def _no_reload() -> str:
    raise RwrouterError("reload is not available: the router was started without a file")


async def handle_reload(request: web.Request) -> web.Response:
    """``POST /-/reload`` (as Prometheus's): re-read the configuration file; 200 with what
    changed, or 500 with the reason (the running configuration stays)."""
    try:
        summary = await request.app[RELOAD]()
    except (RwrouterError, OSError) as exc:
        reason = escape(" ".join(str(exc).split()))  # one line, no control characters
        return web.Response(status=500, text=f"failed to reload config: {reason}\n")
    return web.Response(text=f"{summary}\n")


@functools.cache
def status_page() -> str:
    """The status page (``status.html`` next to this module: no external assets; its script
    reads :func:`handle_status` every 2 s)."""
    return (importlib.resources.files("rwrouter.server") / "status.html").read_text("utf-8")


async def handle_status(request: web.Request) -> web.Response:
    """``GET /-/status``: the status page's figures as JSON
    (:func:`rwrouter.metrics.status_snapshot` of the ``/metrics`` exposition: every worker's
    with ``--workers``; and ``time``, unix seconds when taken), built off the event loop at
    most once per :data:`~rwrouter.server.reads.STATUS_TTL` (``Age``: seconds since)."""
    app = request.app
    body, taken = await app[STATUS_ANSWERS].answer(app[EXPOSE])
    return _json_answer(body, age=app[STATUS_ANSWERS].reads.clock() - taken)


async def handle_audit(request: web.Request) -> web.Response:
    """``GET /-/audit[?top=N][&sort=series|samples]``: the audit report as JSON
    (:func:`rwrouter.audit.build_report`; the query: :func:`~rwrouter.server.reads.audit_query`,
    400 with its reason), built off the event loop at most once per ``audit.refresh`` and
    shared by concurrent readers (:class:`~rwrouter.server.reads.AuditAnswers`; ``Age``:
    seconds since its counts were taken)."""
    try:
        query = audit_query(request.query)
    except ValueError as exc:
        return web.Response(status=400, text=f"{exc}\n")
    app = request.app
    answers = app[AUDIT_ANSWERS]
    body, taken = await answers.answer(report=app[AUDIT], audit=app[FANOUT].audit, query=query)
    return _json_answer(body, age=answers.clock() - taken)


def _json_answer(body: bytes, *, age: float) -> web.Response:
    """A JSON answer kept by the server (``Age``: whole seconds since it was taken), not to be
    stored by the reader."""
    headers = {"Cache-Control": "no-store", "Age": str(max(0, int(age)))}
    return web.Response(body=body, content_type="application/json", headers=headers)


async def handle_index(request: web.Request) -> web.Response:
    """``GET /``: the status page for a browser (``Accept: text/html``), else a plain-text
    list of the endpoints and the destinations' queues (:func:`index_text`, from the
    ``GET /-/status`` figures)."""
    if "text/html" in request.headers.get("Accept", ""):
        return web.Response(text=status_page(), content_type="text/html")
    app = request.app
    body, _ = await app[STATUS_ANSWERS].answer(app[EXPOSE])
    return web.Response(text=index_text(json.loads(body), lifecycle=app[LIFECYCLE]))


async def _shutdown_decoders(app: web.Application) -> None:
    app[DECODERS].shutdown()


def make_app(
    *,
    fanout: FanOut,
    metrics: Metrics,
    settings: ServerConfig,
    front_door: FrontDoor | None = None,
) -> web.Application:
    """Build the web application; the caller starts and stops ``fanout`` (see cli.run).
    ``front_door``: who may call which endpoint (:mod:`rwrouter.server.frontdoor`; None:
    anyone, every endpoint)."""
    middlewares = [] if front_door is None else [front_door.middleware]
    app = web.Application(client_max_size=settings.max_request_bytes, middlewares=middlewares)
    if front_door is not None:
        app.on_response_prepare.append(front_door.add_headers)
    app[FANOUT], app[SETTINGS], app[READY] = fanout, settings, [False]
    app[RECEIVE_METRICS] = metrics.receive
    # With the accelerator an ordinary body is decoded in about a millisecond: on the loop.
    app[DECODERS] = Decoders(inline_body=LARGE_BODY if ACCELERATED else 0)
    app[BODIES] = BodyGate.of(settings)
    app[REFUSALS_LOGGED] = Throttle()
    app[RELOAD] = _no_reload
    app[LIFECYCLE] = front_door is None or front_door.lifecycle
    app[BALANCE] = None

    async def expose() -> tuple[bytes, str]:
        return metrics.exposition()

    async def audit(top: int, by: str) -> dict[str, Any]:  # per name: off the event loop
        return await asyncio.to_thread(fanout.audit.report, time.monotonic(), top=top, by=by)

    app[EXPOSE] = expose
    app[AUDIT] = audit
    app[AUDIT_ANSWERS], app[STATUS_ANSWERS] = AuditAnswers(), StatusAnswers()
    app.on_cleanup.append(_shutdown_decoders)
    for path in WRITE_PATHS:
        app.router.add_post(path, handle_write)
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/-/healthy", handle_healthy)
    app.router.add_get("/-/ready", handle_ready)
    app.router.add_post("/-/reload", handle_reload)
    app.router.add_put("/-/reload", handle_reload)
    app.router.add_get("/", handle_index)
    app.router.add_get("/-/status", handle_status)
    app.router.add_get("/-/audit", handle_audit)
    return app
