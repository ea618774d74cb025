"""Credentials sources and signing (rwrouter.auth.credentials) with botocore.

No real AWS endpoint is ever contacted: every test runs with an empty AWS environment, fake
config files in tmp_path and instance metadata disabled; STS is moto's server and the container
(Pod Identity) endpoint an aiohttp server, both on 127.0.0.1."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from rwrouter.auth import credentials as creds_module
from rwrouter.auth.credentials import (
    FrozenCredentials,
    load_source,
    open_source,
    sign,
)
from rwrouter.errors import CredentialsError

pytestmark = pytest.mark.timeout(60)

ROLE_ARN = "arn:aws:iam::123456789012:role/rwrouter-writer"


@pytest.fixture(autouse=True)
def isolated_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An AWS environment with nothing in it: no keys, no real files, no instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    config, shared = tmp_path / "aws-config", tmp_path / "aws-credentials"
    config.write_text("")
    shared.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(shared))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "1")
    return tmp_path


# -- static keys --------------------------------------------------------------------------


async def test_static_keys() -> None:
    source = load_source(region="eu-west-1", access_key="AKID", secret_key="SECRET")
    assert (source.region, source.service, source.method) == ("eu-west-1", "aps", "static")
    assert await source.frozen() == FrozenCredentials("AKID", "SECRET", None)
    assert await source.force_refresh() == FrozenCredentials("AKID", "SECRET", None)
    assert source.expiry() is None
    assert "SECRET" not in repr(await source.frozen())


async def test_temporary_keys_from_duck_typed_config() -> None:
    config = SimpleNamespace(
        region="us-west-2", access_key="ASIA1", secret_key="S", session_token="TOKEN", profile=None
    )
    source = await open_source(config, service="aps")
    frozen = await source.frozen()
    assert frozen == FrozenCredentials("ASIA1", "S", "TOKEN")
    headers = sign(
        method="POST",
        url="https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
        headers={"X-Scope-OrgID": "t", "User-Agent": "x"},
        body=b"\x00body",
        credentials=frozen,
        region=source.region,
        service=source.service,
    )
    assert headers["Host"] == "aps-workspaces.us-west-2.amazonaws.com"
    assert headers["X-Amz-Security-Token"] == "TOKEN"
    signed = headers["Authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    assert signed == [
        "content-encoding",
        "content-type",
        "host",
        "x-amz-date",
        "x-amz-security-token",
        "x-prometheus-remote-write-version",
    ]
    assert sorted(n.lower() for n in headers) == sorted([*signed, "authorization"])
    assert "/us-west-2/aps/aws4_request" in headers["Authorization"]


BAD_SETTINGS = [
    ("no region", {"access_key": "A", "secret_key": "S"}, "sigv4.region is required"),
    ("key without secret", {"region": "r", "access_key": "A"}, "must be set together"),
    ("secret without key", {"region": "r", "secret_key": "S"}, "must be set together"),
    (
        "keys and profile",
        {"region": "r", "access_key": "A", "secret_key": "S", "profile": "p"},
        "not both",
    ),
    ("unknown profile", {"region": "r", "profile": "nope"}, "profile 'nope'"),
    ("nothing anywhere", {"region": "r"}, "no AWS credentials found in the default chain"),
]


@pytest.mark.parametrize(
    ("settings", "fragment"), [c[1:] for c in BAD_SETTINGS], ids=[c[0] for c in BAD_SETTINGS]
)
def test_bad_settings_and_missing_credentials(settings: dict[str, str], fragment: str) -> None:
    with pytest.raises(CredentialsError, match=fragment):
        load_source(**settings)


# -- profile and default chain ------------------------------------------------------------


async def test_profile_from_shared_credentials_file(isolated_aws_env: Path) -> None:
    (isolated_aws_env / "aws-credentials").write_text(
        "[default]\naws_access_key_id = DEFAULT\naws_secret_access_key = D\n"
        "[writer]\naws_access_key_id = WRITER\naws_secret_access_key = W\n"
    )
    source = load_source(region="eu-west-1", profile="writer")
    assert source.method == "profile"
    assert await source.frozen() == FrozenCredentials("WRITER", "W", None)


async def test_default_chain_env_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "ENVTOKEN")
    source = load_source(region="eu-west-1")
    assert source.method == "env"
    assert await source.frozen() == FrozenCredentials("ENVKEY", "ENVSECRET", "ENVTOKEN")


async def test_default_chain_web_identity_irsa(
    monkeypatch: pytest.MonkeyPatch, isolated_aws_env: Path, sts_url: str
) -> None:
    token_file = isolated_aws_env / "token"
    token_file.write_text("eyJhbGciOiJSUzI1NiJ9.e30.c2ln")  # moto does not check it
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("AWS_ROLE_ARN", ROLE_ARN)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts_url)
    source = await open_source(region="us-east-1")
    assert source.method == "assume-role-with-web-identity"
    frozen = await source.frozen()
    assert frozen.token and frozen.access_key
    expiry = source.expiry()
    assert expiry is not None and expiry > time.time()


async def test_default_chain_container_provider_pod_identity(
    monkeypatch: pytest.MonkeyPatch, isolated_aws_env: Path
) -> None:
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=6)
        return web.json_response(
            {
                "AccessKeyId": "PODKEY",
                "SecretAccessKey": "PODSECRET",
                "Token": "PODTOKEN",
                "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )

    app = web.Application()
    app.router.add_get("/v1/credentials", handler)
    async with _serve(app) as base:
        token_file = isolated_aws_env / "pod-identity-token"
        token_file.write_text("pod-token")
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{base}/v1/credentials")
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token_file))
        source = await open_source(region="us-east-1")  # in a thread: the server is on this loop
        assert source.method == "container-role"
        assert await source.frozen() == FrozenCredentials("PODKEY", "PODSECRET", "PODTOKEN")
        assert seen == ["pod-token"]
        expiry = source.expiry()
        assert expiry is not None and 5 * 3600 < expiry - time.time() <= 6 * 3600


# -- role_arn: STS AssumeRole against moto ---------------------------------------------------


async def test_role_arn_refreshes_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, sts_url: str
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts_url)
    calls: list[int] = []
    original = creds_module._assume_role

    def recording(**kwargs: Any) -> dict[str, str]:
        calls.append(threading.get_ident())
        return original(**kwargs)

    monkeypatch.setattr(creds_module, "_assume_role", recording)
    source = load_source(region="us-east-1", access_key="BASE", secret_key="B", role_arn=ROLE_ARN)
    assert source.method == "assume-role"
    assert calls == [] and source.expiry() is None  # deferred: nothing fetched yet

    loop_thread = threading.get_ident()
    first = await source.frozen()
    assert first.token and first.access_key != "BASE"
    assert len(calls) == 1 and calls[0] != loop_thread
    expiry = source.expiry()
    assert expiry is not None and 15 * 60 < expiry - time.time() <= 12 * 3600

    assert await source.frozen() == first  # not due: no new AssumeRole
    assert len(calls) == 1

    refreshed = await source.force_refresh()
    assert len(calls) == 2 and calls[1] != loop_thread
    assert refreshed.access_key != first.access_key


async def test_role_arn_refresh_failure_is_a_credentials_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    source = load_source(region="us-east-1", access_key="BASE", secret_key="B", role_arn=ROLE_ARN)
    with pytest.raises(CredentialsError, match="assume-role"):
        await source.frozen()


async def test_frozen_does_not_block_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def slow_refresh(**kwargs: Any) -> dict[str, str]:
        release.wait(5)
        expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        return {"access_key": "K", "secret_key": "S", "token": "T", "expiry_time": str(expires)}

    monkeypatch.setattr(creds_module, "_assume_role", slow_refresh)
    source = load_source(region="us-east-1", access_key="BASE", secret_key="B", role_arn=ROLE_ARN)
    pending = asyncio.create_task(source.frozen())
    ticks = 0
    while ticks < 5:  # the loop keeps running while the refresh blocks its thread
        await asyncio.sleep(0)
        ticks += 1
    assert not pending.done()
    release.set()
    assert await asyncio.wait_for(pending, 5) == FrozenCredentials("K", "S", "T")


class _serve:
    """Run an aiohttp app on 127.0.0.1 (free port) for the block; yields the base URL."""

    def __init__(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app)

    async def __aenter__(self) -> str:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()
