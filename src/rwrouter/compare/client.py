"""The I/O of ``rwrouter compare``: range queries to the two stores, timed (aiohttp client).

A :class:`Store` is one store's query API base and how its requests authenticate: a
destination with ``sigv4`` signs each ``GET .../api/v1/query_range`` with its own credentials
(:mod:`rwrouter.auth.credentials`, service ``aps`` unless the block says otherwise; after a
401 or 403 the credentials are refreshed and the run is sent once more, as remote write
does), one with ``basic_auth`` or ``authorization`` sends that, and its ``tls_config`` and
``proxy_url`` apply. :func:`run_query` runs a query ``repeat`` times on both stores, one
request at a time, alternating which store goes first; every run is bounded by ``timeout``
seconds and its answer by :data:`MAX_ANSWER_BYTES`. Nothing here raises for what a store
answers: a timeout or an error is an :class:`~rwrouter.compare.report.Outcome`.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlencode

import aiohttp
import yarl

from rwrouter.auth.credentials import sign
from rwrouter.auth.schemes import Authenticator, SigV4, authenticator_for
from rwrouter.compare.parity import AnswerError, Matrix, parse_matrix
from rwrouter.compare.report import Outcome
from rwrouter.compare.targets import Window
from rwrouter.config.model import DestinationConfig
from rwrouter.send.transport import ssl_context_for

__all__ = ["MAX_ANSWER_BYTES", "Store", "open_store", "run_queries", "run_query"]

#: The largest answer read (bytes): a 24 h range at 30 s of 1,000 series is about 100 MiB.
MAX_ANSWER_BYTES = 512 << 20
USER_AGENT = "rwrouter-compare"


@dataclass(frozen=True)
class Store:
    """One store: its ``role`` (``self-hosted`` or ``workspace``), query API ``base`` URL,
    authenticator, and the destination's TLS context and proxy."""

    role: str
    base: str
    auth: Authenticator
    ssl: ssl.SSLContext | None
    proxy: str | None


async def open_store(role: str, base: str, dest: DestinationConfig, *, index: int) -> Store:
    """The :class:`Store` of destination ``dest`` (``remote_write[index]``) at ``base``.
    Raises ConfigError (no signing region), CredentialsError (no AWS credentials), OSError or
    ssl.SSLError (a TLS file)."""
    auth = await authenticator_for(dest, path=f"remote_write[{index}]")
    context = ssl_context_for(dest.tls_config) if dest.tls_config is not None else None
    return Store(role=role, base=base, auth=auth, ssl=context, proxy=dest.proxy_url)


def query_url(base: str, query: str, window: Window) -> str:
    """``base/api/v1/query_range?`` with ``end``, ``query``, ``start``, ``step`` sorted and
    encoded as SigV4's canonical query string wants them (RFC 3986 unreserved characters
    kept, every other byte ``%XX``), so that the URL sent is the one signed."""
    params = sorted(
        {
            "query": query,
            "start": f"{window.start:.3f}",
            "end": f"{window.end:.3f}",
            "step": f"{window.step:g}",
        }.items()
    )
    return f"{base}/api/v1/query_range?{urlencode(params, quote_via=quote, safe='-_.~')}"


async def _headers(store: Store, url: str) -> dict[str, str]:
    if isinstance(store.auth, SigV4):
        source = store.auth.source
        headers = sign(
            method="GET",
            url=url,
            headers={},
            body=b"",
            credentials=await source.frozen(),
            region=source.region,
            service=source.service,
            fixed={},
        )
    else:
        headers = await store.auth.headers(url=url, body=b"", base={})
    return {**headers, "User-Agent": USER_AGENT, "Accept": "application/json"}


async def _read(response: aiohttp.ClientResponse) -> bytes:
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise AnswerError(f"answer over {MAX_ANSWER_BYTES:,} bytes (use a larger --step)")
        chunks.append(chunk)
    return b"".join(chunks)


async def _attempt(
    session: aiohttp.ClientSession, store: Store, url: str
) -> tuple[int, bytes, float]:
    headers = await _headers(store, url)
    began = time.perf_counter()
    async with session.get(
        yarl.URL(url, encoded=True),
        headers=headers,
        ssl=store.ssl if store.ssl is not None else True,
        proxy=store.proxy,
    ) as response:
        body = await _read(response)
    return response.status, body, time.perf_counter() - began


async def run_once(
    session: aiohttp.ClientSession, store: Store, url: str, *, timeout: float
) -> tuple[Outcome, Matrix | None]:
    """One run of ``url`` on ``store`` within ``timeout`` seconds (signing included): its
    :class:`Outcome` and, for a 200 range query result, its series."""
    try:
        async with asyncio.timeout(timeout):
            status, body, seconds = await _attempt(session, store, url)
            if status in (401, 403) and await store.auth.refresh_after(status=status, body_text=""):
                status, body, seconds = await _attempt(session, store, url)
    except TimeoutError:
        return Outcome(None, timed_out=True, error=f"timed out after {timeout:g}s"), None
    except (aiohttp.ClientError, OSError, AnswerError) as exc:
        return Outcome(None, error=_one_line(f"no answer: {exc}")), None
    try:
        document = json.loads(body)
        if status != 200 and not isinstance(document, Mapping):
            raise ValueError
        matrix = parse_matrix(document)
    except (ValueError, AnswerError, RecursionError) as exc:  # JSONDecodeError: a ValueError
        reason = str(exc) if isinstance(exc, AnswerError) else body[:200].decode(errors="replace")
        return Outcome(None, error=_one_line(f"HTTP {status}: {reason}")), None
    if status != 200:
        return Outcome(None, error=f"HTTP {status}"), None
    return Outcome(seconds), matrix


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


async def run_query(
    session: aiohttp.ClientSession,
    stores: tuple[Store, Store],
    query: str,
    window: Window,
    *,
    repeat: int,
    timeout: float,
) -> dict[str, tuple[list[Outcome], Matrix | None]]:
    """Run ``query`` ``repeat`` times on both ``stores`` (self-hosted, workspace), one
    request at a time, the store that goes first alternating run by run. Returns, by role,
    every run's :class:`Outcome` and the series of the first answer (None: none)."""
    results: dict[str, tuple[list[Outcome], Matrix | None]] = {s.role: ([], None) for s in stores}
    for run in range(repeat):
        for store in stores if run % 2 == 0 else stores[::-1]:
            url = query_url(store.base, query, window)
            outcome, matrix = await run_once(session, store, url, timeout=timeout)
            outcomes, first = results[store.role]
            outcomes.append(outcome)
            results[store.role] = (outcomes, first if first is not None else matrix)
    return results


async def run_queries(
    stores: tuple[Store, Store],
    queries: Sequence[str],
    window: Window,
    *,
    repeat: int,
    timeout: float,
) -> AsyncIterator[dict[str, tuple[list[Outcome], Matrix | None]]]:
    """:func:`run_query` for each of ``queries`` in turn, on one HTTP session, yielding each
    query's results as they come (the caller compares them and lets them go: one query's
    answers are held at a time)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
        for query in queries:
            yield await run_query(session, stores, query, window, repeat=repeat, timeout=timeout)
