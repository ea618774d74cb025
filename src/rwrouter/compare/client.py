"""The I/O of ``rwrouter compare``: range queries to the two stores, timed (aiohttp client).

A :class:`Store` is one store's query API base and how its requests authenticate: a
destination with ``sigv4`` signs each ``POST .../api/v1/query_range`` with its own credentials
(:mod:`rwrouter.auth.credentials`, service ``aps`` unless the block says otherwise; after a
401 or 403 the credentials are refreshed and the run is sent once more, as remote write
does), one with ``basic_auth`` or ``authorization`` sends that, and its ``tls_config`` and
``proxy_url`` apply. :func:`run_query` runs a query ``repeat`` times on both stores, one
request at a time, alternating which store goes first; every run is bounded by ``timeout``
seconds and its answer by ``max_answer_bytes`` (default :data:`MAX_ANSWER_BYTES`).

Every query is a POST with an ``application/x-www-form-urlencoded`` body (``query``,
``start``, ``end``, ``step``), never a GET: Prometheus (HTTP API: "You can URL-encode these
parameters directly in the request body by using the POST method and Content-Type:
application/x-www-form-urlencoded header. This is useful when specifying a large query that
may breach server-side URL character limits") and the managed workspace (AMP API reference,
QueryMetrics: "Valid HTTP verbs: GET, POST"; Grafana's Prometheus data source posts its
queries so by default) both take it, so a long query (a ~24 KB one gets 400 from Prometheus
as a GET) needs no second code path; SigV4 signs the body's sha256, so what is signed is
what is sent.

Redirects are not followed: a 3xx fails that run, naming the host it points to (following
it would send the workspace's signed headers, session token included, to another host and
report parity against that host's data). Nothing here raises for what a store answers: a
timeout, an error, an answer too large or not a range query result (not JSON, nested too
deep to parse, ...) is an :class:`~rwrouter.compare.report.Outcome` of that run.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import quote, quote_plus, urlencode, urljoin, urlsplit

import aiohttp
import yarl

from rwrouter.auth.credentials import sign
from rwrouter.auth.schemes import Authenticator, SigV4, authenticator_for
from rwrouter.compare.parity import AnswerError, Matrix, parse_matrix
from rwrouter.compare.report import Outcome
from rwrouter.compare.targets import Window, seconds_text
from rwrouter.config.model import DestinationConfig
from rwrouter.errors import CredentialsError
from rwrouter.send.transport import ssl_context_for

__all__ = [
    "FORM",
    "MAX_ANSWER_BYTES",
    "Store",
    "open_store",
    "query_form",
    "query_url",
    "run_queries",
    "run_query",
]

#: The default largest answer read (bytes). A parsed answer takes about 14 times its size
#: (measured: ``json.loads`` and :func:`~rwrouter.compare.parity.parse_matrix` of Prometheus
#: matrices; more by RSS); the first answers of both stores are held until both are in
#: (:func:`run_query`), and one more is read meanwhile: 64 MiB keeps ``rwrouter compare``
#: within about 2 GB. A 24 h range at 30 s (2,880 points) of
#: 200 series is about 36 MiB; for more, narrow the query or the range, or raise
#: ``--max-answer-bytes``.
MAX_ANSWER_BYTES = 64 << 20
USER_AGENT = "rwrouter-compare"
R = TypeVar("R")  # what run_query's judge makes of both stores' first answers
FORM = "application/x-www-form-urlencoded"


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
    Raises ConfigError (no signing region; a TLS file that cannot be used, naming
    ``remote_write[index].tls_config.<key>``), CredentialsError (no AWS credentials)."""
    path = f"remote_write[{index}]"
    auth = await authenticator_for(dest, path=path)
    tls = dest.tls_config
    context = None if tls is None else ssl_context_for(tls, path=f"{path}.tls_config")
    return Store(role=role, base=base, auth=auth, ssl=context, proxy=dest.proxy_url)


def query_url(base: str) -> str:
    """The range query endpoint of a query API ``base``: ``base/api/v1/query_range``."""
    return f"{base}/api/v1/query_range"


def query_form(query: str, window: Window) -> bytes:
    """The POST body of a range query: ``end``, ``query``, ``start``, ``step`` sorted and
    encoded as SigV4's canonical query string wants them (RFC 3986 unreserved characters
    kept, every other byte ``%XX``); times and step exact (:func:`seconds_text`)."""
    params = sorted(
        {
            "query": query,
            "start": seconds_text(window.start_ms),
            "end": seconds_text(window.end_ms),
            "step": seconds_text(window.step_ms),
        }.items()
    )
    return urlencode(params, quote_via=quote, safe="-_.~").encode("ascii")


async def _headers(store: Store, url: str, body: bytes) -> dict[str, str]:
    if isinstance(store.auth, SigV4):
        source = store.auth.source
        headers = sign(
            method="POST",
            url=url,
            headers={},
            body=body,
            credentials=await source.frozen(),
            region=source.region,
            service=source.service,
            fixed={"Content-Type": FORM},
        )
    else:
        headers = await store.auth.headers(url=url, body=body, base={"Content-Type": FORM})
    return {**headers, "User-Agent": USER_AGENT, "Accept": "application/json"}


def too_large(limit: int) -> AnswerError:
    """The failure of an answer over ``limit`` bytes, saying what to do."""
    return AnswerError(
        f"answer over {limit:,} bytes: narrow the query or --range, use a larger --step, "
        "or raise --max-answer-bytes"
    )


async def _read(response: aiohttp.ClientResponse, limit: int) -> bytes:
    if (response.content_length or 0) > limit:
        raise too_large(limit)
    body = bytearray()
    async for chunk in response.content.iter_chunked(1 << 16):
        if len(body) + len(chunk) > limit:
            raise too_large(limit)
        body += chunk
    return bytes(body)


#: Headers whose values are not secret (the rest may be: a signature, a session token, a
#: password, a configured API key).
PLAIN_HEADERS = frozenset({"content-type", "user-agent", "accept", "x-amz-date"})


def secrets_of(headers: Mapping[str, str]) -> list[str]:
    """What a store must not get back into our output from ``headers`` (the request's), longest
    first: each value of a header not in :data:`PLAIN_HEADERS`; each of its words (split at
    spaces and commas: a ``Basic`` credential, SigV4's ``Signature=...``), with and without
    base64 padding; the value of each ``key=value`` word and its part before a ``/`` (the
    access key of ``Credential=AKID/date/...``) — those of 8 characters or more — and each of
    these percent-encoded as a URL would carry it."""
    values = {v for k, v in headers.items() if k.lower() not in PLAIN_HEADERS}
    parts: set[str] = set()
    for value in values:
        for word in re.split(r"[\s,]+", value):
            parts.update((word, word.rstrip("=")))
            key, sep, rest = word.partition("=")
            if sep and key.isalpha() and rest:
                parts.update((rest, rest.split("/")[0]))
    found = values | {p for p in parts if len(p) >= 8}
    found |= {quote(v, safe="") for v in found} | {quote_plus(v) for v in found}
    return sorted((v for v in found if v), key=len, reverse=True)


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with each of ``secrets`` replaced by ``<secret>`` (a store that echoes the
    request's headers in its error must not put a credential into the report)."""
    for secret in secrets:
        text = text.replace(secret, "<secret>")
    return text


async def _attempt(
    session: aiohttp.ClientSession, store: Store, url: str, body: bytes, limit: int
) -> tuple[int, str | None, bytes, float, list[str]]:
    """One POST of ``body`` to ``url``: status, Location, the answer (at most ``limit``
    bytes), seconds taken, and the secrets its headers held (:func:`secrets_of`)."""
    headers = await _headers(store, url, body)
    began = time.perf_counter()
    async with session.post(
        yarl.URL(url, encoded=True),
        data=body,
        headers=headers,
        ssl=store.ssl if store.ssl is not None else True,
        proxy=store.proxy,
        allow_redirects=False,
    ) as response:
        answer = await _read(response, limit)
    location = response.headers.get("Location")
    return response.status, location, answer, time.perf_counter() - began, secrets_of(headers)


def redirect_reason(status: int, url: str, location: str | None) -> str:
    """The one-line failure of a 3xx answer to ``url``: the host (and port) its ``Location``
    points to, never its userinfo, path or query string."""
    if location is None:
        return f"HTTP {status}: a redirect without a Location (redirects are not followed)"
    try:
        target = urlsplit(urljoin(url, location))
        host = target.hostname or "?"
        where = f"{host}:{target.port}" if target.port is not None else host
    except ValueError:
        where = "an invalid URL"
    return (
        f"HTTP {status}: redirected to {where} (redirects are not followed: "
        "give the final URL with --self-hosted/--workspace)"
    )


async def run_once(
    session: aiohttp.ClientSession,
    store: Store,
    body: bytes,
    *,
    timeout: float,
    max_answer_bytes: int = MAX_ANSWER_BYTES,
) -> tuple[Outcome, Matrix | None]:
    """One run of the range query ``body`` (:func:`query_form`) on ``store`` within
    ``timeout`` seconds (signing included), reading at most ``max_answer_bytes``: its
    :class:`Outcome` and, for a 200 range query result, its series."""
    url = query_url(store.base)
    try:
        async with asyncio.timeout(timeout):
            status, location, answer, seconds, secrets = await _attempt(
                session, store, url, body, max_answer_bytes
            )
            if status in (401, 403) and await store.auth.refresh_after(status=status, body_text=""):
                status, location, answer, seconds, secrets = await _attempt(
                    session, store, url, body, max_answer_bytes
                )
    except TimeoutError:
        return Outcome(None, timed_out=True, error=f"timed out after {timeout:g}s"), None
    except AnswerError as exc:  # over max_answer_bytes: what to do, not "no answer"
        return Outcome(None, error=_one_line(str(exc))), None
    except (aiohttp.ClientError, OSError, CredentialsError) as exc:
        return Outcome(None, error=_one_line(f"no answer: {exc}")), None
    if 300 <= status < 400:
        return Outcome(None, error=_one_line(redirect_reason(status, url, location))), None
    return _judge(status, answer, seconds, secrets)


def _judge(
    status: int, answer: bytes, seconds: float, secrets: Sequence[str]
) -> tuple[Outcome, Matrix | None]:
    try:
        document = json.loads(answer)
        if status != 200 and not isinstance(document, Mapping):
            raise ValueError
        if isinstance(document, Mapping) and document.get("status") != "success":
            # an error answer's text is cut to one line later: redacted before, as a whole
            document = {
                k: redact(v, secrets) if isinstance(v, str) else v for k, v in document.items()
            }
        matrix = parse_matrix(document)
    except (ValueError, AnswerError) as exc:  # JSONDecodeError, UnicodeDecodeError: ValueError
        if isinstance(exc, AnswerError):
            reason = redact(str(exc), secrets)
        else:  # redacted before it is cut, so that no part of a secret is left
            reason = redact(answer[: 1 << 14].decode(errors="replace"), secrets)[:200]
        return Outcome(None, error=_one_line(f"HTTP {status}: {reason}")), None
    except RecursionError:
        reason = "not a range query result: JSON nested too deep to parse"
        return Outcome(None, error=f"HTTP {status}: {reason}"), None
    if status != 200:
        return Outcome(None, error=f"HTTP {status}"), None
    return Outcome(seconds), matrix


def _one_line(text: str) -> str:
    """``text`` on one line of at most 300 characters, printable as UTF-8 (a lone surrogate
    from a JSON ``\\ud800`` escape becomes ``\\ud800``)."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return " ".join(text.split())[:300]


async def run_query(
    session: aiohttp.ClientSession,
    stores: tuple[Store, Store],
    query: str,
    window: Window,
    judge: Callable[[Matrix, Matrix], R],
    *,
    repeat: int,
    timeout: float,
    max_answer_bytes: int = MAX_ANSWER_BYTES,
) -> tuple[dict[str, list[Outcome]], R | None]:
    """Run ``query`` ``repeat`` times on both ``stores`` (self-hosted, workspace), one
    request at a time, the store that goes first alternating run by run (:func:`run_once`).
    Returns every run's :class:`Outcome` by role, and ``judge(self-hosted series, workspace
    series)`` of each store's first answer (None: a store never answered). ``judge`` runs as
    soon as both first answers are in, and they are let go then: at most two parsed answers
    and the one being read are held at a time."""
    outcomes: dict[str, list[Outcome]] = {s.role: [] for s in stores}
    first: dict[str, Matrix] = {}
    judged: R | None = None
    done = False
    body = query_form(query, window)
    for run in range(repeat):
        for store in stores if run % 2 == 0 else stores[::-1]:
            outcome, matrix = await run_once(
                session, store, body, timeout=timeout, max_answer_bytes=max_answer_bytes
            )
            outcomes[store.role].append(outcome)
            if matrix is not None and not done:
                first.setdefault(store.role, matrix)
            del matrix
            if not done and len(first) == 2:
                judged, done = judge(first["self-hosted"], first["workspace"]), True
                first.clear()
    return outcomes, judged


async def run_queries(
    stores: tuple[Store, Store],
    queries: Sequence[str],
    window: Window,
    judge: Callable[[Matrix, Matrix], R],
    *,
    repeat: int,
    timeout: float,
    max_answer_bytes: int = MAX_ANSWER_BYTES,
) -> AsyncIterator[tuple[dict[str, list[Outcome]], R | None]]:
    """:func:`run_query` for each of ``queries`` in turn, on one HTTP session, yielding each
    query's outcomes and judgement as they come."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
        for query in queries:
            yield await run_query(
                session,
                stores,
                query,
                window,
                judge,
                repeat=repeat,
                timeout=timeout,
                max_answer_bytes=max_answer_bytes,
            )
