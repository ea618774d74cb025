"""The request a part of a batch becomes, per protocol, and how to read the answer (pure).

- RW 1.0 (``prometheus.WriteRequest``): the frames as they are, snappy-compressed; a part
  holding records flagged :data:`~rwrouter.queue.records.FLAG_START_TIMESTAMPS` is stripped
  of its start timestamps first (:func:`~rwrouter.wire.rw2_out.strip_start_timestamps`): an
  RW 1.0 receiver has no field for them.
- RW 2.0 (``io.prometheus.write.v2.Request``): :func:`~rwrouter.wire.rw2_out.encode_request`
  with the destination's metadata book, snappy-compressed.
- The answer's ``X-Prometheus-Remote-Write-*-Written`` headers (RW 2.0 spec "Required Written
  Response Headers"): what they say was not written of what a part carried
  (:func:`not_written`), and whether an RW 2.0 destination does not speak RW 2.0 at all
  (:func:`not_rw2`): a 415, or a 2xx without the headers or with all three 0 for a part that
  carried data (a 1.x receiver that ignored the Content-Type and decoded an empty
  ``WriteRequest``; Prometheus ``sendV2SamplesWithBackoff`` treats it as a failure).
"""

from __future__ import annotations

from dataclasses import dataclass

from rwrouter.protocol import RW2_MESSAGE, Written
from rwrouter.reasons import FallbackReason
from rwrouter.send.metabook import MetadataBook
from rwrouter.wire import compress
from rwrouter.wire.rw2_out import Meta, encode_request, strip_start_timestamps

__all__ = [
    "FALLBACK_MESSAGES",
    "NOT_WRITTEN_MESSAGE",
    "NotRW2",
    "Request",
    "encode_part",
    "not_rw2",
    "not_written",
]


FALLBACK_MESSAGES = {
    FallbackReason.UNSUPPORTED: "destination answered 415 to remote write 2.0: sending remote "
    "write 1.0 from now on until a reload",
    FallbackReason.NOTHING_WRITTEN: "destination answered 2xx to remote write 2.0 without "
    "writing anything (no X-Prometheus-Remote-Write-*-Written counts: a remote write 1.0 "
    "receiver): sending remote write 1.0 from now on until a reload",
}
NOT_WRITTEN_MESSAGE = (
    "answered 2xx but its X-Prometheus-Remote-Write-*-Written headers count "
    "less than was sent: counted as dropped"
)


@dataclass(frozen=True, slots=True)
class Request:
    """One request body (snappy-compressed) in ``message``; ``carried``: its samples,
    histograms and exemplars (RW 2.0; None for RW 1.0, whose parts count them together);
    ``removed``: start timestamps stripped from it (RW 1.0); ``orphans``: exemplars of the
    part left out of it (RW 2.0: exemplar-only series without their series,
    :func:`~rwrouter.wire.rw2_out.encode_request`)."""

    body: bytes
    message: str
    carried: Written | None = None
    removed: int = 0
    orphans: int = 0


@dataclass(frozen=True, slots=True)
class NotRW2:
    """An RW 2.0 request the destination did not take as RW 2.0 (``reason``: see
    :func:`not_rw2`)."""

    reason: FallbackReason


def _unknown(_name: bytes) -> Meta | None:
    return None


def encode_part(
    raw: bytes, *, message: str, start_timestamps: bool, book: MetadataBook | None
) -> Request:
    """The request of ``raw`` (RW1-form frames concatenated) in ``message``.
    ``start_timestamps``: the frames may hold some (their records' flag); ``book``: the
    metadata of an RW 2.0 destination (None: every series gets an empty Metadata).
    Raises DecodeError when the frames are malformed (a damaged queue record)."""
    if message == RW2_MESSAGE:
        memo, resolve = (book.memo, book.resolve) if book is not None else ({}, _unknown)
        encoded = encode_request(raw, memo, resolve)
        carried = Written(encoded.samples, encoded.histograms, encoded.exemplars)
        return Request(
            compress(encoded.request), message, carried, orphans=encoded.orphan_exemplars
        )
    removed = 0
    if start_timestamps:
        raw, removed = strip_start_timestamps(raw)
    return Request(compress(raw), message, None, removed)


def not_written(*, count: int, carried: Written | None, written: Written | None) -> Written:
    """What the destination says it did not write of a part carrying ``count`` samples
    (all kinds), ``carried`` per kind when known: per kind when known, else all of it in
    ``samples``. Nothing when it sent no Written headers (RW 1.0: exact or absent)."""
    if written is None:
        return Written()
    if carried is None:
        return Written(max(0, count - written.total))
    return Written(
        max(0, carried.samples - written.samples),
        max(0, carried.histograms - written.histograms),
        max(0, carried.exemplars - written.exemplars),
    )


def not_rw2(
    *, status: int | None, carried: Written | None, written: Written | None
) -> FallbackReason | None:
    """Why an RW 2.0 destination does not take RW 2.0 (:class:`FallbackReason`), from the
    answer to an RW 2.0 request; None when it does."""
    if status == 415:
        return FallbackReason.UNSUPPORTED
    if status is None or not 200 <= status < 300 or carried is None or not carried.total:
        return None
    if written is None or not written.total:
        return FallbackReason.NOTHING_WRITTEN
    return None
