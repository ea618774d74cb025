"""SigV4 signing rules for remote write to the managed workspace (pure: no I/O, no clock).

What goes on a signed request. The signature itself is computed by botocore in
:mod:`rwrouter.auth.credentials`; this module only decides *which* headers it signs, so that
every header we send (except ``User-Agent`` and the ``Content-Length`` the HTTP client adds)
is covered by the signature.

The workspace's answers are read by status alone: after any 401 or 403, whatever its body says
(security token expired or invalid, keys rotated, signature mismatch, even "Signature
expired"), the credentials are refreshed and the request is sent once more; a second 401/403
for the same request is final (:meth:`rwrouter.auth.schemes.SigV4.refresh_after`). The body
is not read for that decision.

Sources: shared/reference/managed-workspace.md ("Endpoint and headers", "Answers you
will see"); AWS SigV4 docs ("Create a canonical request"); botocore ``auth.py``
``SIGNED_HEADERS_BLACKLIST``; RW 1.0 and 2.0 specs (the three fixed headers).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from rwrouter.protocol import NEVER_SIGNED, RW1_MESSAGE, RW2_MESSAGE, request_headers

_DEFAULT_PORTS: Mapping[str, int] = {"http": 80, "https": 443}


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
