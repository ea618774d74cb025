"""Signing rules of rwrouter.auth.sigv4 and the SigV4 refresh rule (no sockets)."""

from __future__ import annotations

import pytest

from rwrouter.auth import sigv4
from rwrouter.auth.credentials import CredentialsSource, FrozenCredentials
from rwrouter.auth.schemes import SigV4
from rwrouter.protocol import NEVER_SIGNED

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
    chosen = sigv4.headers_to_sign(configured={n: "v" for n in NEVER_SIGNED})
    assert {n.lower() for n in chosen} & NEVER_SIGNED == set()


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


class _Refreshes(CredentialsSource):
    """Static keys that count the forced refreshes (no botocore, no network)."""

    def __init__(self) -> None:
        super().__init__(credentials=None, region="us-east-1", service="aps", method="static")
        self.refreshes = 0

    async def frozen(self) -> FrozenCredentials:
        return FrozenCredentials("AKID", "SECRET")

    async def force_refresh(self) -> FrozenCredentials:
        self.refreshes += 1
        return await self.frozen()


# The refresh rule reads the status only: any 401/403 refreshes (and the request is sent once
# more), whatever the body says; nothing else does, whatever the body says.
REFRESH_CASES = [
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
        "clock skew",
        403,
        '{"message":"Signature expired: 20240101T000000Z is now earlier than 20240101T000500Z"}',
        True,
    ),
    (
        "signature mismatch",
        403,
        '{"message":"The request signature we calculated does not match"}',
        True,
    ),
    ("missing token", 403, '{"message":"Missing Authentication Token"}', True),
    ("401 without a body", 401, "", True),
    ("token words on a 400", 400, "The security token included in the request is expired", False),
    ("rate limit", 429, "ingestion rate limit (170000) exceeded", False),
    ("server error", 503, "", False),
]


@pytest.mark.parametrize(
    ("status", "body", "refresh"),
    [c[1:] for c in REFRESH_CASES],
    ids=[c[0] for c in REFRESH_CASES],
)
async def test_refresh_after_reads_the_status_only(status: int, body: str, refresh: bool) -> None:
    source = _Refreshes()
    assert await SigV4(source).refresh_after(status=status, body_text=body) is refresh
    assert source.refreshes == int(refresh)
