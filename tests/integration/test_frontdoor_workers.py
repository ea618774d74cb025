"""``rwrouter run --workers 2 --web.config.file FILE``: every worker applies the web
configuration (the supervisor passes the flags on), whichever worker the kernel gives a
connection; the workers' control endpoints stay on their private unix sockets. Also
``rwrouter check-config --web.config.file`` and ``rwrouter run`` refusing a bad file."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from rwrouter.doubles.prometheus import MetricSample, free_port, parse_metrics
from rwrouter.doubles.router import RouterProcess
from tests.support.capture import CaptureServer
from tests.support.series import HEADERS, Series, build_body

pytestmark = pytest.mark.timeout(90)

PASSWORD = "w0rkers"
CREDENTIAL = "Basic " + base64.b64encode(f"ops:{PASSWORD}".encode()).decode()
CONNECTIONS = 32  # new connections, spread by the kernel over both workers


def status_of(url: str, *, authorization: str = "", data: bytes | None = None) -> int:
    headers = {
        **(HEADERS if data else {}),
        **({"Authorization": authorization} if authorization else {}),
    }
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def metrics(router: RouterProcess) -> list[MetricSample]:
    request = urllib.request.Request(router.url + "/metrics", headers={"Authorization": CREDENTIAL})
    with urllib.request.urlopen(request, timeout=5) as response:
        return list(parse_metrics(response.read().decode()))


def up(router: RouterProcess) -> bool:
    """Both workers listen (each says so in the merged /metrics)."""
    try:
        samples = metrics(router)
    except (urllib.error.URLError, ConnectionError):
        return False
    up = {s.labels["worker"] for s in samples if s.name == "rwrouter_worker_up" and s.value == 1}
    return up == {"0", "1"}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    tmp = tmp_path_factory.mktemp("door-workers")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    (tmp / "web.yml").write_text(f'basic_auth_users: {{ops: "{hashed}"}}\n')
    with CaptureServer() as capture:
        port = free_port()
        (tmp / "rwrouter.yaml").write_text(
            f"server: {{listen_address: '127.0.0.1:{port}', shutdown_timeout: 1s}}\n"
            f"storage: {{path: data}}\nremote_write: [{{name: s, url: '{capture.url('/s')}'}}]\n"
        )
        router = RouterProcess(
            config_path=tmp / "rwrouter.yaml",
            port=port,
            log_path=tmp / "rwrouter.log",
            args=["--workers", "2", "--web.config.file", str(tmp / "web.yml")],
        )
        try:
            deadline = time.monotonic() + 30
            while not up(router):
                assert router.process.poll() is None, router.log_path.read_text()
                assert time.monotonic() < deadline, router.log_path.read_text()[-3000:]
                time.sleep(0.1)
            yield router
        finally:
            router.stop(timeout_s=15)


def test_every_worker_applies_the_web_config(router: RouterProcess) -> None:
    body = build_body([Series((("__name__", "m"),), ((1_000, 1.0),))])
    refused = [status_of(router.url + "/api/v1/write", data=body) for _ in range(CONNECTIONS)]
    assert refused == [401] * CONNECTIONS
    samples = metrics(router)
    per_worker = {
        s.labels["worker"]: s.value
        for s in samples
        if s.name == "rwrouter_auth_failures_total" and s.labels.get("reason") == "missing"
    }
    print(f"401s per worker over {CONNECTIONS} connections: {per_worker}")
    assert set(per_worker) == {"0", "1"} and sum(per_worker.values()) == CONNECTIONS
    assert min(per_worker.values()) > 0  # both workers refused some: both apply it


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rwrouter", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_config_validates_the_web_config_file(tmp_path: Path) -> None:
    config = tmp_path / "rwrouter.yaml"
    config.write_text("remote_write: [{name: s, url: 'http://127.0.0.1:9/w'}]\n")
    web = tmp_path / "web.yml"
    web.write_text('basic_auth_users: {ops: "plain-password"}\n')
    done = run_cli("check-config", str(config), "--web.config.file", str(web))
    assert done.returncode == 2
    assert f"--web.config.file {web}: basic_auth_users.ops: not a bcrypt hash" in done.stderr
    assert "plain-password" not in done.stderr + done.stdout
    hashed = bcrypt.hashpw(b"x", bcrypt.gensalt(4)).decode()
    web.write_text(f'basic_auth_users: {{ops: "{hashed}"}}\n')
    done = run_cli("check-config", str(config), "--web.config.file", str(web))
    assert done.returncode == 0, done.stderr
    assert "credential ops (basic auth): roles write,read,admin" in done.stdout
    assert hashed not in done.stdout


def test_run_refuses_a_bad_web_config_file(tmp_path: Path) -> None:
    config = tmp_path / "rwrouter.yaml"
    config.write_text(
        f"storage: {{path: {tmp_path / 'q'}}}\n"
        "remote_write: [{name: s, url: 'http://127.0.0.1:9/w'}]\n"
    )
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config: {cert_file: nope.pem, key_file: nope.key}\n")
    done = run_cli("run", "--config", str(config), "--web.config.file", str(web))
    assert done.returncode == 2
    for key in ("cert_file", "key_file"):  # each missing file named, in one run
        assert f"tls_server_config.{key}: cannot read " in done.stderr
