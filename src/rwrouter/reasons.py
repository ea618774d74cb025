"""Why data was not sent, a request not taken, an attempt retried or a protocol given up
(pure): the typed reasons, defined once, each with its one-line description.

Their values are the label values of rwrouter's metrics and the ``reason`` of its log lines
(a :class:`~enum.StrEnum` member is its value wherever a string is: a label, a log field, a
JSON field, a comparison), so they never change. The metrics' help texts are written from the
members and their descriptions (:func:`listing`), so a new reason shows up in ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Self

__all__ = [
    "CLOSED_CONNECTION_REASONS",
    "METADATA_DROP_REASONS",
    "REFUSAL_REASONS",
    "REFUSED_CONNECTION_REASONS",
    "RETRY_LABELS",
    "SAMPLE_DROP_REASONS",
    "SAMPLE_LOSS_REASONS",
    "AuthReason",
    "ConnectionReason",
    "DropReason",
    "FallbackReason",
    "Reason",
    "RefuseReason",
    "RetryReason",
    "listing",
]


class Reason(StrEnum):
    """A reason: a :class:`~enum.StrEnum` whose members also carry ``description``, a short
    phrase for help texts and docs. A member is written ``NAME = "value", "description"``."""

    description: str

    def __new__(cls, value: str, description: str = "") -> Self:
        member = str.__new__(cls, value)
        member._value_ = value
        member.description = description
        return member


def listing(reasons: Iterable[Reason]) -> str:
    """``reasons`` for a help text, in the order given: ``"value (description), ..."`` (a
    member without a description is its value alone)."""
    return ", ".join(f"{r.value} ({r.description})" if r.description else r.value for r in reasons)


class DropReason(Reason):
    """Why samples (or metadata entries) were not delivered to a destination: the ``reason``
    label of ``rwrouter_samples_dropped_total`` and ``rwrouter_metadata_dropped_total``, and
    the ``reason`` of a dead letter (:mod:`rwrouter.deadletter`)."""

    # Routing (rwrouter.routing): never queued for that destination.
    RELABEL = "relabel", "its rules dropped the series or left it without labels"
    INVALID = (
        "invalid",
        "no metric name left or an empty label name; a metadata entry: no family name",
    )
    NAME_COLLISION = "name_collision", "its escaped names equal a series seen first"
    FILTERED = "filtered", "only exemplars or histograms the destination does not take"
    # HA pairs (rwrouter.routing.ha, ha_dedup): a request of a replica that is not elected.
    HA_REPLICA = "ha_replica", "ha_dedup: sent by an HA replica other than the elected one"
    SERIES_LIMIT = (
        "series_limit",
        "a new series past the destination's series_limit (on_series_limit: fallback or drop)",
    )
    # Admission (rwrouter.pipeline.fanout): not queued.
    QUEUE_FULL = (
        "queue_full",
        (
            "no room: samples: the request was answered 503 and the sender retries it; "
            "metadata: over its in-memory bound"
        ),
    )
    # Sending (a series over max_request_bytes is refused at receive: RefuseReason.TOO_LARGE).
    TOO_LARGE = "too_large", "a single series or metadata entry answered 413 by the destination"
    # The queue (rwrouter.queue, rwrouter.send.reader): queued, then lost.
    DROP_OLDEST = "drop_oldest", "removed from a full disk queue, on_full: drop_oldest"
    CORRUPT = "corrupt", "a queue record that failed its checksum or does not decode"
    # Sending (rwrouter.send.age): older than queue_config.sample_age_limit, never sent.
    TOO_OLD = (
        "too_old",
        "older than queue_config.sample_age_limit when its batch was sent or retried",
    )
    # Sending (rwrouter.send): refused by the destination for good, or never sent.
    RETRY_BUDGET = (
        "retry_budget",
        "max_retry_duration, max_retry_duration_on_http_429 or max_retries spent",
    )
    NOT_WRITTEN = (
        "not_written",
        (
            "answered 2xx, but the X-Prometheus-Remote-Write-*-Written headers count less than "
            "was sent"
        ),
    )
    ORPHAN_EXEMPLAR = "orphan_exemplar", "an exemplar-only series remote write 2.0 cannot carry"
    BOOK_FULL = "book_full", "a family evicted from a remote write 2.0 destination's metadata book"
    # A final answer, by its status class (rwrouter.send.refusals.reason_of).
    NOT_HTTP = "0xx", "a status below 100, not an HTTP status: RFC 9110 section 15"
    INFORMATIONAL = "1xx", "a 1xx status as the final answer"
    REDIRECTION = "3xx", "a 3xx answer, not followed"
    CLIENT_ERROR = "4xx", "a 4xx answer other than a retried 429"
    SERVER_ERROR = "5xx", "a 5xx or 6xx answer not retried"
    REFUSED = "refused", "a final refusal without an answer"


#: The drop reasons of ``rwrouter_samples_dropped_total`` (all but the metadata book's).
SAMPLE_DROP_REASONS = tuple(r for r in DropReason if r is not DropReason.BOOK_FULL)

#: The reasons of a final refusal (:class:`rwrouter.send.refusals.Refusal`): the ``reason``
#: label of ``rwrouter_rejected_batches_total`` and of a dead letter.
REFUSAL_REASONS = (
    DropReason.RETRY_BUDGET,
    DropReason.TOO_LARGE,
    DropReason.NOT_HTTP,
    DropReason.INFORMATIONAL,
    DropReason.REDIRECTION,
    DropReason.CLIENT_ERROR,
    DropReason.SERVER_ERROR,
    DropReason.REFUSED,
)

#: The drop reasons of ``rwrouter_samples_dropped_total`` that are losses: samples the sender
#: was answered 2xx for, meant for the destination, that it will not get (a final refusal, a
#: 2xx that wrote less, a queue dropping or finding them corrupt, names that collide once
#: escaped, an exemplar remote write 2.0 cannot carry). The example alert
#: ``RwrouterSamplesDropped`` (deploy/prometheus/alerts.yaml) and the dashboard's "Samples
#: lost" panel match exactly these (tests/unit/test_loss_reasons.py). The others are not
#: losses, as docs/runbook.md explains: ``relabel``, ``filtered`` and ``invalid`` are what the
#: rules or the destination's settings keep out (a fallback destination gets it),
#: ``ha_replica`` the copy of the replica not elected, ``series_limit`` the budget chosen
#: (``on_series_limit``; alerted by ``RwrouterSeriesBudgetNearlySpent``), ``queue_full`` a
#: 503 the sender retries (never acknowledged), ``too_old`` ``sample_age_limit`` on purpose.
SAMPLE_LOSS_REASONS = (
    *REFUSAL_REASONS,
    DropReason.NOT_WRITTEN,
    DropReason.DROP_OLDEST,
    DropReason.CORRUPT,
    DropReason.NAME_COLLISION,
    DropReason.ORPHAN_EXEMPLAR,
)

#: The drop reasons of ``rwrouter_metadata_dropped_total``: metadata entries are not relabeled
#: per series, not queued on disk and not RW 2.0 (rwrouter.send.metadata).
METADATA_DROP_REASONS = tuple(
    r
    for r in DropReason
    if r
    not in {
        DropReason.RELABEL,
        DropReason.NAME_COLLISION,
        DropReason.FILTERED,
        DropReason.HA_REPLICA,
        DropReason.SERIES_LIMIT,
        DropReason.DROP_OLDEST,
        DropReason.CORRUPT,
        DropReason.TOO_OLD,
        DropReason.NOT_WRITTEN,
        DropReason.ORPHAN_EXEMPLAR,
    }
)


class RefuseReason(Reason):
    """Why a remote write request was refused whole (nothing of it kept): the ``reason``
    label of ``rwrouter_refused_requests_total`` (:mod:`rwrouter.server.app`)."""

    DECODE = "decode", "400: not a valid snappy, protobuf remote write body"
    BAD_REQUEST = "bad_request", "another 4xx of the request itself"
    TENANT = "tenant", "400: an X-Scope-OrgID header that is not a valid tenant ID"
    SLOW_BODY = "slow_body", "408: the body took longer than server.read_timeout"
    TOO_LARGE = (
        "too_large",
        "413: over server.max_request_bytes or max_decoded_bytes, or a series over a "
        "destination's max_request_bytes",
    )
    UNSUPPORTED = "unsupported", "415: a Content-Type or Content-Encoding rwrouter does not take"
    CLIENT_GONE = "client_gone", "the sender closed the connection before the answer"
    QUEUE_FULL = "queue_full", "503: a destination's disk queue has no room"
    BUSY = "busy", "503: too many requests being decoded"
    STORAGE = "storage", "503: a disk queue could not be written"
    READ_WAIT = (
        "read_wait",
        (
            "503: no read within server.read_wait_timeout, server.max_concurrent_reads "
            "bodies being read or server.max_buffered_body_bytes held"
        ),
    )


class ConnectionReason(Reason):
    """Why rwrouter refused or closed a connection (:mod:`rwrouter.server.connections`): the
    ``reason`` label of ``rwrouter_connections_refused_total``
    (:data:`REFUSED_CONNECTION_REASONS`) and ``rwrouter_connections_closed_total``
    (:data:`CLOSED_CONNECTION_REASONS`)."""

    MAX_CONNECTIONS = (
        "max_connections",
        "server.max_connections already open",
    )
    HEADER_TIMEOUT = (
        "header_timeout",
        "headers not complete within server.header_read_timeout",
    )
    IDLE_TIMEOUT = "idle_timeout", "idle for server.idle_timeout between requests"


#: The reasons of ``rwrouter_connections_refused_total``.
REFUSED_CONNECTION_REASONS = (ConnectionReason.MAX_CONNECTIONS,)

#: The reasons of ``rwrouter_connections_closed_total``.
CLOSED_CONNECTION_REASONS = (ConnectionReason.HEADER_TIMEOUT, ConnectionReason.IDLE_TIMEOUT)


class RetryReason(Reason):
    """What a failed send attempt was, as the retry policy sees it
    (:attr:`rwrouter.send.retry.Decision.reason`); ``network`` and ``credential_refresh`` are
    also ``reason`` label values of ``rwrouter_retries_total`` (the label is the exact HTTP
    status, "503", "429", when there is one: :data:`RETRY_LABELS`)."""

    NETWORK = "network", "no answer: a connection error or a timeout"
    SERVER_ERROR = "5xx"
    TOO_MANY_REQUESTS = "429"
    CLIENT_ERROR = "4xx"
    CREDENTIAL_REFRESH = "credential_refresh", "401 or 403 answered, credentials refreshed"


#: The ``reason`` label values of ``rwrouter_retries_total`` that are not an HTTP status.
RETRY_LABELS = (RetryReason.NETWORK, RetryReason.CREDENTIAL_REFRESH)


class FallbackReason(Reason):
    """Why a remote write 2.0 destination is sent remote write 1.0 from now on: the
    ``reason`` label of ``rwrouter_protocol_fallbacks_total``
    (:func:`rwrouter.send.encoding.not_rw2`)."""

    UNSUPPORTED = "415", "it answered 415 to remote write 2.0"
    NOTHING_WRITTEN = (
        "nothing_written",
        "a 2xx without the Written headers, or with all three 0: a remote write 1.0 receiver",
    )


class AuthReason(Reason):
    """Why the front door refused a request (``--web.config.file``, ``--web.enable-lifecycle``):
    the ``reason`` label of ``rwrouter_auth_failures_total`` (:mod:`rwrouter.server.frontdoor`)."""

    MISSING = "missing", "401: no credential where one is needed"
    WRONG = "wrong", "401: an unknown user, a wrong password or token, or a malformed header"
    FORBIDDEN = "forbidden", "403: a valid credential without the role the endpoint needs"
    CLIENT_CERT = "client_cert", "403: a client certificate without an allowed SAN"
    LIFECYCLE = "lifecycle", "403: /-/reload without --web.enable-lifecycle"
