"""Delivery to the SigV4-verifying workspace double: signing, retries, Retry-After, refusals,
and credential refresh on an expired token (issue 2 sections 6, 7 and 11).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from rwrouter.doubles.workspace import Fault, Key, WorkspaceDouble
from rwrouter.server.runner import RouterServer
from tests.integration.conftest import StartRouter, eventually, metric_value, post_write
from tests.support.series import HEADERS, Series, build_body

ACCESS_KEY, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


@pytest.fixture
async def double() -> AsyncIterator[WorkspaceDouble]:
    ws = WorkspaceDouble(credentials={ACCESS_KEY: Key(SECRET)})
    await ws.start()
    yield ws
    await ws.stop()


def _config(double: WorkspaceDouble, *, retry_429: bool = True, sigv4: str = "") -> str:
    sigv4 = sigv4 or f"{{region: us-east-1, access_key: {ACCESS_KEY}, secret_key: '{SECRET}'}}"
    return f"""
remote_write:
  - name: workspace
    url: {double.url("ws-1")}
    sigv4: {sigv4}
    queue_config:
      batch_send_deadline: 5ms
      max_shards: 1
      min_backoff: 10ms
      max_backoff: 5s
      retry_on_http_429: {str(retry_429).lower()}
"""


def _body(step: int = 0) -> bytes:
    return build_body([Series((("__name__", "up"), ("job", "a")), ((1_000 + step, 1.0),))])


async def _send(http: aiohttp.ClientSession, router: RouterServer, step: int = 0) -> None:
    assert (await post_write(http, router, _body(step)))[0] == 204


async def test_signed_request_carries_only_its_own_headers(
    start_router: StartRouter, double: WorkspaceDouble, http: aiohttp.ClientSession
) -> None:
    router = await start_router(_config(double))
    incoming = {
        **HEADERS,
        "X-Request-Id": "r-1",
        "X-Forwarded-For": "10.1.2.3",
        "User-Agent": "Prometheus/2.42.0",
        "X-Scope-OrgID": "team-a",
    }
    assert (await post_write(http, router, _body(), headers=incoming))[0] == 204
    await eventually(lambda: double.sample_count("ws-1") == 1)
    record = double.last_request
    assert record is not None and record.status == 200 and record.reason == ""
    assert double.verified_signatures == 1 and not double.rejections
    assert set(record.signed_headers) == {
        "content-encoding",
        "content-type",
        "host",
        "x-amz-date",
        "x-prometheus-remote-write-version",
    }
    assert not {"x-request-id", "x-forwarded-for", "x-scope-orgid"} & set(record.header_names)
    unsigned = set(record.header_names) - set(record.signed_headers)
    assert unsigned == {"authorization", "user-agent", "content-length"}


@pytest.mark.parametrize(
    ("retry_429", "attempts", "delivered", "dropped"),
    [(True, 3, 1, 0), (False, 1, 0, 1)],
    ids=["retry_on_http_429_true", "retry_on_http_429_false"],
)
async def test_429_twice_then_200(
    start_router: StartRouter,
    double: WorkspaceDouble,
    http: aiohttp.ClientSession,
    retry_429: bool,
    attempts: int,
    delivered: int,
    dropped: int,
) -> None:
    double.inject(Fault(429, "ingestion rate limit exceeded"), Fault(429, "Rate exceeded"))
    router = await start_router(_config(double, retry_429=retry_429))
    await _send(http, router)
    await eventually(
        lambda: (
            metric_value(router, "rwrouter_sent_samples_total", destination="workspace")
            + metric_value(
                router, "rwrouter_samples_dropped_total", destination="workspace", reason="4xx"
            )
            == 1
        )
    )
    assert double.request_count == attempts
    assert double.sample_count("ws-1") == delivered
    assert (
        metric_value(
            router, "rwrouter_samples_dropped_total", destination="workspace", reason="4xx"
        )
        == dropped
    )
    assert (
        metric_value(router, "rwrouter_retries_total", destination="workspace", reason="429")
        == attempts - 1
    )


async def test_503_with_retry_after_waits_at_least_that_long(
    start_router: StartRouter, double: WorkspaceDouble, http: aiohttp.ClientSession
) -> None:
    double.inject(Fault(503, "Service Unavailable", headers={"Retry-After": "2"}))
    router = await start_router(_config(double))
    await _send(http, router)
    await eventually(lambda: double.sample_count("ws-1") == 1, timeout=10)
    first, second = double.requests
    assert first.status == 503 and second.status == 200
    assert second.received_at - first.received_at >= 2.0


async def test_400_is_attempted_exactly_once(
    start_router: StartRouter, double: WorkspaceDouble, http: aiohttp.ClientSession
) -> None:
    double.inject(Fault(400, "out of order sample"))
    router = await start_router(_config(double))
    await _send(http, router)
    await eventually(
        lambda: (
            metric_value(
                router, "rwrouter_samples_dropped_total", destination="workspace", reason="4xx"
            )
            == 1
        )
    )
    await _send(http, router, step=1)  # the next batch still goes through
    await eventually(lambda: double.sample_count("ws-1") == 1)
    assert [r.status for r in double.requests] == [400, 200]


CREDENTIAL_PROCESS = """
import json, sys
print(json.dumps({**json.load(open(sys.argv[1])), "Version": 1,
                  "Expiration": "2999-01-01T00:00:00Z"}))
"""


async def test_expired_token_refreshes_credentials_and_retries_once(
    start_router: StartRouter,
    double: WorkspaceDouble,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Temporary keys from a credential_process profile; the workspace expires the first
    token; the router refreshes (the process now hands out new keys) and the batch arrives."""
    state = tmp_path / "keys.json"
    script = tmp_path / "creds.py"
    script.write_text(CREDENTIAL_PROCESS)

    def hand_out(access_key: str, token: str) -> None:
        state.write_text(
            json.dumps(
                {"AccessKeyId": access_key, "SecretAccessKey": SECRET, "SessionToken": token}
            )
        )
        double.add_key(access_key, SECRET, session_token=token, expires_at=4_000_000_000)

    hand_out("ASIAFIRST", "token-1")
    (tmp_path / "config").write_text(
        f"[profile rotating]\ncredential_process = {sys.executable} {script} {state}\n"
    )
    (tmp_path / "credentials").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    router = await start_router(_config(double, sigv4="{region: us-east-1, profile: rotating}"))
    await _send(http, router)
    await eventually(lambda: double.sample_count("ws-1") == 1)
    assert (
        metric_value(
            router, "rwrouter_credentials_expiry_timestamp_seconds", destination="workspace"
        )
        > 4_000_000_000
    )

    double.expire_key("ASIAFIRST")
    hand_out("ASIASECOND", "token-2")
    await _send(http, router, step=1)
    await eventually(lambda: double.sample_count("ws-1") == 2)
    first, refused, retried = double.requests
    assert (first.status, first.access_key) == (200, "ASIAFIRST")
    assert refused.status == 403 and "expired" in refused.message
    assert (retried.status, retried.access_key) == (200, "ASIASECOND")
    assert (
        metric_value(
            router, "rwrouter_retries_total", destination="workspace", reason="credential_refresh"
        )
        == 1
    )
