"""SigV4 verification for the workspace double, written from the AWS algorithm with hashlib/hmac.

Deliberately independent of botocore (which signs our requests): otherwise the signer would be
checked against itself. Pure: the time is passed in.

Algorithm (AWS "Signature Version 4 signing process"; managed-workspace.md "Spec: our local
workspace double"): canonical request = method, canonical URI (path normalised, then
URI-encoded again with ``safe="/~"``), sorted canonical query, ``name:trimmed value`` per signed
header, the SignedHeaders list, sha256 hex of the body; string to sign = ``AWS4-HMAC-SHA256``,
X-Amz-Date, scope, sha256 hex of the canonical request; key = HMAC chain ``"AWS4"+secret`` ->
date -> region -> service -> ``aws4_request``; compared with :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote

ALGORITHM = "AWS4-HMAC-SHA256"
#: Largest accepted distance between X-Amz-Date and the double's clock, in seconds (AWS: 5 min).
MAX_SKEW_S = 300.0
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_INVALID_TOKEN = "The security token included in the request is invalid."
_EXPIRED_TOKEN = "The security token included in the request is expired"


@dataclass(frozen=True)
class Key:
    """An access key the double accepts: secret, session token (temporary keys) and expiry in
    unix seconds (``None``: never)."""

    secret: str
    session_token: str | None = None
    expires_at: float | None = None


@dataclass(frozen=True)
class Verified:
    access_key: str
    signed_headers: tuple[str, ...]


@dataclass(frozen=True)
class Rejection:
    """A failed check: its number in the spec, HTTP status, counter reason, body message and
    AWS error type (``x-amzn-ErrorType``)."""

    check: int
    status: int
    reason: str
    message: str
    error_type: str


@dataclass(frozen=True)
class _Authorization:
    access_key: str
    date: str
    region: str
    service: str
    terminal: str
    signed_headers: tuple[str, ...]
    signature: str


def canonical_uri(raw_path: str) -> str:
    """Normalise the path as sent (remove empty and dot segments), then URI-encode it again."""
    segments: list[str] = []
    for segment in raw_path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    path = "/" + "/".join(segments)
    if raw_path.endswith("/") and segments:
        path += "/"
    return quote(path, safe="/~")


def canonical_query(raw_query: str) -> str:
    """Pairs URI-encoded (``safe="-_.~"``) and sorted by name, then value."""
    pairs = parse_qsl(raw_query, keep_blank_values=True)
    encoded = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in encoded)


def canonical_request(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, Sequence[str]],
    signed_headers: Sequence[str],
    body: bytes,
) -> str:
    """The canonical request; ``headers`` maps lower-case names to the values received."""
    lines = [method.upper(), canonical_uri(raw_path), canonical_query(raw_query)]
    for name in signed_headers:
        values = (" ".join(value.split()) for value in headers.get(name, ()))
        lines.append(f"{name}:{','.join(values)}")
    lines.append("")
    lines.append(";".join(signed_headers))
    lines.append(hashlib.sha256(body).hexdigest())
    return "\n".join(lines)


def string_to_sign(*, amz_date: str, scope: str, canonical: str) -> str:
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return "\n".join([ALGORITHM, amz_date, scope, digest])


def signing_key(*, secret: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret).encode("utf-8")
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    return key


def signature(*, key: bytes, to_sign: str) -> str:
    return hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def verify(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, Sequence[str]],
    body: bytes,
    keys: Mapping[str, Key],
    region: str,
    service: str,
    now_s: float,
    max_skew_s: float = MAX_SKEW_S,
) -> Verified | Rejection:
    """Checks 2-8 of the spec, in order; the first failing one is returned."""
    values = headers.get("authorization", ())
    if not values:
        return Rejection(
            2,
            403,
            "missing_auth",
            "Missing Authentication Token",
            "MissingAuthenticationTokenException",
        )
    auth = _parse_authorization(values[0])
    if isinstance(auth, Rejection):
        return auth
    amz_date = next(iter(headers.get("x-amz-date", ())), "")
    failure = (
        _check_signed(auth, headers, amz_date)
        or _check_scope(auth, region, service, amz_date)
        or _check_time(amz_date, now_s, max_skew_s)
        or _check_key(auth, headers, keys, now_s)
    )
    if failure:
        return failure
    canonical = canonical_request(
        method=method,
        raw_path=raw_path,
        raw_query=raw_query,
        headers=headers,
        signed_headers=auth.signed_headers,
        body=body,
    )
    scope = f"{auth.date}/{auth.region}/{auth.service}/aws4_request"
    to_sign = string_to_sign(amz_date=amz_date, scope=scope, canonical=canonical)
    key = signing_key(
        secret=keys[auth.access_key].secret,
        date=auth.date,
        region=auth.region,
        service=auth.service,
    )
    if not hmac.compare_digest(signature(key=key, to_sign=to_sign), auth.signature):
        return Rejection(
            8, 403, "signature_mismatch", _mismatch(canonical, to_sign), "InvalidSignatureException"
        )
    return Verified(access_key=auth.access_key, signed_headers=auth.signed_headers)


def _parse_authorization(value: str) -> _Authorization | Rejection:
    def malformed(why: str) -> Rejection:
        message = f"{why} Authorization={value}"
        return Rejection(3, 403, "malformed_auth", message, "IncompleteSignatureException")

    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        return malformed(f"Unsupported AWS 'algorithm': '{algorithm}'.")
    params: dict[str, str] = {}
    for item in rest.split(","):
        name, sep, item_value = item.strip().partition("=")
        if sep:
            params[name] = item_value
    for required in ("Credential", "SignedHeaders", "Signature"):
        if not params.get(required):
            return malformed(f"Authorization header requires '{required}' parameter.")
    credential = params["Credential"].split("/")
    if len(credential) != 5 or not all(credential):
        return malformed("Credential must have exactly 5 slash-delimited elements.")
    access_key, date, region, service, terminal = credential
    signed = tuple(params["SignedHeaders"].split(";"))
    return _Authorization(access_key, date, region, service, terminal, signed, params["Signature"])


def _check_signed(
    auth: _Authorization, headers: Mapping[str, Sequence[str]], amz_date: str
) -> Rejection | None:
    if "host" not in auth.signed_headers:
        message = "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization."
        return Rejection(4, 403, "unsigned_host_or_date", message, "InvalidSignatureException")
    if "x-amz-date" not in auth.signed_headers or not amz_date:
        message = (
            "Authorization header requires existence of either a 'X-Amz-Date' or a "
            "'Date' header, signed."
        )
        return Rejection(4, 403, "unsigned_host_or_date", message, "IncompleteSignatureException")
    for name in auth.signed_headers:
        if name not in headers:
            message = f"Signed header '{name}' is missing from the request."
            return Rejection(4, 403, "unsigned_host_or_date", message, "InvalidSignatureException")
    return None


def _check_scope(
    auth: _Authorization, region: str, service: str, amz_date: str
) -> Rejection | None:
    message = ""
    if auth.region != region:
        message = f"Credential should be scoped to a valid region, not '{auth.region}'. "
    elif auth.service != service:
        message = f"Credential should be scoped to correct service: '{service}'. "
    elif auth.terminal != "aws4_request":
        message = "Credential should be scoped with a valid terminator: 'aws4_request'. "
    elif auth.date != amz_date[:8]:
        message = (
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of "
            f"date from HTTP: '{auth.date}' != '{amz_date[:8]}', from '{amz_date}'."
        )
    if not message:
        return None
    return Rejection(5, 403, "wrong_scope", message, "InvalidSignatureException")


def _check_time(amz_date: str, now_s: float, max_skew_s: float) -> Rejection | None:
    try:
        parsed = dt.datetime.strptime(amz_date, _AMZ_DATE).replace(tzinfo=dt.UTC)
    except ValueError:
        return Rejection(
            6,
            403,
            "signature_expired",
            f"Invalid X-Amz-Date: '{amz_date}'.",
            "IncompleteSignatureException",
        )
    skew = parsed.timestamp() - now_s
    if abs(skew) <= max_skew_s:
        return None
    now = dt.datetime.fromtimestamp(now_s, dt.UTC)
    limit = dt.timedelta(seconds=max_skew_s)
    minutes = f"{max_skew_s / 60:g} min."
    if skew < 0:
        message = (
            f"Signature expired: {amz_date} is now earlier than "
            f"{(now - limit):{_AMZ_DATE}} ({now:{_AMZ_DATE}} - {minutes})"
        )
    else:
        message = (
            f"Signature not yet current: {amz_date} is still later than "
            f"{(now + limit):{_AMZ_DATE}} ({now:{_AMZ_DATE}} + {minutes})"
        )
    return Rejection(6, 403, "signature_expired", message, "InvalidSignatureException")


def _check_key(
    auth: _Authorization,
    headers: Mapping[str, Sequence[str]],
    keys: Mapping[str, Key],
    now_s: float,
) -> Rejection | None:
    key = keys.get(auth.access_key)
    token = next(iter(headers.get("x-amz-security-token", ())), None)
    if key is None or token != key.session_token:
        return Rejection(7, 403, "invalid_token", _INVALID_TOKEN, "UnrecognizedClientException")
    if key.expires_at is not None and now_s >= key.expires_at:
        return Rejection(7, 403, "expired_token", _EXPIRED_TOKEN, "ExpiredTokenException")
    return None


def _mismatch(canonical: str, to_sign: str) -> str:
    return (
        "The request signature we calculated does not match the signature you provided. "
        "Check your AWS Secret Access Key and signing method. Consult the service documentation "
        f"for details.\n\nThe Canonical String for this request should have been\n'{canonical}'"
        f"\n\nThe String-to-Sign should have been\n'{to_sign}'\n"
    )
