"""SigV4 signing rules for remote write to the managed workspace (pure: no I/O, no clock).

What goes on a signed request, and how to read the workspace's answers. The signature itself is
computed by botocore in :mod:`rwrouter.auth.credentials`; this module only decides *which*
headers it signs, so that every header we send (except ``User-Agent`` and the
``Content-Length`` the HTTP client adds) is covered by the signature.

Sources: shared/reference/managed-workspace.md ("Endpoint and headers", "Answers you
will see"); AWS SigV4 docs ("Create a canonical request"); botocore ``auth.py``
``SIGNED_HEADERS_BLACKLIST``; RW 1.0 and 2.0 specs (the three fixed headers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from rwrouter.protocol import NEVER_SIGNED, RW1_MESSAGE, RW2_MESSAGE, request_headers

_DEFAULT_PORTS: Mapping[str, int] = {"http": 80, "https": 443}

#: Lower-case fragments of a 403 body that mean "refresh the credentials and retry once"
#: (AWS wording: ExpiredTokenException, UnrecognizedClientException).
_REFRESHABLE_403: tuple[str, ...] = (
    "security token included in the request is expired",
    "security token included in the request is invalid",
    "expiredtoken",
    "token has expired",
)


def headers_to_sign(
    *,
    configured: Mapping[str, str],
    fixed: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The headers to put on a SigV4-signed request, before the signer adds its own.

    ``configured`` is the request's headers (the destination's ``headers`` setting, with the
    protocol's headers when the caller added them), ``fixed`` the protocol's headers (which
    win, compared case-insensitively); by default those of the message ``configured``'s own
    ``Content-Type`` names (:func:`rwrouter.protocol.request_headers`; remote write 1.0 when
    it names none or another one), so a remote write 2.0 request is signed as it is sent.
    Drops empty values (never sign an empty header) and every name in :data:`NEVER_SIGNED`,
    in any case. Returns a new dict; names keep the spelling of their source. Source:
    managed-workspace.md "Endpoint and headers"; RW 1.0 and 2.0 specs (the fixed headers).
    """
    if fixed is None:
        fixed = request_headers(_message_of(configured))
    fixed_names = {name.lower() for name in fixed}
    chosen: dict[str, str] = {}
    for name, value in configured.items():
        if name.lower() not in fixed_names:
            chosen[name] = value
    chosen.update(fixed)
    return {
        name: value.strip()
        for name, value in chosen.items()
        if value.strip() and name.lower() not in NEVER_SIGNED
    }


def _message_of(headers: Mapping[str, str]) -> str:
    """The protobuf message the ``Content-Type`` of ``headers`` names: RW 1.0 unless it is
    RW 2.0's exactly (the value :func:`rwrouter.protocol.request_headers` gives)."""
    rw2 = request_headers(RW2_MESSAGE)["Content-Type"]
    for name, value in headers.items():
        if name.lower() == "content-type" and value.strip() == rw2:
            return RW2_MESSAGE
    return RW1_MESSAGE


def host_header(url: str) -> str:
    """The ``Host`` header value for ``url``: its host, with the port only when not the default.

    ``https://aps-workspaces.eu-west-1.amazonaws.com:443/x`` gives
    ``aps-workspaces.eu-west-1.amazonaws.com``; ``http://127.0.0.1:9090/x`` keeps ``:9090``.
    IPv6 hosts keep their brackets. Raises ``ValueError`` for a URL without a host or with an
    invalid port. Source: RFC 9110 section 7.2; botocore ``SigV4Auth._canonical_host``.
    """
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        raise ValueError(f"URL has no host: {url!r}")
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is None or port == _DEFAULT_PORTS.get(parts.scheme.lower()):
        return host
    return f"{host}:{port}"


def is_expired_token_response(*, status: int, body_text: str) -> bool:
    """Whether an answer means "refresh the credentials and retry once".

    True for a 403 whose body says the security token is expired or invalid (AWS
    ``ExpiredTokenException`` / ``UnrecognizedClientException``). False for "Signature expired"
    (clock skew: fresh credentials would not help) and for everything else.
    Source: managed-workspace.md "Answers you will see".
    """
    if status != 403:
        return False
    text = body_text.lower()
    return any(fragment in text for fragment in _REFRESHABLE_403)


@dataclass(frozen=True)
class AwsError:
    """An AWS error answer, for logs: ``code`` (e.g. ``ExpiredTokenException``) or ``None``,
    and a one-line ``message`` of at most :data:`MAX_ERROR_MESSAGE` characters."""

    code: str | None
    message: str


#: Longest error message kept for a log line, in characters.
MAX_ERROR_MESSAGE = 300


def parse_aws_error(*, body_text: str, error_type: str | None = None) -> AwsError:
    """Read an AWS error body: JSON ``{"message": ...}`` / ``{"Message": ...}`` with an optional
    ``__type``, or plain text (Cortex-style answers). ``error_type`` is the ``x-amzn-ErrorType``
    header, if any (its ``:``-suffix is dropped). Never raises.
    Source: AWS JSON protocol error shape; managed-workspace.md "Answers you will see".
    """
    code = (error_type.split(":", 1)[0] or None) if error_type else None
    message = body_text
    try:
        data = json.loads(body_text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        raw_message = data.get("message", data.get("Message"))
        if isinstance(raw_message, str):
            message = raw_message
        raw_type = data.get("__type")
        if code is None and isinstance(raw_type, str):
            code = raw_type.rsplit("#", 1)[-1] or None
    one_line = " ".join(message.split())
    return AwsError(code=code, message=one_line[:MAX_ERROR_MESSAGE])
