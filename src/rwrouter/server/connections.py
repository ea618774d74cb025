"""The bounds of the listener's connections: at most ``server.max_connections`` open (more
are accepted and closed at once), headers complete within ``server.header_read_timeout``
seconds, idle keep-alive connections closed after ``server.idle_timeout`` seconds, and a
failing accept (no file descriptor or memory left) logged once per episode, not per accept.

Go's ``http.Server`` (vmagent's: ``ReadHeaderTimeout`` 5 s, ``IdleTimeout``
``-http.idleConnTimeout`` 1m) times headers from a connection's start, and on a keep-alive
connection from the first byte of the next request; so does :class:`BoundedHandler`, an
aiohttp ``RequestHandler`` (one timer handle per connection, armed at those two moments and
cancelled when the headers are parsed). The idle timeout is aiohttp's ``keepalive_timeout``.
:func:`listen` serves an aiohttp ``web.Server`` with it (``loop.create_server``).

When ``accept()`` fails with EMFILE, ENFILE, ENOBUFS or ENOMEM, asyncio
(``selector_events._accept_connection``) passes the error to the loop's exception handler
for every connection waiting in the backlog, and retries a second later: its default handler
logs each with a traceback (thousands of lines a second). :class:`AcceptErrors`, the loop's
exception handler while the listener runs, counts them (``rwrouter_accept_errors_total``),
logs the first of an episode and, once none failed for :data:`EPISODE_QUIET` seconds, its end
with the count; anything else goes to the handler it replaced.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import ssl
from typing import Any

from aiohttp import web

from rwrouter.config import ServerConfig
from rwrouter.logs import kv
from rwrouter.metrics import ReceiveMetrics
from rwrouter.reasons import ConnectionReason

__all__ = ["AcceptErrors", "BoundedHandler", "Connections", "listen"]

log = logging.getLogger("rwrouter.server")

RESOURCE_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))
BACKLOG = 128  # the listen backlog (aiohttp's TCPSite default)
EPISODE_QUIET = 5.0  # seconds without a failed accept that end an episode of them


class AcceptErrors:
    """The exception handler of ``loop`` between :meth:`install` and :meth:`uninstall`:
    see the module docstring. An episode ends :data:`EPISODE_QUIET` seconds after its last
    failed accept (connections accepted meanwhile, as descriptors come and go at the limit,
    do not end it)."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop, metrics: ReceiveMetrics) -> None:
        self.loop = loop
        self.metrics = metrics
        self.failures = 0  # of the episode under way (0: none)
        self._since = self._last = 0.0  # loop.time() of its first and last failures
        self._timer: asyncio.TimerHandle | None = None
        self._previous: Any = None

    def install(self) -> None:
        self._previous = self.loop.get_exception_handler()
        self.loop.set_exception_handler(self._handle)

    def uninstall(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.loop.get_exception_handler() == self._handle:
            self.loop.set_exception_handler(self._previous)

    def _handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if not (
            isinstance(exc, OSError)
            and exc.errno in RESOURCE_ERRNOS
            and str(context.get("message", "")).startswith("socket.accept()")
        ):
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        self.metrics.accept_errors.inc()
        self._last = loop.time()
        if not self.failures:
            self._since = self._last
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            log.error(
                kv(
                    msg="cannot accept connections: no file descriptor or memory left; "
                    "retrying every second (not logged again during this episode)",
                    error=errno.errorcode.get(exc.errno or 0, exc.errno),
                    fd_limit=soft,
                )
            )
            self._timer = loop.call_later(EPISODE_QUIET, self._check_end)
        self.failures += 1

    def _check_end(self) -> None:
        """End the episode once no accept failed for :data:`EPISODE_QUIET` seconds."""
        quiet = self.loop.time() - self._last
        if quiet < EPISODE_QUIET:
            self._timer = self.loop.call_later(EPISODE_QUIET - quiet, self._check_end)
            return
        self._timer = None
        log.warning(
            kv(
                msg="accepting connections again",
                failed_accepts=self.failures,
                seconds=round(self._last - self._since, 1),
            )
        )
        self.failures = 0


class Connections:
    """What a listener's connections share: the bounds (``settings``), the count of open
    ones (``open``), the metrics."""

    def __init__(self, *, settings: ServerConfig, metrics: ReceiveMetrics) -> None:
        self.max_connections = settings.max_connections
        self.header_timeout = settings.header_read_timeout
        self.idle_timeout = settings.idle_timeout
        self.metrics = metrics
        self.open = 0


class BoundedHandler(web.RequestHandler):
    """aiohttp's connection protocol with the bounds of ``connections`` (see the module
    docstring); ``kwargs``: aiohttp's ``RequestHandler`` arguments. Reads two attributes of
    aiohttp's (``_waiter``: set while waiting for the next request; ``_request_count``:
    requests parsed) and wraps its keep-alive check (``_process_keepalive``) to count the
    idle closes."""

    __slots__ = ("_connections", "_header_timer", "_parsed_at_arm", "_refused")

    def __init__(self, manager: web.Server, *, connections: Connections, **kwargs: Any) -> None:
        super().__init__(manager, keepalive_timeout=connections.idle_timeout, **kwargs)
        self._connections = connections
        self._header_timer: asyncio.TimerHandle | None = None
        self._parsed_at_arm = 0
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        connections = self._connections
        if connections.open >= connections.max_connections:
            self._refused = True
            connections.metrics.connections_refused.labels(ConnectionReason.MAX_CONNECTIONS).inc()
            transport.close()
            return
        connections.open += 1
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._refused:
            return
        self._connections.open -= 1
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self._waiter is not None:
            self._arm_header_timer()  # the first bytes of the next request
        super().data_received(data)
        if self._header_timer is not None and self._request_count != self._parsed_at_arm:
            self._header_timer.cancel()  # its headers are parsed
            self._header_timer = None

    def _arm_header_timer(self) -> None:
        self._parsed_at_arm = self._request_count
        self._header_timer = self._loop.call_later(
            self._connections.header_timeout, self._header_timeout
        )

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._request_count == self._parsed_at_arm and self.transport is not None:
            self._connections.metrics.connections_closed.labels(
                ConnectionReason.HEADER_TIMEOUT
            ).inc()
            self.force_close()

    def _process_keepalive(self) -> None:
        transport = self.transport
        super()._process_keepalive()
        if transport is not None and self.transport is None:  # closed: idle too long
            self._connections.metrics.connections_closed.labels(ConnectionReason.IDLE_TIMEOUT).inc()


async def listen(
    server: web.Server,
    connections: Connections,
    *,
    host: str | None,
    port: int,
    reuse_port: bool,
    ssl_context: ssl.SSLContext | None = None,
    **handler_args: Any,
) -> asyncio.Server:
    """Listen on ``host:port`` (every interface for None; ``reuse_port``: ``SO_REUSEPORT``)
    and serve ``server`` (``runner.server`` of an aiohttp ``AppRunner`` set up) on
    :class:`BoundedHandler` connections; ``ssl_context``: TLS, its handshake bounded by
    ``header_read_timeout`` too; ``handler_args``: aiohttp ``RequestHandler`` arguments (as
    given to the ``AppRunner``). Close the returned server before the runner's cleanup.
    Raises OSError if the port is taken."""
    loop = asyncio.get_running_loop()

    def factory() -> BoundedHandler:
        return BoundedHandler(server, connections=connections, loop=loop, **handler_args)

    return await loop.create_server(
        factory,
        host,
        port,
        reuse_address=True,
        reuse_port=reuse_port,
        backlog=BACKLOG,
        ssl=ssl_context,
        ssl_handshake_timeout=connections.header_timeout if ssl_context is not None else None,
    )
