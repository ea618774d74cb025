"""Real senders through the front door: Debian's Prometheus 2.42 and the project's Prometheus 3
remote-write to two ``rwrouter run --web.config.file`` processes over TLS with a CA they trust
(``tls_config.ca_file``)::

    sender (a recording rule: door_probe, every second), one remote_write entry each:
      via=mtls         --client certificate (RequireAndVerifyClientCert)--> router "mtls"
      via=basic        --basic_auth (password_file)------------------------> router "auth"
      via=bearer       --authorization.credentials_file-------------------> router "auth"
      via=basic_wrong  --a wrong password---------------------------------> router "auth": 401
      via=bearer_wrong --a wrong token------------------------------------> router "auth": 401
    each router --> the capture server (/mtls, /auth)

Each entry labels its series ``via=<entry>`` (write_relabel_configs), so the capture server
shows which entries' samples were kept: the wrong ones never are, and the router counts their
401s (``rwrouter_auth_failures_total{reason="wrong"}``). The bearer token names a tenant
(``access``) and router "auth" sends its destination each request's tenant in
``X-Scope-OrgID`` (``tenant_header``): the bearer entry's series arrive with it, the basic
entry's without it, never in one request. ``POST /-/reload`` without
``--web.enable-lifecycle`` answers 403, even to a valid credential. Certificates are made in
the test (:mod:`tests.support.tls`). Every wait is a bounded poll.
"""

from __future__ import annotations

import base64
import functools
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest

from rwrouter.doubles.prometheus import parse_metrics
from rwrouter.doubles.router import RouterProcess
from tests.support.capture import CaptureServer
from tests.support.peers import peer_binary
from tests.support.polling import wait_for
from tests.support.prometheus import PrometheusProcess, free_port, prometheus_binary
from tests.support.tls import Pki

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(240)]

PASSWORD, TOKEN = "sender-pass-7", "sender-token-0123456789"
GOOD, WRONG = ("mtls", "basic", "bearer"), ("basic_wrong", "bearer_wrong")


@dataclass
class Routers:
    """The two routers, the capture server they send to, the TLS material."""

    pki: Pki
    capture: CaptureServer
    urls: dict[str, str]  # "mtls", "auth" -> https://127.0.0.1:port
    work: Path

    def context(self, *, client_cert: bool) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca_file))
        if client_cert:
            context.load_cert_chain(*(str(p) for p in self.pki.issue("probe", sans=["probe"])))
        return context

    def request(self, router: str, path: str, *, method: str = "GET") -> tuple[int, str]:
        """``method path`` on ``router`` with the basic credential (or a client cert)."""
        headers = {} if router == "mtls" else {"Authorization": _basic("prom", PASSWORD)}
        request = urllib.request.Request(self.urls[router] + path, method=method, headers=headers)
        context = self.context(client_cert=router == "mtls")
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, router: str, name: str, **labels: str) -> float:
        status, text = self.request(router, "/metrics")
        assert status == 200, text
        return sum(
            s.value
            for s in parse_metrics(text)
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


WEB = {
    "mtls": """
tls_server_config:
  cert_file: {d}/server.pem
  key_file: {d}/server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {ca}
""",
    "auth": """
tls_server_config: {{cert_file: {d}/server.pem, key_file: {d}/server.key}}
basic_auth_users: {{prom: "{hash}"}}
bearer_tokens: [{{name: prom-token, token_file: {d}/router.token}}]
access:
  prom: {{roles: [write, read, admin]}}
  prom-token: {{roles: [write], tenant: {tenant}}}
""",
}
TENANT = "gpu-team"  # the bearer token's tenant


@pytest.fixture(scope="module")
def routers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Routers]:
    work = tmp_path_factory.mktemp("frontdoor")
    pki = Pki.make(work / "pki")
    (work / "pki" / "router.token").write_text(TOKEN + "\n")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    with ExitStack() as stack:
        capture = stack.enter_context(CaptureServer())
        urls = {}
        for name, web in WEB.items():
            port = free_port()
            (work / f"{name}.web.yml").write_text(
                web.format(d=pki.directory, ca=pki.ca_file, hash=hashed, tenant=TENANT)
            )
            tenants = ", tenant_header: X-Scope-OrgID" if name == "auth" else ""
            (work / f"{name}.yaml").write_text(
                f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
                f"storage: {{path: {work / name / 'queues'}}}\n"
                f"remote_write: [{{name: store, url: '{capture.url('/' + name)}'{tenants}, "
                "queue_config: {batch_send_deadline: 100ms}}]\n"
            )
            router = RouterProcess(
                config_path=work / f"{name}.yaml",
                port=port,
                log_path=work / f"{name}.log",
                args=["--web.config.file", str(work / f"{name}.web.yml")],
            )
            stack.callback(router.stop)
            urls[name] = f"https://127.0.0.1:{port}"
        rig = Routers(pki=pki, capture=capture, urls=urls, work=work)
        for name in urls:
            wait_for(functools.partial(rig_ready, rig, name), timeout=30, what=f"{name} ready")
        yield rig


def rig_ready(rig: Routers, name: str) -> bool:
    try:
        return rig.request(name, "/-/ready")[0] == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def sender_config(rig: Routers, sender: str, secrets: Path) -> str:
    """Five remote_write entries (see the module docstring), each labelling its series."""
    pki = rig.pki
    cert, key = pki.issue(f"sender-{sender}", sans=[f"{sender}.example"])
    (secrets / "good.pass").write_text(PASSWORD)
    (secrets / "wrong.pass").write_text("not-the-password")
    (secrets / "good.token").write_text(TOKEN)
    (secrets / "wrong.token").write_text("not-the-token")
    ca = f"ca_file: {pki.ca_file}"
    auth = {
        "mtls": f"tls_config: {{{ca}, cert_file: {cert}, key_file: {key}}}",
        "basic": f"basic_auth: {{username: prom, password_file: {secrets}/good.pass}}",
        "bearer": f"authorization: {{credentials_file: {secrets}/good.token}}",
        "basic_wrong": f"basic_auth: {{username: prom, password_file: {secrets}/wrong.pass}}",
        "bearer_wrong": f"authorization: {{credentials_file: {secrets}/wrong.token}}",
    }
    entries = []
    for via, how in auth.items():
        router = "mtls" if via == "mtls" else "auth"
        tls = "" if via == "mtls" else f"\n    tls_config: {{{ca}}}"
        entries.append(
            f"""  - name: {via}
    url: {rig.urls[router]}/api/v1/write
    {how}{tls}
    write_relabel_configs: [{{target_label: via, replacement: {via}}}]
    queue_config: {{batch_send_deadline: 500ms, min_backoff: 50ms, max_backoff: 1s}}"""
        )
    return (
        f"global: {{evaluation_interval: 1s, external_labels: {{sender: {sender}}}}}\n"
        "rule_files: [rules.yml]\nremote_write:\n" + "\n".join(entries) + "\n"
    )


def kept(rig: Routers, sender: str) -> set[str]:
    """The ``via`` of the series of ``sender`` the capture server got, from both routers."""
    found = set()
    for path in ("/mtls", "/auth"):
        for labels in rig.capture.label_sets(path):
            label = dict(labels)
            if label.get("sender") == sender and label.get("__name__") == "door_probe":
                found.add(label["via"])
    return found


def tenants_by_via(rig: Routers, sender: str) -> dict[str, set[str | None]]:
    """Router "auth"'s requests: the X-Scope-OrgID (None: absent) of each ``via``'s series of
    ``sender``; a request mixing two ``via`` fails."""
    found: dict[str, set[str | None]] = {}
    for received in rig.capture.requests("/auth"):
        if received.request is None or not received.request.timeseries:
            continue
        org = {v for k, v in received.headers.items() if k.lower() == "x-scope-orgid"}
        vias = {
            dict((label.name, label.value) for label in ts.labels).get("via")
            for ts in received.request.timeseries
            if any(lab.name == "sender" and lab.value == sender for lab in ts.labels)
        }
        if not vias:
            continue
        assert len(vias) == 1 and len(org) <= 1, (vias, org)  # one tenant a request
        (via,) = vias
        found.setdefault(str(via), set()).add(next(iter(org), None))
    return found


@pytest.mark.parametrize("sender", ["p2", "p3"])
def test_senders_write_through_tls_mtls_basic_auth_and_bearer_tokens(
    routers: Routers, sender: str, tmp_path: Path
) -> None:
    binary = prometheus_binary() if sender == "p2" else peer_binary("prometheus")
    workdir = tmp_path / sender
    workdir.mkdir()
    (workdir / "rules.yml").write_text(
        "groups: [{name: door, interval: 1s, rules: [{record: door_probe, expr: vector(1)}]}]\n"
    )
    wrong_before = routers.metric("auth", "rwrouter_auth_failures_total", reason="wrong")
    text = sender_config(routers, sender, workdir)
    with PrometheusProcess.start(text, binary=binary, workdir=workdir):
        wait_for(
            lambda: kept(routers, sender) >= set(GOOD),
            timeout=60,
            what=f"{sender}'s samples through {', '.join(GOOD)}",
        )
        wait_for(
            lambda: (
                routers.metric("auth", "rwrouter_auth_failures_total", reason="wrong")
                >= wrong_before + len(WRONG)
            ),
            timeout=30,
            what=f"the 401s of {sender}'s wrong credentials",
        )
    assert kept(routers, sender) == set(GOOD)  # nothing of the wrong credentials' requests
    assert tenants_by_via(routers, sender) == {"basic": {None}, "bearer": {TENANT}}
    failures = routers.metric("auth", "rwrouter_auth_failures_total", reason="wrong")
    print(f"{sender}: kept via {sorted(kept(routers, sender))}; 401 wrong={failures:g}")


def test_reload_without_the_lifecycle_flag_is_403(routers: Routers) -> None:
    assert routers.request("auth", "/-/reload", method="POST") == (
        403,
        "Lifecycle API is not enabled.\n",
    )
