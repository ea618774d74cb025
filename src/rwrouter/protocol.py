"""Remote write protocol constants and content negotiation (pure).

Sources: the RW 1.0 spec and the RW 2.0 spec (2.0-rc.4, as Prometheus >= 3.8 speaks it);
Prometheus ``storage/remote/write_handler.go`` (``parseProtoMsg``) and client_golang
``exp/api/remote`` (header names and values).

- A request names its protobuf message in ``Content-Type``:
  ``application/x-protobuf`` (RW 1.0, ``prometheus.WriteRequest``; also with
  ``proto=prometheus.WriteRequest``) or
  ``application/x-protobuf;proto=io.prometheus.write.v2.Request`` (RW 2.0). The body is
  snappy *block* compressed (``Content-Encoding: snappy``) either way.
- An RW 2.0 receiver answers every request, success or failure, with the
  ``X-Prometheus-Remote-Write-{Samples,Histograms,Exemplars}-Written`` headers; a sender treats
  a 2xx without them as "nothing written" (a 1.0 receiver that ignored the Content-Type).
  For RW 1.0 the headers are optional: exact or absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rwrouter.errors import UnsupportedError

__all__ = [
    "MESSAGES",
    "NEVER_SIGNED",
    "RW1_MESSAGE",
    "RW2_MESSAGE",
    "WRITTEN_HEADERS",
    "Written",
    "message_of",
    "request_headers",
]

#: Lower-case header names never put on a SigV4-signed request
#: (:func:`rwrouter.auth.sigv4.headers_to_sign`) nor accepted in a sigv4 destination's
#: ``headers`` (:mod:`rwrouter.config.client`):
#: botocore's ``SIGNED_HEADERS_BLACKLIST`` (hop-by-hop, tracing, User-Agent: it would be sent
#: unsigned), the Cortex/Mimir tenant header (never sent to the workspace), and the headers the
#: signer or the HTTP client set themselves.
NEVER_SIGNED: frozenset[str] = frozenset(
    {
        # botocore SIGNED_HEADERS_BLACKLIST
        "baggage",
        "connection",
        "expect",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "traceparent",
        "tracestate",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "x-amzn-trace-id",
        # tenant header of Cortex/Mimir: never sent to the workspace
        "x-scope-orgid",
        # set by the signer (Host, X-Amz-*, Authorization) or the HTTP client (Content-Length)
        "authorization",
        "host",
        "date",
        "x-amz-date",
        "x-amz-security-token",
        "x-amz-content-sha256",
        "content-length",
    }
)

RW1_MESSAGE = "prometheus.WriteRequest"
RW2_MESSAGE = "io.prometheus.write.v2.Request"
MESSAGES = (RW1_MESSAGE, RW2_MESSAGE)
"""The protobuf messages rwrouter receives and sends (``protobuf_message`` values)."""

_MEDIA_TYPE = "application/x-protobuf"
_CONTENT_TYPES = {RW1_MESSAGE: _MEDIA_TYPE, RW2_MESSAGE: f"{_MEDIA_TYPE};proto={RW2_MESSAGE}"}
_VERSIONS = {RW1_MESSAGE: "0.1.0", RW2_MESSAGE: "2.0.0"}

SAMPLES_WRITTEN = "X-Prometheus-Remote-Write-Samples-Written"
HISTOGRAMS_WRITTEN = "X-Prometheus-Remote-Write-Histograms-Written"
EXEMPLARS_WRITTEN = "X-Prometheus-Remote-Write-Exemplars-Written"
WRITTEN_HEADERS = (SAMPLES_WRITTEN, HISTOGRAMS_WRITTEN, EXEMPLARS_WRITTEN)


def request_headers(message: str) -> dict[str, str]:
    """The fixed headers of a write request carrying ``message`` (one of :data:`MESSAGES`):
    ``Content-Encoding``, ``Content-Type`` and ``X-Prometheus-Remote-Write-Version``."""
    return {
        "Content-Encoding": "snappy",
        "Content-Type": _CONTENT_TYPES[message],
        "X-Prometheus-Remote-Write-Version": _VERSIONS[message],
    }


def message_of(content_encoding: str | None, content_type: str | None) -> str:
    """The protobuf message a request carries, from its headers: :data:`RW1_MESSAGE` or
    :data:`RW2_MESSAGE`. Absent headers mean RW 1.0 with snappy, as Prometheus's own receiver
    assumes. Media type, parameter names and message names are compared case-insensitively.

    Raises UnsupportedError (415) for a Content-Encoding other than snappy, a media type other
    than ``application/x-protobuf``, or a ``proto=`` naming another message.
    """
    if content_encoding and content_encoding.strip().lower() != "snappy":
        raise UnsupportedError(
            f"unsupported Content-Encoding {content_encoding!r}: remote write needs snappy"
        )
    if not content_type:
        return RW1_MESSAGE
    media, _, params = content_type.partition(";")
    if media.strip().lower() != _MEDIA_TYPE:
        raise UnsupportedError(f"unsupported Content-Type {content_type!r}: expected {_MEDIA_TYPE}")
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() != "proto":
            continue
        proto = value.strip().strip('"')
        for message in MESSAGES:
            if proto.lower() == message.lower():
                return message
        if not proto:
            return RW1_MESSAGE
        raise UnsupportedError(
            f"unsupported protobuf message {proto!r}: expected {RW1_MESSAGE} or {RW2_MESSAGE}"
        )
    return RW1_MESSAGE


@dataclass(frozen=True, slots=True)
class Written:
    """What a receiver says it wrote of one request (RW 2.0 spec, "Required Written Response
    Headers"): counts of samples, native histograms and exemplars."""

    samples: int = 0
    histograms: int = 0
    exemplars: int = 0

    @property
    def total(self) -> int:
        """Samples + histograms + exemplars (rwrouter's "samples" in its counters)."""
        return self.samples + self.histograms + self.exemplars

    def headers(self) -> dict[str, str]:
        """The three ``X-Prometheus-Remote-Write-*-Written`` headers."""
        return {
            SAMPLES_WRITTEN: str(self.samples),
            HISTOGRAMS_WRITTEN: str(self.histograms),
            EXEMPLARS_WRITTEN: str(self.exemplars),
        }

    @classmethod
    def parse(cls, headers: Mapping[str, str]) -> Written | None:
        """The counts a destination answered, or None when it sent none of the three headers
        with a value (a header missing or empty among others counts 0; an empty one is no
        header: Prometheus ``ParseWriteResponseStats``, "Empty means zero", confirms a 2.0
        receiver only by a non-empty value). ``headers`` must look names up
        case-insensitively (aiohttp's ``CIMultiDict``, or lower-case keys). A value that is
        not a non-negative decimal integer counts 0."""
        values = [_header(headers, name) for name in WRITTEN_HEADERS]
        if all(value is None for value in values):
            return None
        samples, histograms, exemplars = (_count(value) for value in values)
        return cls(samples, histograms, exemplars)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.lower())
    return value if value is not None and value.strip() else None


def _count(value: str | None) -> int:
    text = (value or "").strip()
    return int(text) if text.isascii() and text.isdigit() else 0
