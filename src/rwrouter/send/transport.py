"""HTTP transport to one destination: the :class:`WriteClient` protocol the sending side
depends on, and :class:`Transport`, its aiohttp implementation.

:class:`Transport` sends a ready-made body as ``bytes`` (so aiohttp sets Content-Length; never
chunked — a streamed body would break the SigV4 payload hash) with exactly the headers it is
given; aiohttp adds only Host (the destination's own, with the port only when it is not the
default one) and Content-Length. Incoming client headers never reach this layer.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from rwrouter.config import DestinationConfig, TLSConfig, redact_url
from rwrouter.config.tlsfiles import client_context
from rwrouter.errors import TransportError

BODY_HEAD_BYTES = 1024  # how much of an error answer is kept for logs


@dataclass(frozen=True, slots=True)
class Answer:
    """A destination's answer: status, headers (names looked up case-insensitively, e.g. the
    ``X-Prometheus-Remote-Write-*-Written`` counts of :meth:`rwrouter.protocol.Written.parse`),
    and the first KiB of its body."""

    status: int
    headers: Mapping[str, str]
    body_head: bytes

    @property
    def text(self) -> str:
        """The kept part of the body as text (undecodable bytes replaced)."""
        return self.body_head.decode("utf-8", "replace").strip()


class WriteClient(Protocol):
    """The HTTP client of one destination, as its requests
    (:class:`~rwrouter.send.attempts.Attempts`) and the destination's lifecycle use it:
    :class:`Transport` in the router, test clients in the tests (``tests/support``).

    ``url``: the destination's URL (requests are signed for it). :meth:`post` sends one
    ready body (a snappy-compressed write request, ``bytes``) with exactly ``headers`` and
    returns the :class:`Answer`, whatever its status; it raises :class:`TransportError` when
    there is no answer. :meth:`start` before the first post, :meth:`close` after the last.
    """

    @property
    def url(self) -> str: ...

    async def start(self) -> None: ...

    async def post(self, body: bytes, headers: Mapping[str, str]) -> Answer: ...

    async def close(self) -> None: ...


class Transport:
    """A :class:`WriteClient` on one aiohttp session per destination. ``timeout``: seconds
    for a whole attempt (Prometheus ``remote_timeout``)."""

    def __init__(
        self,
        *,
        url: str,
        timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        proxy: str | None = None,
    ) -> None:
        self.url = url
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._server_hostname = server_hostname
        self._proxy = proxy
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the connection pool."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
                auto_decompress=False,
            )

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        """POST ``body`` with ``headers``; returns the answer, or raises TransportError."""
        if self._session is None:
            raise RuntimeError("transport not started")
        try:
            async with self._session.post(
                self.url,
                data=body,
                headers=dict(headers),
                ssl=self._ssl,
                server_hostname=self._server_hostname,
                proxy=self._proxy,
                allow_redirects=False,  # a redirected POST would lose its body
            ) as resp:
                head = await resp.content.read(BODY_HEAD_BYTES)
                return Answer(resp.status, resp.headers.copy(), head)  # names case-insensitive
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise TransportError(_scrub(f"{type(exc).__name__}: {exc}".rstrip(": "))) from exc


def _scrub(text: str) -> str:
    """An error text with every URL in it redacted (:func:`~rwrouter.config.redact_url`: user
    info and query values may hold credentials)."""
    return " ".join(redact_url(word) if "://" in word else word for word in text.split(" "))


def transport_for(dest: DestinationConfig, *, path: str | None = None) -> Transport:
    """The transport of a ``remote_write`` entry: its URL, timeout, TLS and proxy. ``path``
    (``remote_write[0]``) names the destination in a TLS file's ConfigError."""
    where = f"{path}.tls_config" if path else f"tls_config (destination {dest.name!r})"
    return Transport(
        url=dest.url,
        timeout=dest.remote_timeout,
        ssl_context=ssl_context_for(dest.tls_config, path=where) if dest.tls_config else None,
        server_hostname=dest.tls_config.server_name if dest.tls_config else None,
        proxy=dest.proxy_url,
    )


def ssl_context_for(tls: TLSConfig, *, path: str = "tls_config") -> ssl.SSLContext:
    """An SSL context from a ``tls_config`` (Prometheus field semantics): a destination's, or
    that of ``rwrouter audit --http.config.file``
    (:func:`rwrouter.config.tlsfiles.client_context`, as ``check-config`` loads it). Raises
    ConfigError naming ``path.ca_file`` (``cert_file``, ``key_file``) when a file cannot be
    read or used."""
    return client_context(
        path,
        ca_file=tls.ca_file,
        cert_file=tls.cert_file,
        key_file=tls.key_file,
        insecure_skip_verify=tls.insecure_skip_verify,
        min_version=tls.min_version,
    )
