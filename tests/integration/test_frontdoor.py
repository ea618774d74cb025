"""The front door of a running router (in-process ``RouterServer`` with a web configuration
file, aiohttp clients): 401/403/200 by role with ``WWW-Authenticate``, the lifecycle flag,
public roles, nothing kept of a refused write, refusals counted and logged once per client
and minute, bcrypt paid once per credential, the security headers; TLS with a CA, mTLS,
allowed SANs, and the files read again when they change (certificate rotation, a broken
file keeping the running settings)."""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from cryptography import x509

from rwrouter.config import load_config
from rwrouter.server.frontdoor import DoorOptions
from rwrouter.server.runner import RouterServer
from tests.integration.conftest import eventually, metric_value
from tests.support.capture import CaptureServer
from tests.support.series import HEADERS, Series, build_body
from tests.support.tls import Pki

pytestmark = pytest.mark.timeout(60)

PASSWORD = "s3cret-pw"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
TOKEN = "writer-token-0123456789"
BODY = build_body([Series((("__name__", "m"), ("i", "0")), ((1_000, 1.0),))])

Start = Callable[..., Awaitable[RouterServer]]


@pytest.fixture
async def start(tmp_path: Path, fresh_capture: CaptureServer) -> AsyncIterator[Start]:
    """``start(web_yaml, lifecycle=...)``: a router with ``web_yaml`` as its web config file
    (None: none), sending to the capture server's ``/a``."""
    routers: list[RouterServer] = []
    (tmp_path / "writer.token").write_text(TOKEN + "\n")

    async def make(web_yaml: str | None, *, lifecycle: bool = False) -> RouterServer:
        config = tmp_path / "rwrouter.yaml"
        config.write_text(
            f"server: {{listen_address: '127.0.0.1:0'}}\nstorage: {{path: {tmp_path / 'q'}}}\n"
            f"remote_write: [{{name: a, url: '{fresh_capture.url('/a')}', "
            "queue_config: {batch_send_deadline: 5ms}}]\n"
        )
        web_file = None
        if web_yaml is not None:
            web_file = tmp_path / "web.yml"
            web_file.write_text(web_yaml)
        door = DoorOptions(
            web_config_file=str(web_file) if web_file else None, enable_lifecycle=lifecycle
        )
        router = RouterServer(load_config(config), config_path=str(config), door=door)
        await router.start()
        routers.append(router)
        return router

    yield make
    for router in routers:
        await router.stop(drain_timeout=1)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


ROLES = f"""
basic_auth_users: {{alice: "{HASH}", bob: "{HASH}"}}
bearer_tokens: [{{name: writer, token_file: writer.token}}]
access:
  alice: {{roles: [read, admin]}}
  bob: {{roles: [read]}}
  writer: {{roles: [write], tenant: team-a}}
http_server_config:
  headers: {{X-Frame-Options: deny, X-Content-Type-Options: nosniff}}
"""
ALICE = basic("alice", PASSWORD)
BOB = basic("bob", PASSWORD)
WRITER = f"Bearer {TOKEN}"

# id, method, path, Authorization, status
BY_ROLE = [
    ("healthy_open", "GET", "/-/healthy", None, 200),
    ("ready_open", "GET", "/-/ready", None, 200),
    ("write_without_credential", "POST", "/api/v1/write", None, 401),
    ("write_with_token", "POST", "/api/v1/write", WRITER, 204),
    ("push_with_token", "POST", "/api/v1/push", WRITER, 204),
    ("write_with_reader", "POST", "/api/v1/write", ALICE, 403),
    ("write_with_wrong_token", "POST", "/api/v1/write", "Bearer not-it", 401),
    ("metrics_with_reader", "GET", "/metrics", BOB, 200),
    ("metrics_with_writer", "GET", "/metrics", WRITER, 403),
    ("metrics_without_credential", "GET", "/metrics", None, 401),
    ("status_with_reader", "GET", "/-/status", BOB, 200),
    ("index_with_reader", "GET", "/", BOB, 200),
    ("audit_with_reader", "GET", "/-/audit", BOB, 200),
    ("audit_without_credential", "GET", "/-/audit", None, 401),
    ("reload_with_admin", "POST", "/-/reload", ALICE, 200),
    ("reload_with_reader", "POST", "/-/reload", BOB, 403),
    ("reload_without_credential", "POST", "/-/reload", None, 401),
    ("wrong_password", "GET", "/metrics", basic("alice", "nope"), 401),
    ("unknown_user", "GET", "/metrics", basic("mallory", PASSWORD), 401),
    ("malformed_basic", "GET", "/metrics", "Basic !!!", 401),
    ("basic_without_colon", "GET", "/metrics", "Basic " + base64.b64encode(b"a").decode(), 401),
    ("unknown_scheme", "GET", "/metrics", "Digest x", 401),
    ("unknown_path_with_reader", "GET", "/nowhere", BOB, 404),
    ("unknown_path_without_credential", "GET", "/nowhere", None, 401),
]


@pytest.mark.parametrize(
    ("method", "path", "authorization", "status"),
    [c[1:] for c in BY_ROLE],
    ids=[c[0] for c in BY_ROLE],
)
async def test_endpoints_by_role(
    start: Start,
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    authorization: str | None,
    status: int,
) -> None:
    router = await start(ROLES, lifecycle=True)
    headers = dict(HEADERS) if path.startswith("/api/") else {}
    if authorization is not None:
        headers["Authorization"] = authorization
    data = BODY if method == "POST" else None
    async with http.request(method, router.url + path, data=data, headers=headers) as resp:
        text = await resp.text()
        assert resp.status == status, text
        assert resp.headers["X-Frame-Options"] == "deny"  # on every answer, refusals too
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        challenges = resp.headers.getall("WWW-Authenticate", [])
    if status == 401:
        assert challenges == ['Basic realm="rwrouter"', 'Bearer realm="rwrouter"']
        assert text in ("authentication required\n", "wrong credentials\n")
    else:
        assert challenges == []
    if status == 403:
        assert "lacks the" in text and text.count("\n") == 1


async def test_a_refused_write_keeps_nothing_and_is_counted(
    start: Start, http: aiohttp.ClientSession, fresh_capture: CaptureServer
) -> None:
    router = await start(ROLES)
    for authorization in (None, "Bearer not-it", ALICE):
        headers = {**HEADERS, **({"Authorization": authorization} if authorization else {})}
        async with http.post(router.url + "/api/v1/write", data=BODY, headers=headers) as resp:
            assert resp.status in (401, 403)
            assert resp.headers["Connection"] == "close"  # its body is never read
    async with http.post(
        router.url + "/api/v1/write", data=BODY, headers={**HEADERS, "Authorization": WRITER}
    ) as resp:
        assert resp.status == 204
    await eventually(lambda: fresh_capture.sample_count("/a") == 1)
    assert metric_value(router, "rwrouter_received_samples_total") == 1  # the accepted one only
    for reason in ("missing", "wrong", "forbidden"):
        assert metric_value(router, "rwrouter_auth_failures_total", reason=reason) == 1


async def test_without_a_web_config_the_lifecycle_api_is_off(
    start: Start, http: aiohttp.ClientSession
) -> None:
    router = await start(None)
    async with http.post(router.url + "/-/reload") as resp:
        assert resp.status == 403
        assert await resp.text() == "Lifecycle API is not enabled.\n"
    async with http.get(router.url + "/metrics") as resp:  # everything else as before
        assert resp.status == 200
    assert metric_value(router, "rwrouter_auth_failures_total", reason="lifecycle") == 1


async def test_with_the_lifecycle_flag_reload_needs_no_credential_without_users(
    start: Start, http: aiohttp.ClientSession
) -> None:
    router = await start(None, lifecycle=True)
    async with http.post(router.url + "/-/reload") as resp:
        assert resp.status == 200, await resp.text()


async def test_lifecycle_off_answers_403_to_an_admin_too(
    start: Start, http: aiohttp.ClientSession
) -> None:
    router = await start(ROLES, lifecycle=False)
    async with http.post(router.url + "/-/reload", headers={"Authorization": ALICE}) as resp:
        assert resp.status == 403 and await resp.text() == "Lifecycle API is not enabled.\n"


async def test_without_access_every_credential_has_every_role(
    start: Start, http: aiohttp.ClientSession
) -> None:
    router = await start(f'basic_auth_users: {{alice: "{HASH}"}}\n', lifecycle=True)
    headers = {"Authorization": ALICE}
    for path, status in (("/api/v1/write", 204), ("/-/reload", 200), ("/metrics", 200)):
        data = BODY if path.startswith("/api") else None
        all_headers = {**HEADERS, **headers} if data else headers
        method = "GET" if path == "/metrics" else "POST"
        async with http.request(method, router.url + path, data=data, headers=all_headers) as resp:
            assert resp.status == status, path
    async with http.get(router.url + "/metrics") as resp:
        assert resp.status == 401
        assert resp.headers.getall("WWW-Authenticate") == ['Basic realm="rwrouter"']


async def test_public_roles_need_no_credential(start: Start, http: aiohttp.ClientSession) -> None:
    router = await start(ROLES + "public_roles: [read]\n")
    async with http.get(router.url + "/metrics") as resp:
        assert resp.status == 200
    async with http.get(router.url + "/metrics", headers={"Authorization": "Bearer x"}) as resp:
        assert resp.status == 401  # a credential given is checked
    async with http.post(router.url + "/api/v1/write", data=BODY, headers=HEADERS) as resp:
        assert resp.status == 401


async def test_refusals_are_logged_once_per_client_and_minute(
    start: Start, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    router = await start(ROLES)
    caplog.set_level(logging.WARNING, logger="rwrouter.frontdoor")
    for _ in range(25):
        async with http.get(router.url + "/metrics", headers={"Authorization": "Bearer x"}) as r:
            assert r.status == 401
    lines = [r.getMessage() for r in caplog.records if r.name == "rwrouter.frontdoor"]
    print(f"25 refusals -> {len(lines)} log line(s)")
    assert len(lines) == 1 and "remote=127.0.0.1" in lines[0] and "reason=wrong" in lines[0]
    assert "Bearer" not in lines[0] and "x" not in lines[0].split("why=")[0].split("path=")[0]
    assert metric_value(router, "rwrouter_auth_failures_total", reason="wrong") == 25


async def test_bcrypt_is_paid_once_per_credential(
    start: Start, http: aiohttp.ClientSession
) -> None:
    router = await start(ROLES)
    assert router.front_door is not None
    for authorization, status in [(BOB, 200)] * 10 + [(basic("bob", "wrong"), 401)] * 5:
        async with http.get(router.url + "/metrics", headers={"Authorization": authorization}) as r:
            assert r.status == status
    assert router.front_door.checks.computed == 2  # one success, one failure, each remembered


def client_context(ca: Path | None, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca) if ca else None)
    if cert is not None:
        context.load_cert_chain(*map(str, cert))
    return context


async def get_over_tls(
    url: str, *, ca: Path | None, cert: tuple[Path, Path] | None = None, authorization: str = ""
) -> int:
    """GET ``url`` over a new TLS connection trusting ``ca``; the status."""
    connector = aiohttp.TCPConnector(ssl=client_context(ca, cert), force_close=True)
    headers = {"Authorization": authorization} if authorization else {}
    async with (
        aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=5)) as s,
        s.get(url, headers=headers) as resp,
    ):
        await resp.read()
        return resp.status


async def server_serial(router: RouterServer, ca: Path) -> int:
    """The serial number of the certificate a new TLS connection to ``router`` gets."""
    _, writer = await asyncio.open_connection(
        "127.0.0.1", router.port, ssl=client_context(ca), server_hostname="127.0.0.1"
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(True)
        return int(x509.load_der_x509_certificate(der).serial_number)
    finally:
        writer.close()


def tls_yaml(pki: Pki, extra: str = "") -> str:
    d = pki.directory
    return (
        f"tls_server_config:\n  cert_file: {d / 'server.pem'}\n  key_file: {d / 'server.key'}\n"
        + extra
    )


async def test_tls_with_a_ca_the_client_trusts(start: Start, tmp_path: Path) -> None:
    pki = Pki.make(tmp_path / "pki")
    router = await start(tls_yaml(pki))
    assert router.url.startswith("https://")
    assert await get_over_tls(router.url + "/-/healthy", ca=pki.ca_file) == 200
    assert await server_serial(router, pki.ca_file) == pki.serial("server")
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await get_over_tls(router.url + "/-/healthy", ca=None)  # the system's CAs: unknown


async def test_mtls_requires_a_certificate_of_the_client_ca(start: Start, tmp_path: Path) -> None:
    pki, other = Pki.make(tmp_path / "pki"), Pki.make(tmp_path / "other", name="other-ca")
    extra = (
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca_file}\n"
        "  client_allowed_sans: [sender.example]\n"
    )
    router = await start(tls_yaml(pki, extra))
    good = pki.issue("sender", sans=["sender.example"])
    assert await get_over_tls(router.url + "/-/healthy", ca=pki.ca_file, cert=good) == 200
    for cert in (None, other.issue("stranger", sans=["sender.example"])):
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            await get_over_tls(router.url + "/-/healthy", ca=pki.ca_file, cert=cert)
    wrong_san = pki.issue("elsewhere", sans=["elsewhere.example"])
    assert await get_over_tls(router.url + "/-/healthy", ca=pki.ca_file, cert=wrong_san) == 403
    assert metric_value(router, "rwrouter_auth_failures_total", reason="client_cert") == 1


async def test_certificates_rotate_and_a_broken_file_keeps_the_running_settings(
    start: Start, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pki = Pki.make(tmp_path / "pki")
    router = await start(tls_yaml(pki) + f'basic_auth_users: {{bob: "{HASH}"}}\n')
    url, first = router.url + "/metrics", pki.serial("server")
    pki.issue("server", sans=["127.0.0.1"])  # rotated in place
    rotated = await poll_async(lambda: server_serial(router, pki.ca_file), lambda s: s != first)
    print(f"certificate rotated without a restart: serial {first:x} -> {rotated:x}")
    assert rotated == pki.serial("server")
    assert await get_over_tls(url, ca=pki.ca_file, authorization=BOB) == 200
    caplog.set_level(logging.ERROR, logger="rwrouter.frontdoor")
    web = tmp_path / "web.yml"
    web.write_text(web.read_text() + "basic_auth_users: {}\n")  # a duplicate key: refused

    async def request_then_gauge() -> int:  # the files are looked at when requests come
        assert await get_over_tls(url, ca=pki.ca_file, authorization=BOB) == 200  # as before
        return int(metric_value(router, "rwrouter_web_config_last_reload_successful"))

    await poll_async(request_then_gauge, lambda ok: ok == 0)
    assert sum("not applied" in r.getMessage() for r in caplog.records) == 1


async def poll_async(
    probe: Callable[[], Awaitable[int]], ok: Callable[[int], bool], *, timeout: float = 15.0
) -> int:
    """Await ``probe()`` until ``ok`` of its result (returned), for at most ``timeout`` s (the
    files are looked at every few seconds)."""
    deadline = time.monotonic() + timeout
    while not ok(value := await probe()):
        assert time.monotonic() < deadline, f"not within {timeout} s"
        await asyncio.sleep(0.2)
    return value


async def rwrouter_audit(*argv: str) -> tuple[int, str, str]:
    """``rwrouter audit ARGV`` in a subprocess (the router runs in this event loop)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rwrouter",
        "audit",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    return proc.returncode or 0, out.decode(), err.decode()


# id, the HTTP client configuration file (None: no --http.config.file), exit status, a fragment
# of its output; {ca} and {password_file} are filled in
AUDIT_CLIENTS = [
    ("no_client_config", None, 1, "certificate verify failed"),
    ("ca_without_credential", "tls_config: {{ca_file: {ca}}}\n", 1, "answered 401"),
    (
        "ca_and_basic_auth",
        "tls_config: {{ca_file: {ca}}}\n"
        "basic_auth: {{username: ops, password_file: {password_file}}}\n",
        0,
        '"destinations"',
    ),
    (
        "wrong_password",
        "tls_config: {{ca_file: {ca}}}\nbasic_auth: {{username: ops, password: nope}}\n",
        1,
        "answered 401",
    ),
    ("unknown_key", "tls_config: {{ca_file: {ca}}}\nsigv4: {{}}\n", 2, "sigv4: unknown key"),
]


@pytest.mark.parametrize(
    ("client", "code", "fragment"),
    [c[1:] for c in AUDIT_CLIENTS],
    ids=[c[0] for c in AUDIT_CLIENTS],
)
async def test_rwrouter_audit_reaches_a_router_with_tls_and_credentials(
    start: Start, tmp_path: Path, client: str | None, code: int, fragment: str
) -> None:
    pki = Pki.make(tmp_path / "pki")
    users = f'basic_auth_users: {{ops: "{HASH}"}}\n'
    router = await start(tls_yaml(pki, users))
    argv = ["--url", router.url, "--json"]
    if client is not None:
        (tmp_path / "password").write_text(PASSWORD + "\n")
        path = tmp_path / "client.yml"
        path.write_text(client.format(ca=pki.ca_file, password_file=tmp_path / "password"))
        argv += ["--http.config.file", str(path)]
    status, out, err = await rwrouter_audit(*argv)
    assert status == code, err
    assert fragment in out + err
    assert PASSWORD not in out + err and "nope" not in out + err


def _run_reload(*args: str) -> tuple[int, str, str]:
    import subprocess

    result = subprocess.run(
        [sys.executable, "-m", "rwrouter", "reload", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return result.returncode, result.stdout, result.stderr


RELOAD_CLI = [
    # id, lifecycle, http config file (None: none), exit code, what it prints
    ("admin_reloads", True, "basic_auth: {username: alice, password: s3cret-pw}\n", 0,
     "configuration reloaded: kept a"),
    ("reader_refused", True, "basic_auth: {username: bob, password: s3cret-pw}\n", 1,
     "answered 403: credential 'bob' lacks the admin role (give --http.config.file the "
     "credential of a user with the admin role)\n"),
    ("no_credential", True, None, 1, "answered 401"),
    ("lifecycle_off", False, "basic_auth: {username: alice, password: s3cret-pw}\n", 1,
     "answered 403: Lifecycle API is not enabled. (the router serves POST /-/reload only "
     "when started with --web.enable-lifecycle; or send it SIGHUP: `rwrouter reload --pid "
     "PID`)\n"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("lifecycle", "http_config", "code", "expected"),
    [c[1:] for c in RELOAD_CLI],
    ids=[c[0] for c in RELOAD_CLI],
)
async def test_rwrouter_reload_posts_with_the_credentials_it_is_given(
    start: Start,
    tmp_path: Path,
    lifecycle: bool,
    http_config: str | None,
    code: int,
    expected: str,
) -> None:
    """``rwrouter reload`` (no ``kill`` in the image) POSTs /-/reload through the front door:
    the admin role and ``--web.enable-lifecycle`` both needed, as for any client."""
    router = await start(ROLES, lifecycle=lifecycle)
    args = ["--url", router.url]
    if http_config is not None:
        (tmp_path / "client.yml").write_text(http_config)
        args += ["--http.config.file", str(tmp_path / "client.yml")]
    got, out, err = await asyncio.to_thread(_run_reload, *args)
    assert got == code, err
    assert expected in (out if code == 0 else err)
    assert "Traceback" not in err


def test_rwrouter_reload_pid_sends_sighup(tmp_path: Path) -> None:
    """``rwrouter reload --pid PID`` is ``kill -HUP PID`` without ``kill``."""
    import subprocess

    marker = tmp_path / "hup"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, pathlib\n"
            f"signal.signal(signal.SIGHUP, lambda *_: (pathlib.Path({str(marker)!r})"
            ".write_text('hup'), sys.exit(0)))\n"
            "print('ready', flush=True)\n"
            "signal.pause()\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        code, out, err = _run_reload("--pid", str(child.pid))
        assert code == 0 and f"SIGHUP sent to process {child.pid}" in out, err
        assert child.wait(timeout=10) == 0 and marker.read_text() == "hup"
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    code, _, err = _run_reload("--pid", str(child.pid))  # gone now
    assert code == 1 and f"cannot signal process {child.pid}" in err


@pytest.mark.parametrize(
    ("lifecycle", "listed"),
    [pytest.param(True, True, id="lifecycle"), pytest.param(False, False, id="no_lifecycle")],
)
async def test_the_plain_text_index_lists_reload_only_when_served(
    start: Start,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
    lifecycle: bool,
    listed: bool,
) -> None:
    router = await start(None, lifecycle=lifecycle)
    async with http.post(router.url + "/api/v1/write", data=BODY, headers=HEADERS) as resp:
        assert resp.status == 204
    await eventually(lambda: fresh_capture.sample_count("/a") == 1)
    lines: list[str] = []
    deadline = time.monotonic() + 10
    while "    unsent (queued, not sent yet): nothing: all sent" not in lines:  # kept 1 s
        assert time.monotonic() < deadline, lines
        async with http.get(router.url + "/") as resp:  # curl's Accept: */*
            assert resp.status == 200
            lines = (await resp.text()).splitlines()
        await asyncio.sleep(0.05)
    assert ("POST /-/reload (--web.enable-lifecycle)" in lines) == listed
    assert any(line.startswith("    disk used / max_disk_bytes: ") for line in lines)
    assert any(line.startswith("    queue in memory: ") for line in lines)
