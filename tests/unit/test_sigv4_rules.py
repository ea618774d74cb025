"""Signing rules of rwrouter.auth.sigv4 (pure; no sockets)."""

from __future__ import annotations

import pytest

from rwrouter.auth import sigv4
from rwrouter.auth.sigv4 import AwsError

RW = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}

HEADER_CASES = [
    ("no configured headers", {}, RW),
    ("configured header kept", {"X-Team": "gpu"}, {"X-Team": "gpu", **RW}),
    ("empty value dropped", {"X-Empty": "", "X-Blank": "  "}, RW),
    ("value trimmed", {"X-Team": "  gpu "}, {"X-Team": "gpu", **RW}),
    ("tenant header dropped", {"X-Scope-OrgID": "t1"}, RW),
    ("tenant header dropped any case", {"x-scope-orgid": "t1", "X-SCOPE-ORGID": "t2"}, RW),
    ("user agent dropped", {"User-Agent": "me/1.0"}, RW),
    ("hop-by-hop dropped", {"Connection": "close", "Transfer-Encoding": "chunked"}, RW),
    (
        "signer headers dropped",
        {
            "Authorization": "Bearer x",
            "Host": "h",
            "X-Amz-Date": "d",
            "X-Amz-Security-Token": "t",
            "Content-Length": "5",
        },
        RW,
    ),
    ("fixed headers win", {"content-type": "text/plain", "Content-Encoding": "gzip"}, RW),
]


@pytest.mark.parametrize(
    ("configured", "expected"), [c[1:] for c in HEADER_CASES], ids=[c[0] for c in HEADER_CASES]
)
def test_headers_to_sign(configured: dict[str, str], expected: dict[str, str]) -> None:
    assert sigv4.headers_to_sign(configured=configured) == expected


def test_headers_to_sign_never_includes_unsigned_names() -> None:
    chosen = sigv4.headers_to_sign(configured={n: "v" for n in sigv4.NEVER_SIGNED})
    assert {n.lower() for n in chosen} & sigv4.NEVER_SIGNED == set()


def test_headers_to_sign_custom_fixed() -> None:
    fixed = {"Content-Type": "application/x-protobuf;proto=io.prometheus.write.v2.Request"}
    assert sigv4.headers_to_sign(configured={"X-A": "1"}, fixed=fixed) == {"X-A": "1", **fixed}


HOST_CASES = [
    (
        "https default port omitted",
        "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/w",
        "aps-workspaces.eu-west-1.amazonaws.com",
    ),
    ("https explicit 443 omitted", "https://example.com:443/x", "example.com"),
    ("http explicit 80 omitted", "http://example.com:80/x", "example.com"),
    ("https other port kept", "https://example.com:8443/x", "example.com:8443"),
    ("http 443 kept", "http://example.com:443/x", "example.com:443"),
    ("local double port kept", "http://127.0.0.1:9095/workspaces/w", "127.0.0.1:9095"),
    ("host lower-cased", "https://EXAMPLE.com/x", "example.com"),
    ("userinfo dropped", "https://u:p@example.com:8443/x", "example.com:8443"),
    ("ipv6 bracketed", "http://[::1]:9090/x", "[::1]:9090"),
]


@pytest.mark.parametrize(
    ("url", "expected"), [c[1:] for c in HOST_CASES], ids=[c[0] for c in HOST_CASES]
)
def test_host_header(url: str, expected: str) -> None:
    assert sigv4.host_header(url) == expected


@pytest.mark.parametrize("url", ["/relative/path", "http:///nohost"], ids=["relative", "empty"])
def test_host_header_without_host_raises(url: str) -> None:
    with pytest.raises(ValueError, match="no host"):
        sigv4.host_header(url)


EXPIRED_CASES = [
    (
        "expired token",
        403,
        '{"message":"The security token included in the request is expired"}',
        True,
    ),
    (
        "invalid token",
        403,
        '{"message":"The security token included in the request is invalid."}',
        True,
    ),
    ("expired token exception type", 403, '{"__type":"ExpiredTokenException"}', True),
    ("sts wording", 403, "<Error><Message>The provided token has expired.</Message></Error>", True),
    (
        "clock skew is not a token problem",
        403,
        '{"message":"Signature expired: 20240101T000000Z is now earlier than 20240101T000500Z"}',
        False,
    ),
    (
        "signature mismatch",
        403,
        '{"message":"The request signature we calculated does not match"}',
        False,
    ),
    ("missing token", 403, '{"message":"Missing Authentication Token"}', False),
    ("same words on a 400", 400, "The security token included in the request is expired", False),
    ("rate limit", 429, "ingestion rate limit (170000) exceeded", False),
]


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [c[1:] for c in EXPIRED_CASES],
    ids=[c[0] for c in EXPIRED_CASES],
)
def test_is_expired_token_response(status: int, body: str, expected: bool) -> None:
    assert sigv4.is_expired_token_response(status=status, body_text=body) is expected


PARSE_CASES = [
    (
        "json message",
        '{"message":"Missing Authentication Token"}',
        None,
        AwsError(None, "Missing Authentication Token"),
    ),
    (
        "json Message and __type",
        '{"__type":"com.amazon#ExpiredTokenException","Message":"x"}',
        None,
        AwsError("ExpiredTokenException", "x"),
    ),
    (
        "error type header wins",
        '{"__type":"Other","message":"m"}',
        "UnrecognizedClientException:http://internal",
        AwsError("UnrecognizedClientException", "m"),
    ),
    (
        "plain cortex text",
        "out of order sample. timestamp=1",
        None,
        AwsError(None, "out of order sample. timestamp=1"),
    ),
    ("multi-line collapsed", '{"message":"a\\n\\nb  c"}', None, AwsError(None, "a b c")),
    ("json without message", '{"code": 1}', None, AwsError(None, '{"code": 1}')),
    ("empty body", "", None, AwsError(None, "")),
]


@pytest.mark.parametrize(
    ("body", "error_type", "expected"),
    [c[1:] for c in PARSE_CASES],
    ids=[c[0] for c in PARSE_CASES],
)
def test_parse_aws_error(body: str, error_type: str | None, expected: AwsError) -> None:
    assert sigv4.parse_aws_error(body_text=body, error_type=error_type) == expected


def test_parse_aws_error_truncates_long_messages() -> None:
    parsed = sigv4.parse_aws_error(body_text="x" * 10_000)
    assert len(parsed.message) == sigv4.MAX_ERROR_MESSAGE
