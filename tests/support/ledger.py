"""A load driver that keeps a ledger of what was acknowledged, and readers of what the stores hold,
for the fault tests (``tests/faults/``).

A sample is identified by its label set and timestamp: a :data:`SampleKey` ``(labels, ts_ms)``,
labels as sorted (name, value) pairs. Delivery is counted by unique keys: a store holds a key or
it does not, however many times it was sent.

:class:`Ledger` sends remote write 1.0 requests (snappy block + protobuf,
:mod:`tests.support.series`), or 2.0 ones (``message=RW2_MESSAGE``: symbolized as Prometheus's
sender does, :mod:`tests.support.rw2`), to a router from ``streams`` concurrent senders, each
owning its series (so each series is written in timestamp order, as one Prometheus shard would).
Every request carries one new sample per series of its stream, at a timestamp unique to the
stream. Like Prometheus it re-sends the same body after a 5xx, a 429 or no answer (backoff
doubling from ``min_backoff_s`` to ``max_backoff_s``; a ``Retry-After`` in seconds is honoured,
capped at ``retry_after_cap_s``), until it is acknowledged with a 2xx, so when
:meth:`Ledger.stop` returns everything sent was acknowledged (or is listed in
:attr:`Ledger.unacknowledged`). Other 4xx are not retried and are listed in
:attr:`Ledger.refused`. RW 2.0 answers must carry the Written headers as the spec and
Prometheus 3 want them (:attr:`Ledger.written_errors`). Each attempt is recorded with its start
(``time.monotonic()``), duration and status, for latency percentiles::

    ledger = Ledger(router.url, streams=make_streams("outage", streams=2, series=20))
    ledger.start()
    ...                             # faults
    ledger.stop(timeout_s=30)
    ledger.acknowledged             # set of SampleKey
    p99(ledger.latencies(since=t0, until=t1))

Readers: :func:`workspace_keys` (the workspace double's inspection API, in process) and
:func:`prometheus_keys` (a real Prometheus's query API: a range-vector selector evaluated at an
instant returns raw samples).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import aiohttp

from rwrouter.doubles.prometheus import PrometheusProcess
from rwrouter.doubles.workspace import WorkspaceDouble
from rwrouter.protocol import MESSAGES, RW1_MESSAGE, RW2_MESSAGE, Written, request_headers
from tests.support.rw2 import encode_v2, symbolize
from tests.support.series import LabelSet, Series, encode, label_set, write_request

__all__ = [
    "Attempt",
    "Ledger",
    "SampleKey",
    "WrittenError",
    "make_streams",
    "p99",
    "percentile",
    "prometheus_keys",
    "workspace_keys",
]

#: A sample's identity: (label set as sorted (name, value) pairs, timestamp in ms).
SampleKey = tuple[LabelSet, int]
#: Bits of the staleness marker (a NaN with a payload); Prometheus queries never return it.
STALE_BITS = 0x7FF0000000000002


@dataclass(frozen=True, slots=True)
class Attempt:
    """One POST: its stream, start (``time.monotonic()`` seconds), duration in seconds, HTTP
    status (None: no answer) and the samples it carried."""

    stream: int
    started: float
    seconds: float
    status: int | None
    samples: int


@dataclass(frozen=True, slots=True)
class WrittenError:
    """An RW 2.0 answer whose ``X-Prometheus-Remote-Write-*-Written`` headers break the spec:
    its status, what the request carried, and what the answer said (None: no header)."""

    status: int
    carried: Written
    answered: Written | None


def make_streams(tag: str, *, streams: int, series: int) -> list[list[LabelSet]]:
    """``streams`` disjoint lists of ``series`` label sets, half named ``critical_<tag>_<n>``
    and half ``bulk_<tag>_<n>`` (n in 0..4), told apart by ``stream`` and ``series`` labels."""
    return [
        [
            label_set(
                {
                    "__name__": f"{'critical' if j % 2 == 0 else 'bulk'}_{tag}_{j % 5}",
                    "stream": str(s),
                    "series": str(j),
                }
            )
            for j in range(series)
        ]
        for s in range(streams)
    ]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def p99(values: Sequence[float]) -> float:
    return percentile(values, 99)


class Ledger:
    """The load driver (see the module docstring). ``url``: the router's base URL.

    ``interval_s``: time between the starts of a stream's requests (a stream waits for its
    request to be acknowledged first, as a Prometheus shard does). ``clock_ms``: unix ms for
    sample timestamps (strictly increasing per stream). ``message``: the protobuf message
    sent, one of :data:`rwrouter.protocol.MESSAGES` (RW 1.0 or 2.0; ValueError otherwise).
    """

    def __init__(
        self,
        url: str,
        *,
        streams: Sequence[Sequence[LabelSet]],
        interval_s: float = 0.05,
        request_timeout_s: float = 10.0,
        min_backoff_s: float = 0.02,
        max_backoff_s: float = 0.5,
        retry_after_cap_s: float = 1.0,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        message: str = RW1_MESSAGE,
    ) -> None:
        if message not in MESSAGES:
            raise ValueError(f"unknown protobuf message {message!r}: one of {MESSAGES}")
        self.url = url.rstrip("/") + "/api/v1/write"
        self.message = message
        self._headers = request_headers(message)
        self.streams = [list(s) for s in streams]
        self.interval_s = interval_s
        self.request_timeout_s = request_timeout_s
        self.min_backoff_s, self.max_backoff_s = min_backoff_s, max_backoff_s
        self.retry_after_cap_s = retry_after_cap_s
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._acked: set[SampleKey] = set()
        self._ambiguous: set[SampleKey] = set()
        self._unacked: set[SampleKey] = set()
        self._attempts: list[Attempt] = []
        self._refused: list[tuple[int, str]] = []
        self._written_errors: list[WrittenError] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._give_up_at = math.inf
        self._started = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> Ledger:
        """Start sending from a thread of its own (own event loop)."""
        self._thread = threading.Thread(target=self._run, name="ledger", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("ledger did not start")
        return self

    def stop(self, *, timeout_s: float = 30.0) -> None:
        """Send no new request; wait (at most ``timeout_s``) for the ones under way to be
        acknowledged. What is still not acknowledged then is in :attr:`unacknowledged`."""
        loop, stopping, thread = self._loop, self._stopping, self._thread
        if loop is None or stopping is None or thread is None:
            return
        self._give_up_at = time.monotonic() + timeout_s
        loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout_s + 5)
        if thread.is_alive():
            raise RuntimeError("ledger streams did not end")

    def __enter__(self) -> Ledger:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop(timeout_s=5)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            self._started.set()
            await asyncio.gather(
                *(self._stream(session, i, series) for i, series in enumerate(self.streams))
            )

    # -- sending -------------------------------------------------------------------------
    async def _stream(
        self, session: aiohttp.ClientSession, index: int, series: list[LabelSet]
    ) -> None:
        assert self._stopping is not None
        last_ts = 0
        next_at = time.monotonic()
        while not self._stopping.is_set():
            ts = max(self._clock_ms(), last_ts + 1)
            last_ts = ts
            value = float(ts % 1_000_000)
            body = self._body(Series(labels, [(ts, value + j)]) for j, labels in enumerate(series))
            keys = [(labels, ts) for labels in series]
            await self._send_until_acknowledged(session, index, body, keys)
            next_at = max(next_at + self.interval_s, time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), next_at - time.monotonic())

    def _body(self, series: Iterable[Series]) -> bytes:
        request = write_request(series)  # labels sorted, as Prometheus sends them
        return encode_v2(symbolize(request)) if self.message == RW2_MESSAGE else encode(request)

    async def _send_until_acknowledged(
        self, session: aiohttp.ClientSession, index: int, body: bytes, keys: list[SampleKey]
    ) -> None:
        attempt = 0
        unanswered = False
        while True:
            status, retry_after, text, written = await self._post(session, index, body, len(keys))
            as_promised = status is None or self._written_as_promised(status, written, len(keys))
            if status is not None and 200 <= status < 300:
                if as_promised:  # else Prometheus 3 takes it as not (all) written, not resent
                    with self._lock:
                        self._acked.update(keys)
                        if unanswered:  # an earlier attempt may have been kept: may arrive twice
                            self._ambiguous.update(keys)
                return
            if status is not None and status < 500 and status != 429:
                with self._lock:
                    self._refused.append((status, text[:300]))
                return
            unanswered = unanswered or status is None
            if time.monotonic() > self._give_up_at:
                with self._lock:
                    self._unacked.update(keys)
                return
            await asyncio.sleep(self._delay(attempt, retry_after))
            attempt += 1

    async def _post(
        self, session: aiohttp.ClientSession, index: int, body: bytes, samples: int
    ) -> tuple[int | None, str | None, str, Written | None]:
        """(status or None, Retry-After, body text, the Written headers) of one POST."""
        started = time.monotonic()
        status: int | None = None
        retry_after: str | None = None
        text = ""
        written: Written | None = None
        try:
            async with session.post(self.url, data=body, headers=self._headers) as response:
                text = await response.text()
                status, retry_after = response.status, response.headers.get("Retry-After")
                written = Written.parse(response.headers)
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            text = f"{type(exc).__name__}: {exc}"
        seconds = time.monotonic() - started
        with self._lock:
            self._attempts.append(Attempt(index, started, seconds, status, samples))
        return status, retry_after, text, written

    def _written_as_promised(self, status: int, written: Written | None, samples: int) -> bool:
        """Whether an RW 2.0 answer's ``X-Prometheus-Remote-Write-*-Written`` headers keep
        the RW 2.0 spec ("Required Written Response Headers", read as Prometheus 3's
        queue_manager.go does): every answer has them; a 2xx says it wrote exactly what the
        request carried (Prometheus counts fewer as failed, none as a receiver that ignored the
        Content-Type: a 2xx that breaks this acknowledges nothing); a 5xx or 429 says it
        wrote nothing (the whole request is sent again). A breach is listed in
        :attr:`written_errors`. Always true for RW 1.0."""
        if self.message != RW2_MESSAGE:
            return True
        carried = Written(samples=samples)
        if 200 <= status < 300:
            kept = written == carried
        elif status >= 500 or status == 429:
            kept = written == Written()
        else:  # a refusal may say what it wrote of the request (none, from rwrouter)
            kept = written is not None
        if not kept:
            with self._lock:
                self._written_errors.append(WrittenError(status, carried, written))
        return kept

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after and retry_after.strip().isdigit():
            return min(float(retry_after), self.retry_after_cap_s)
        return min(self.max_backoff_s, self.min_backoff_s * 2.0**attempt)

    # -- the ledger ----------------------------------------------------------------------
    @property
    def acknowledged(self) -> set[SampleKey]:
        """Keys of every sample acknowledged with a 2xx."""
        with self._lock:
            return set(self._acked)

    @property
    def ambiguous(self) -> set[SampleKey]:
        """Acknowledged keys whose request was sent again after an attempt that got no answer
        (the router may have kept that attempt too: the sender's own duplicates)."""
        with self._lock:
            return set(self._ambiguous)

    @property
    def unacknowledged(self) -> set[SampleKey]:
        """Keys given up by :meth:`stop` (its timeout passed before a 2xx)."""
        with self._lock:
            return set(self._unacked)

    @property
    def refused(self) -> list[tuple[int, str]]:
        """(status, body head) of requests refused with a 4xx other than 429 (not retried)."""
        with self._lock:
            return list(self._refused)

    @property
    def written_errors(self) -> list[WrittenError]:
        """RW 2.0 answers whose Written headers broke the spec (empty for RW 1.0)."""
        with self._lock:
            return list(self._written_errors)

    @property
    def attempts(self) -> list[Attempt]:
        with self._lock:
            return list(self._attempts)

    def latencies(self, *, since: float = 0.0, until: float = math.inf) -> list[float]:
        """Seconds of the acknowledged attempts that started in [since, until) (monotonic)."""
        return [
            a.seconds
            for a in self.attempts
            if a.status is not None and 200 <= a.status < 300 and since <= a.started < until
        ]

    def statuses(self) -> dict[str, int]:
        """Attempts by status (``"none"``: no answer)."""
        counts: dict[str, int] = {}
        for a in self.attempts:
            key = str(a.status) if a.status is not None else "none"
            counts[key] = counts.get(key, 0) + 1
        return counts


def by_name(keys: Iterable[SampleKey], pattern: str) -> set[SampleKey]:
    """The keys whose ``__name__`` fully matches the regex ``pattern``."""
    compiled = re.compile(pattern)
    return {key for key in keys if compiled.fullmatch(dict(key[0]).get("__name__", ""))}


def workspace_keys(
    double: WorkspaceDouble,
    *,
    workspace_id: str = "ws-1",
    name: str = ".+",
    include_stale: bool = False,
) -> set[SampleKey]:
    """Keys of the float samples the double stored for series whose ``__name__`` fully matches
    ``name`` (a regex). Staleness markers are left out unless ``include_stale`` (a Prometheus
    query never returns them, so comparisons with one leave them out too). Safe from another
    thread than the double's: the dicts are copied first (atomic under the GIL)."""
    compiled = re.compile(name)
    stored = dict(double.series(workspace_id))
    keys: set[SampleKey] = set()
    for labels, series in stored.items():
        if not compiled.fullmatch(dict(labels).get("__name__", "")):
            continue
        samples = dict(series.samples)
        keys.update(
            (tuple(labels), ts)
            for ts, bits in samples.items()
            if include_stale or bits != STALE_BITS
        )
    return keys


def prometheus_keys(
    prom: PrometheusProcess, selector: str, *, at_s: float | None = None, range_s: int = 3600
) -> set[SampleKey]:
    """Keys of the raw samples a Prometheus holds for ``selector`` (e.g.
    ``{__name__=~"bulk_outage_.*"}``) with a timestamp in (``at_s - range_s``, ``at_s``]
    (``at_s``: unix seconds, default now): the range-vector selector ``selector[range_s s]``
    evaluated at one instant returns every raw sample in its range."""
    result = prom.query(f"{selector}[{range_s}s]", time_s=at_s)
    keys: set[SampleKey] = set()
    for row in result:
        labels = label_set(row["metric"])
        keys.update((labels, round(float(ts) * 1000)) for ts, _ in row["values"])
    return keys
