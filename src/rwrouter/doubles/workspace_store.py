"""Storage, validation and limits of one workspace of the double (checks 12-15 of the spec).

Accepted data is keyed by label set. Float samples keep their raw 8-byte value bits (so the
staleness marker ``0x7ff0000000000002`` stays itself), histograms keep their encoded protobuf
bytes. Time is passed in (unix seconds). Messages follow Cortex's validation texts.
Source: shared/reference/managed-workspace.md "Quotas that matter", "Answers you will see";
Cortex ``pkg/util/validation`` and ingester error texts. Also the body checks of check 11
(:func:`is_rw2`, :func:`decode_request`).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from rwrouter.doubles.cortex_text import Labels, cortex_series, go_quote
from rwrouter.wire import remote_pb2, types_pb2

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class Limits:
    """Workspace quotas (managed-workspace.md; defaults move between doc versions)."""

    max_body_bytes: int = 1_048_576  # "about 1 MB" request size, compressed bytes
    max_labels: int = 70
    max_name_bytes: int = 1024
    max_value_bytes: int = 2048
    ingestion_rate: float = 170_000.0  # samples+exemplars+metadata a second (bucket refill)
    ingestion_burst: float = 1_000_000.0  # bucket size
    ingestion_retry_after: float | None = None  # Retry-After seconds of its 429 (None: none)
    max_active_series: int = 50_000_000  # series ever accepted (the double never ages them out)
    max_metadata: int = 20_000  # metrics with metadata; more are silently dropped
    out_of_order_window_s: float = 60.0
    too_new_s: float = 600.0  # Cortex creation_grace_period: 10 min
    # HA dedup (Cortex HA tracker, as the workspace applies it): off unless ha_dedup is set.
    ha_dedup: bool = False
    ha_cluster_label: str = "cluster"
    ha_replica_label: str = "__replica__"
    ha_failover_timeout_s: float = 30.0
    # Samples older than now - this are "out of bounds" (400): before the head's window,
    # about an hour on Cortex (half a 2 h block). 0 (the double's default) turns it off, so
    # tests may send fixed timestamps; set it where a test needs the bound.
    out_of_bounds_s: float = 0.0
    # The largest query answer the double passes on from its backend (bytes); over it, 422
    # as Cortex's query limits answer (workspace_backend.too_large_answer).
    max_query_answer_bytes: int = 64 << 20
    # Points (samples, histograms, exemplars) older than their series' newest point minus
    # this are forgotten (seconds; 0, the default: kept, as tests read them back). For a
    # double with a backend that keeps the data (the demo), so that memory stays bounded; a
    # resent point that old is then out of order, as a real head answers it.
    keep_points_s: float = 0.0


@dataclass(frozen=True)
class Exemplar:
    labels: Labels
    value_bits: int
    timestamp_ms: int


@dataclass(frozen=True)
class Metadata:
    type: int  # MetricMetadata.MetricType number (COUNTER 1, GAUGE 2, ...)
    help: str
    unit: str


@dataclass
class Series:
    """One stored series: ``samples`` maps timestamp (ms) to the value's 8 raw bits (uint64),
    ``histograms`` maps timestamp (ms) to the encoded ``Histogram`` message."""

    labels: Labels
    samples: dict[int, int] = field(default_factory=dict)
    histograms: dict[int, bytes] = field(default_factory=dict)
    exemplars: list[Exemplar] = field(default_factory=list)

    def sample_list(self) -> list[tuple[int, int]]:
        """(timestamp ms, value bits) in timestamp order."""
        return sorted(self.samples.items())

    def values(self) -> list[float]:
        return [bits_to_float(bits) for _, bits in self.sample_list()]


@dataclass(frozen=True)
class Outcome:
    """What a request did: HTTP ``status``, counter ``reason`` ("" when accepted), ``message``,
    and what was stored (samples+histograms, metadata entries); ``counted``: the samples,
    histograms, exemplars and metadata entries of its valid series the rate limiter took
    (Cortex/Mimir distributors: ``validatedSamples + validatedExemplars +
    len(validatedMetadata)``), 0 when it refused them. ``accepted`` (only when
    :meth:`WorkspaceStore.ingest` was asked to ``collect``): the request's part that passed
    every check, as a WriteRequest (a point it already held with the same value included:
    accepting it again is no error), ``None`` when nothing passed."""

    status: int
    reason: str
    message: str
    stored_samples: int = 0
    stored_metadata: int = 0
    counted: int = 0  # what the rate limiter counted (0 when the request did not reach it)
    accepted: remote_pb2.WriteRequest | None = field(default=None, compare=False, repr=False)


def float_to_bits(value: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", value))[0])


def bits_to_float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


def format_labels(labels: Labels) -> str:
    return "{" + ", ".join(f"{n}={json.dumps(v)}" for n, v in labels) + "}"


class WorkspaceStore:
    """The data and limits of one workspace. Not thread-safe: one event loop owns it."""

    def __init__(self, *, limits: Limits, now_s: float) -> None:
        self.limits = limits
        self.series: dict[Labels, Series] = {}
        self.stored_samples = 0  # samples and histograms ever stored (forgotten ones too)
        self.metadata: dict[str, Metadata] = {}
        self._tokens = limits.ingestion_burst
        self._refilled_at = now_s
        self.elected: dict[str, tuple[str, float]] = {}  # HA: cluster -> (replica, last seen)

    def ingest(
        self, request: remote_pb2.WriteRequest, *, now_s: float, collect: bool = False
    ) -> Outcome:
        """Checks 12-15, storing what passes; the lowest-numbered failure is answered.

        12 (invalid series) and 13 (out of order...) and 15 (series cap) reject only the
        offending series or samples; 14 (rate limit) rejects the whole request. ``collect``:
        also return what passed (``Outcome.accepted``), to be written elsewhere.
        """
        if self.limits.ha_dedup and not self._ha_accepts(request, now_s):
            return Outcome(202, "ha_replica", self._ha_message)
        errors: dict[int, tuple[str, str]] = {}
        valid = []
        for ts in request.timeseries:
            labels: Labels = tuple((label.name, label.value) for label in ts.labels)
            problem = validate_labels(labels, self.limits)
            if problem:
                errors.setdefault(12, problem)
            else:
                valid.append((labels, ts))
        n_samples = sum(len(ts.samples) + len(ts.histograms) for _, ts in valid)
        n_exemplars = sum(len(ts.exemplars) for _, ts in valid)
        n_metadata = len(request.metadata)
        counted = n_samples + n_exemplars + n_metadata
        if not self._take(counted, now_s):
            if 12 in errors:
                return Outcome(400, *errors[12])
            message = (
                f"ingestion rate limit ({self.limits.ingestion_rate:g}) exceeded while "
                f"adding {n_samples + n_exemplars} samples and {n_metadata} metadata"
            )
            return Outcome(429, "rate_limited", message)
        stored = 0
        accepted = remote_pb2.WriteRequest() if collect else None
        for labels, ts in valid:
            out = accepted.timeseries.add() if accepted is not None else None
            stored += self._append(labels, ts, now_ms=int(now_s * 1000), errors=errors, out=out)
            if accepted is not None and out is not None and not (out.samples or out.histograms):
                del accepted.timeseries[-1]  # nothing of it passed (exemplars alone: none)
        self.stored_samples += stored
        stored_metadata = self._store_metadata(request.metadata, out=accepted)
        if accepted is not None and not (accepted.timeseries or accepted.metadata):
            accepted = None
        if errors:
            reason, message = errors[min(errors)]
            return Outcome(400, reason, message, stored, stored_metadata, counted, accepted)
        return Outcome(200, "", "", stored, stored_metadata, counted, accepted)

    def _ha_accepts(self, request: remote_pb2.WriteRequest, now_s: float) -> bool:
        """The Cortex HA tracker, written from its documented behaviour (not rwrouter's own
        election): the first series' cluster and replica labels decide for the whole request;
        without both it is taken as is; the first replica of a cluster is elected, another's
        request is answered 202 and not stored until the elected one has sent nothing for
        ``ha_failover_timeout_s``; an accepted request loses its replica label."""
        if not request.timeseries:
            return True
        first = {label.name: label.value for label in request.timeseries[0].labels}
        cluster = first.get(self.limits.ha_cluster_label, "")
        replica = first.get(self.limits.ha_replica_label, "")
        if not cluster or not replica:
            return True
        elected = self.elected.get(cluster)
        alive = elected is not None and now_s - elected[1] <= self.limits.ha_failover_timeout_s
        if elected is not None and elected[0] != replica and alive:
            self._ha_message = (
                f"replicas did not match, rejecting sample: replica={replica}, elected={elected[0]}"
            )
            return False
        self.elected[cluster] = (replica, now_s)
        for ts in request.timeseries:
            kept = [label for label in ts.labels if label.name != self.limits.ha_replica_label]
            del ts.labels[:]
            ts.labels.extend(kept)
        return True

    _ha_message = ""

    def _take(self, tokens: int, now_s: float) -> bool:
        elapsed = max(0.0, now_s - self._refilled_at)
        self._refilled_at = max(self._refilled_at, now_s)
        rate, burst = self.limits.ingestion_rate, self.limits.ingestion_burst
        self._tokens = min(burst, self._tokens + elapsed * rate)
        if tokens > self._tokens:
            return False
        self._tokens -= tokens
        return True

    def _append(
        self,
        labels: Labels,
        ts: types_pb2.TimeSeries,
        *,
        now_ms: int,
        errors: dict[int, tuple[str, str]],
        out: types_pb2.TimeSeries | None = None,
    ) -> int:
        """Store what of ``ts`` passes checks 13 and 15; returns the new points stored. ``out``
        receives the labels, the points that passed and the exemplars (when any point did)."""
        series = self.series.get(labels)
        if series is None:
            if len(self.series) >= self.limits.max_active_series:
                limit = self.limits.max_active_series
                errors.setdefault(
                    15, ("series_limit", f"per-user series limit of {limit} exceeded")
                )
                return 0
            series = Series(labels=labels)
        stored = 0
        for sample in ts.samples:
            bits = float_to_bits(sample.value)
            admitted = self._admit(series.samples, sample.timestamp, bits, labels, now_ms, errors)
            stored += admitted is True
            if out is not None and admitted is not None:
                out.samples.append(sample)
        for histogram in ts.histograms:
            encoded = histogram.SerializeToString(deterministic=True)
            admitted = self._admit(
                series.histograms, histogram.timestamp, encoded, labels, now_ms, errors
            )
            stored += admitted is True
            if out is not None and admitted is not None:
                out.histograms.append(histogram)
        if out is not None:
            out.labels.extend(types_pb2.Label(name=n, value=v) for n, v in labels)
            out.exemplars.extend(ts.exemplars)
        for exemplar in ts.exemplars:
            exemplar_labels = tuple((label.name, label.value) for label in exemplar.labels)
            value_bits = float_to_bits(exemplar.value)
            series.exemplars.append(Exemplar(exemplar_labels, value_bits, exemplar.timestamp))
        if series.samples or series.histograms or series.exemplars:
            self.series[labels] = series
        if self.limits.keep_points_s and stored:
            _forget_old(series, int(self.limits.keep_points_s * 1000))
        return stored

    def _admit(
        self,
        points: dict[int, int] | dict[int, bytes],
        timestamp: int,
        value: int | bytes,
        labels: Labels,
        now_ms: int,
        errors: dict[int, tuple[str, str]],
    ) -> bool | None:
        """Store one point unless check 13 rejects it: True when a new point was stored,
        False when the same point was already there (accepted, nothing new), None when
        refused."""
        window_ms = int(self.limits.out_of_order_window_s * 1000)
        bound_ms = int(self.limits.out_of_bounds_s * 1000)
        problem: tuple[str, str] | None = None
        if timestamp > now_ms + int(self.limits.too_new_s * 1000):
            problem = ("too_new", f"timestamp too new: {timestamp} metric: {_name(labels)!r}")
        elif bound_ms and timestamp < now_ms - bound_ms:
            problem = (
                "out_of_bounds",
                f"out of bounds. timestamp={timestamp}, series={format_labels(labels)}",
            )
        elif timestamp in points:
            if points[timestamp] == value:
                return False  # same timestamp, same value: accepted, nothing new
            problem = (
                "duplicate_sample",
                "duplicate sample for timestamp. "
                f"timestamp={timestamp}, series={format_labels(labels)}",
            )
        elif points and timestamp < max(points) - window_ms:
            problem = (
                "out_of_order",
                f"out of order sample. timestamp={timestamp}, series={format_labels(labels)}",
            )
        if problem:
            errors.setdefault(13, problem)
            return None
        points[timestamp] = value  # type: ignore[assignment]
        return True

    def _store_metadata(
        self,
        entries: Iterable[types_pb2.MetricMetadata],
        *,
        out: remote_pb2.WriteRequest | None = None,
    ) -> int:
        stored = 0
        for entry in entries:
            name = entry.metric_family_name
            if name not in self.metadata and len(self.metadata) >= self.limits.max_metadata:
                continue  # silently dropped, like the managed workspace
            self.metadata[name] = Metadata(int(entry.type), entry.help, entry.unit)
            stored += 1
            if out is not None:
                out.metadata.append(entry)
        return stored


#: :func:`_forget_old` scans a series once it holds a multiple of this many points.
FORGET_EVERY = 256


def _forget_old(series: Series, keep_ms: int) -> None:
    """Drop the points of ``series`` older than its newest minus ``keep_ms`` (amortized:
    only when its sample or histogram count reaches a multiple of :data:`FORGET_EVERY`; its
    exemplars then too)."""
    scanned = False
    for points in (series.samples, series.histograms):
        if points and len(points) % FORGET_EVERY == 0:
            oldest = max(points) - keep_ms
            for ts in [ts for ts in points if ts < oldest]:
                del points[ts]
            scanned = True
    if scanned and series.exemplars:
        newest = max(e.timestamp_ms for e in series.exemplars)
        series.exemplars[:] = [e for e in series.exemplars if e.timestamp_ms >= newest - keep_ms]


def validate_labels(labels: Labels, limits: Limits) -> tuple[str, str] | None:
    """Check 12 for one series: ``(reason, Cortex-style message)`` or ``None`` when valid.

    Names are judged by the legacy scheme, as the managed workspace does (it refuses UTF-8
    names): metric name ``[a-zA-Z_:][a-zA-Z0-9_:]*``, label name ``[a-zA-Z_][a-zA-Z0-9_]*``.
    Order and texts: Cortex ``pkg/util/validation`` ``ValidateLabels`` (``%.200q``: Go quoting
    of at most 200 characters; the series as ``formatLabelSet`` writes it)."""
    name = _name(labels)
    if not name:
        return ("invalid_series", "sample missing metric name")
    if not _METRIC_NAME.fullmatch(name):
        return ("invalid_series", f"sample invalid metric name: {go_quote(name)}")
    if len(labels) > limits.max_labels:
        return (
            "invalid_series",
            f"series has too many labels (actual: {len(labels)}, "
            f"limit: {limits.max_labels}) series: '{format_labels(labels)}'",
        )
    previous = ""
    for label_name, value in labels:
        problem, cause = "", label_name
        if not _LABEL_NAME.fullmatch(label_name):
            problem = "sample invalid label"
        elif len(label_name.encode()) > limits.max_name_bytes:
            problem = "label name too long"
        elif not value:
            problem = "sample has empty label value"
        elif len(value.encode()) > limits.max_value_bytes:
            problem, cause = "label value too long", value
        elif label_name == previous:
            problem = "duplicate label name"
        elif label_name < previous:
            problem = "labels not sorted"
        if problem:
            series = go_quote(cortex_series(labels))
            return ("invalid_series", f"{problem}: {go_quote(cause)} metric {series}")
        previous = label_name
    return None


def _name(labels: Labels) -> str:
    return next((value for name, value in labels if name == "__name__"), "")
