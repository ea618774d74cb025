"""The configuration as frozen objects: one dataclass per YAML section, defaults declared once.

Field names mirror the YAML keys (Prometheus ``remote_write`` syntax, ``config/config.go``).
Units: durations are float seconds, sizes int bytes. Secrets are :class:`Secret`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from rwrouter.config.budget import DEFAULT_SERIES_WINDOW, OnSeriesLimit
from rwrouter.config.clientmodel import Authorization, BasicAuth, SigV4Config, TLSConfig
from rwrouter.relabel.names import ValidationScheme

if TYPE_CHECKING:
    from rwrouter.relabel import RelabelConfig

__all__ = [
    "AuditConfig",
    "Authorization",
    "BasicAuth",
    "Config",
    "ConfigNote",
    "DestinationConfig",
    "EscapingScheme",
    "Fsync",
    "GlobalConfig",
    "HaDedupConfig",
    "MetadataConfig",
    "OnFull",
    "PriceTier",
    "QueueConfig",
    "RelabelCacheConfig",
    "ServerConfig",
    "SigV4Config",
    "StorageConfig",
    "TLSConfig",
    "ValidationScheme",
]

MIB = 1024 * 1024
GIB = 1024 * MIB
SIGV4_MAX_REQUEST_BYTES = 1 * MIB  # the managed workspace refuses requests over about 1 MB
DEFAULT_MAX_REQUEST_BYTES = 8 * MIB  # other destinations (vmagent's -remoteWrite.maxBlockSize)


class Fsync(StrEnum):
    """``storage.fsync``: when appends reach the disk (see :class:`StorageConfig`)."""

    ALWAYS = "always"
    INTERVAL = "interval"


class OnFull(StrEnum):
    """``queue_config.on_full``: what a full disk queue does (see :class:`QueueConfig`)."""

    BACKPRESSURE = "backpressure"
    DROP_OLDEST = "drop_oldest"


class EscapingScheme(StrEnum):
    """``metric_name_escaping_scheme``: how a destination's names outside the legacy
    character set are written (prometheus/common ``model.EscapingScheme``, the same names as
    Prometheus's scrape option; :mod:`rwrouter.routing.escape` applies them). The name
    validation schemes (``global.metric_name_validation_scheme``; Prometheus 3 defaults to
    utf8) are :class:`~rwrouter.relabel.names.ValidationScheme`."""

    ALLOW_UTF8 = "allow-utf-8"
    UNDERSCORES = "underscores"
    DOTS = "dots"
    VALUES = "values"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """The receiving side (YAML ``server``)."""

    listen_address: str = "0.0.0.0:9250"
    """``host:port`` to bind; an IPv6 host goes in brackets (``[::]:9250``); port 0 = any free."""
    max_request_bytes: int = 32 * MIB  # 33554432: the compressed body, as vmagent's cap
    max_decoded_bytes: int = 64 * MIB  # 67108864: the size the snappy header declares
    queue_full_retry_after: float = 5.0
    """Seconds sent in ``Retry-After`` with the 503 answered when a destination queue is full."""
    read_timeout: float = 60.0
    """Seconds a request body may take to arrive; slower ones get 408 (slow senders and
    slowloris connections cannot pin memory and connections for ever)."""
    shutdown_timeout: float = 30.0
    """Seconds the queues keep sending after SIGTERM; what is left stays on disk."""
    # The bounds of the connections and the bodies (server/connections.py), defaults after
    # vmagent's (lib/httpserver, lib/writeconcurrencylimiter) and Prometheus's:
    max_concurrent_reads: int = 8
    """Bodies read at once; the next upload waits unread, so TCP pushes back (vmagent's
    ``-maxConcurrentInserts``: 2 x CPU cores)."""
    max_buffered_body_bytes: int = 128 * MIB  # 134217728: 4 largest bodies, ~500 ordinary
    """Bytes of bodies held at once, from their read until their answer (``Content-Length``,
    else ``max_request_bytes``, reserved before reading); at least ``max_request_bytes``."""
    read_wait_timeout: float = 10.0
    """Seconds an upload may wait for a read (``max_concurrent_reads``,
    ``max_buffered_body_bytes``) before 503 + Retry-After (vmagent's
    ``-insert.maxQueueDuration`` is 1m; shorter here than Prometheus's 30 s remote_timeout so
    that the sender gets the answer)."""
    header_read_timeout: float = 5.0
    """Seconds from a connection's start (or a request's first byte) to its complete headers;
    then the connection is closed (vmagent's ``ReadHeaderTimeout``, 5 s)."""
    idle_timeout: float = 60.0
    """Seconds an idle keep-alive connection stays open (vmagent's ``-http.idleConnTimeout``)."""
    max_connections: int = 512
    """Open connections at most; more are accepted and closed at once (Prometheus's
    ``--web.max-connections``, 512)."""

    @property
    def listen_host(self) -> str:
        """The host part of ``listen_address``, without IPv6 brackets."""
        return self.listen_address.rpartition(":")[0].strip("[]")

    @property
    def listen_port(self) -> int:
        return int(self.listen_address.rpartition(":")[2])


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageConfig:
    """Where and how the durable queues live (YAML ``storage``; rwrouter's own section).

    ``path``: directory holding one queue per destination (``<path>/queue/<destination>/``) and
    the dead-letter store (``<path>/rejected/<destination>/``); relative paths are relative to
    the working directory. ``fsync``: ``always`` (fsync before answering 204: survives a power
    loss) or ``interval`` (written before 204, fsynced every ``fsync_interval`` seconds: survives
    a crash or kill of the process, not of the machine). ``rejected_max_bytes``: bound of each
    destination's dead-letter store (oldest entries removed first).
    """

    path: str = "data"
    fsync: Fsync = Fsync.INTERVAL
    fsync_interval: float = 1.0
    rejected_max_bytes: int = 64 * MIB


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueConfig:
    """Per-destination queue and retry settings (``queue_config``; Prometheus defaults plus
    rwrouter's own keys).

    The queue is on disk (``max_disk_bytes``, the admission bound; ``on_full``: ``backpressure``
    answers 503, ``drop_oldest`` drops the oldest queued data). ``capacity`` samples per
    running shard (at least two batches) and ``max_memory_bytes`` bound what is read ahead
    from disk into memory for the senders. ``max_request_bytes``: uncompressed body bound of
    every request sent (when the YAML omits it: 1 MiB for sigv4 destinations, 8 MiB
    otherwise).
    ``max_retry_duration``: seconds a batch is retried after network errors and 5xx (0 = for
    ever); ``max_retry_duration_on_http_429``: the same for 429 (with ``retry_on_http_429``).
    ``max_samples_per_second``/``burst_samples``: pacing (:mod:`rwrouter.send.pacing`; 0: off).
    ``sample_age_limit``: seconds; samples older than this when their batch is sent (or
    retried) are dropped, never sent (Prometheus's key and semantics; 0 = off, its default).
    """

    capacity: int = 10000
    min_shards: int = 1
    max_shards: int = 50
    max_samples_per_send: int = 2000
    batch_send_deadline: float = 5.0
    min_backoff: float = 0.03
    max_backoff: float = 5.0
    retry_on_http_429: bool = False
    max_memory_bytes: int = 256 * MIB  # 268435456: rwrouter's own bound on read-ahead bytes
    max_disk_bytes: int = 1 * GIB
    on_full: OnFull = OnFull.BACKPRESSURE
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_retry_duration: float = 0.0
    max_retry_duration_on_http_429: float = 3600.0
    max_samples_per_second: float = 0.0
    burst_samples: int = 0
    sample_age_limit: float = 0.0

    @property
    def paced(self) -> bool:  # max_samples_per_second is set
        return self.max_samples_per_second > 0

    @property
    def batch_samples(self) -> int:
        """Samples a batch holds at most: ``max_samples_per_send``, ``burst_samples`` if less."""
        if self.paced:
            return max(1, min(self.max_samples_per_send, self.burst_samples))
        return self.max_samples_per_send


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataConfig:
    """Forwarding of metric metadata (``metadata_config``; Prometheus defaults)."""

    send: bool = True
    send_interval: float = 60.0
    max_samples_per_send: int = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class GlobalConfig:
    """Settings every rule of the file follows (YAML ``global``; Prometheus's key).

    ``metric_name_validation_scheme``: ``utf8`` (Prometheus 3's default: a metric or label name
    is any non-empty UTF-8) or ``legacy`` (``[a-zA-Z_:][a-zA-Z0-9_:]*`` metric names,
    ``[a-zA-Z_][a-zA-Z0-9_]*`` label names): how ``relabel_configs`` and every destination's
    ``write_relabel_configs`` validate their targets, at load and when a rule runs
    (Prometheus relabel semantics).
    """

    metric_name_validation_scheme: ValidationScheme = ValidationScheme.UTF8


@dataclass(frozen=True, slots=True, kw_only=True)
class HaDedupConfig:
    """``ha_dedup`` (rwrouter's own): only the elected replica's samples per HA cluster (rule:
    :mod:`rwrouter.routing.ha`); the labels naming a request's cluster and replica, and the
    seconds the elected replica may stay silent before the next one to send is elected."""

    cluster_label: str = "cluster"
    replica_label: str = "__replica__"
    failover_timeout: float = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DestinationConfig:
    """One ``remote_write`` entry: where a copy of the (relabeled) series goes, and how.

    ``name`` is unique; when the YAML has none it is derived from the URL host. ``headers`` are
    (name, value) pairs in file order. ``fallback``: this destination receives exactly the series
    that no non-fallback destination kept after its own ``write_relabel_configs``. At most one of
    ``sigv4``, ``basic_auth``, ``authorization`` is set. ``send_exemplars`` and
    ``send_native_histograms`` default to true: the router forwards what the sender sent.

    ``shadow``: relabeled and routed like any destination, then only counted by the audit
    (:mod:`rwrouter.audit`), never queued or sent; it does not count as keeping a series for a
    fallback destination, and ``url`` may be omitted (then ``name`` is required). ``audit``:
    count this destination's series in the audit too (a shadow destination always is).
    ``tenant_header``: the header (``X-Scope-OrgID`` for Mimir and Cortex) each request carries
    the tenant of its series in (:mod:`rwrouter.config.tenant`); batches never mix tenants, and
    series without a tenant get the ``headers`` value of that name, if any. None: not sent.
    ``ha_dedup``: :class:`HaDedupConfig` (None: off).
    """

    name: str
    url: str
    remote_timeout: float = 30.0
    headers: tuple[tuple[str, str], ...] = ()
    tenant_header: str | None = None
    write_relabel_configs: tuple[RelabelConfig, ...] = ()
    sigv4: SigV4Config | None = None
    basic_auth: BasicAuth | None = None
    authorization: Authorization | None = None
    tls_config: TLSConfig | None = None
    proxy_url: str | None = None
    queue_config: QueueConfig = field(default_factory=QueueConfig)
    metadata_config: MetadataConfig = field(default_factory=MetadataConfig)
    send_exemplars: bool = True
    send_native_histograms: bool = True
    fallback: bool = False
    shadow: bool = False
    audit: bool = False
    ha_dedup: HaDedupConfig | None = None
    series_limit: int | None = None
    """Active series this destination may hold (None: no budget); past it a new series goes
    by ``on_series_limit``; active: a sample within ``series_window`` seconds. A sigv4
    destination's limit within 10 % of ``audit.series_limit`` needs
    ``series_limit_near_quota: true`` (:mod:`rwrouter.routing.budget`)."""
    on_series_limit: OnSeriesLimit = OnSeriesLimit.FALLBACK
    series_window: float = DEFAULT_SERIES_WINDOW
    series_limit_near_quota: bool = False
    protobuf_message: str = "prometheus.WriteRequest"
    """The protobuf message sent: ``prometheus.WriteRequest`` (RW 1.0) or
    ``io.prometheus.write.v2.Request`` (RW 2.0); Prometheus's key and values."""
    metric_name_escaping_scheme: EscapingScheme = EscapingScheme.ALLOW_UTF8
    """How metric and label names outside the legacy character set are written for this
    destination after relabeling: ``allow-utf-8`` (as they are), ``underscores``, ``dots`` or
    ``values`` (Prometheus's escaping schemes). When the YAML omits it: ``underscores`` for a
    sigv4 destination (the managed workspace refuses UTF-8 names), else ``allow-utf-8``."""

    @property
    def audited(self) -> bool:
        """Whether the audit counts this destination's series (``shadow`` or ``audit``)."""
        return self.shadow or self.audit


@dataclass(frozen=True, slots=True, kw_only=True)
class RelabelCacheConfig:
    """The routing cache (YAML ``relabel_cache``, metrics ``rwrouter_relabel_cache_*``;
    rwrouter's own section, and this dataclass is named after its key as every section's):
    the outcome of the relabel rules per raw label set, so a series returning every scrape is
    routed without running the rules again. Bounded by ``max_entries`` label sets,
    ``max_bytes`` bytes of cached labels and outcomes, and ``max_age`` seconds (a label set
    not seen for that long is forgotten: pod churn cannot grow it). It works in two
    generations: up to half of ``max_entries`` (and of ``max_bytes``) active series stay
    cached for ever; size it at about twice the active series of the Prometheus (shard) that
    writes to this router."""

    max_entries: int = 2_000_000
    max_bytes: int = 1 * GIB
    max_age: float = 600.0
    max_tenants: int = 16
    """Routers with their own cache for tenants at most, when a rule reads ``__tenant__``
    (:mod:`rwrouter.routing.tenants`); they share ``max_entries`` and ``max_bytes``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PriceTier:
    """One tier of a monthly ingestion price: ``per_million`` (currency units per million
    samples) for the samples of a month up to ``up_to_samples`` (cumulative; None: no bound,
    the last tier)."""

    per_million: float
    up_to_samples: int | None = None


# Amazon Managed Service for Prometheus, metric samples ingested, us-east-1 list price as
# published on https://aws.amazon.com/prometheus/pricing/ (USD 0.90 / 0.35 / 0.16 per 10 M
# samples for the first 2 B, the next 250 B, and beyond, a month). Prices differ by region
# and change: set ``audit.price_tiers`` to yours.
AMP_PRICE_TIERS = (
    PriceTier(per_million=0.090, up_to_samples=2_000_000_000),
    PriceTier(per_million=0.035, up_to_samples=252_000_000_000),
    PriceTier(per_million=0.016),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditConfig:
    """The audit (YAML ``audit``; rwrouter's own section): what counts as an active series and
    what a sample costs, for destinations with ``shadow`` or ``audit`` set.

    ``window``: seconds; a series is active when it had a sample within it (the managed
    workspace counts 2 h). ``series_limit``: active series a workspace holds (default quota
    50 M) that each destination's count is compared with. ``max_series``: label sets
    remembered per destination (about 100 bytes each); beyond it new series are counted as
    lower bounds. ``rate_window``: seconds over which samples/s are averaged.
    ``price_tiers``: the monthly ingestion price (:class:`PriceTier`, ascending), in
    ``currency``. ``refresh``: seconds a ``GET /-/audit`` answer is served again before it is
    built anew (0: built for every request, still once for concurrent ones)."""

    window: float = 7200.0
    series_limit: int = 50_000_000
    max_series: int = 2_000_000
    rate_window: float = 300.0
    price_tiers: tuple[PriceTier, ...] = AMP_PRICE_TIERS
    currency: str = "USD"
    refresh: float = 10.0  # the status page reads the audit every 15 s


@dataclass(frozen=True, slots=True)
class ConfigNote:
    """What ``check-config`` notes about a Prometheus key it accepted whose value means
    something else here (:mod:`rwrouter.config.promkeys`): the YAML key path and the one-line
    note saying what applies. A note never refuses the file."""

    path: str
    note: str

    def __str__(self) -> str:
        return f"{self.path}: {self.note}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """The whole file: ``global`` (``global_``: a Python keyword), ``server``, ``storage``,
    ``relabel_cache``, ``audit``, global ``relabel_configs``
    (applied to every series before fan-out), ``remote_write`` (at least one destination).
    ``source`` names where it came from; ``notes``: the Prometheus keys accepted with a
    note, in the order of the file."""

    global_: GlobalConfig = field(default_factory=GlobalConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    relabel_cache: RelabelCacheConfig = field(default_factory=RelabelCacheConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    relabel_configs: tuple[RelabelConfig, ...] = ()
    remote_write: tuple[DestinationConfig, ...]
    source: str = "<string>"
    notes: tuple[ConfigNote, ...] = ()
