"""Why data was not sent, or a request not taken (pure): the typed reasons, defined once.

Their values are the label values of rwrouter's metrics and the ``reason`` of its log lines
(a :class:`~enum.StrEnum` member is its value wherever a string is: a label, a log field, a
JSON field, a comparison), so they never change. The metrics' help texts list them from here.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DropReason", "RefuseReason"]


class DropReason(StrEnum):
    """Why samples (or metadata entries) were not delivered to a destination: the ``reason``
    label of ``rwrouter_samples_dropped_total`` and ``rwrouter_metadata_dropped_total``, and
    the ``reason`` of a dead letter (:mod:`rwrouter.deadletter`)."""

    # Routing (rwrouter.routing): never queued for that destination.
    RELABEL = "relabel"  # its rules dropped the series (or left it without labels)
    INVALID = "invalid"  # no metric name left (a metadata entry: no family name)
    NAME_COLLISION = "name_collision"  # its escaped names equal a series seen first
    FILTERED = "filtered"  # only exemplars or histograms the destination does not take
    # Admission (rwrouter.pipeline.fanout): not queued.
    QUEUE_FULL = "queue_full"  # the request was answered 503 (the sender retries it)
    TOO_LARGE = "too_large"  # one series over max_request_bytes (or answered 413 alone)
    # The queue (rwrouter.queue, rwrouter.send.reader): queued, then lost.
    DROP_OLDEST = "drop_oldest"  # removed from a full disk queue (on_full: drop_oldest)
    CORRUPT = "corrupt"  # a queue record that failed its checksum or does not decode
    # Sending (rwrouter.send): refused by the destination for good, or never sent.
    RETRY_BUDGET = "retry_budget"  # max_retry_duration spent
    NOT_WRITTEN = "not_written"  # answered 2xx, but the Written headers count less than sent
    ORPHAN_EXEMPLAR = "orphan_exemplar"  # an exemplar-only series RW 2.0 cannot carry
    BOOK_FULL = "book_full"  # a family evicted from an RW 2.0 destination's metadata book
    # A final answer, by its status class (rwrouter.send.refusals.reason_of).
    NOT_HTTP = "0xx"  # a status below 100 (not an HTTP status, RFC 9110 section 15)
    INFORMATIONAL = "1xx"
    REDIRECTION = "3xx"
    CLIENT_ERROR = "4xx"
    SERVER_ERROR = "5xx"
    REFUSED = "refused"  # a final refusal without an answer


class RefuseReason(StrEnum):
    """Why a remote write request was refused whole (nothing of it kept): the ``reason``
    label of ``rwrouter_refused_requests_total`` (:mod:`rwrouter.server.app`)."""

    DECODE = "decode"  # 400: not a valid (snappy, protobuf) remote write body
    BAD_REQUEST = "bad_request"  # another 4xx of the request itself
    SLOW_BODY = "slow_body"  # 408: the body took longer than server.read_timeout
    TOO_LARGE = "too_large"  # 413: over server.max_request_bytes (or max_decoded_bytes)
    UNSUPPORTED = "unsupported"  # 415: a Content-Type or Content-Encoding rwrouter does not take
    CLIENT_GONE = "client_gone"  # the sender closed the connection before the answer
    QUEUE_FULL = "queue_full"  # 503: a destination's disk queue has no room
    BUSY = "busy"  # 503: too many requests being decoded
    STORAGE = "storage"  # 503: a disk queue could not be written
