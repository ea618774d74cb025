"""rwrouter.server.webtls without a socket: the TLS context of each ``tls_server_config``
(client auth types, versions, ciphers, curve, the errors of what ssl cannot do or load), and
:class:`WebConfigFile` reading the files again when they change (an injected clock)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from rwrouter.config.web import ClientAuth, TLSServerConfig, TLSVersion
from rwrouter.errors import ConfigError
from rwrouter.server.webtls import WebConfigFile, load_web_config, server_context
from tests.support.tls import Pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"))


def tls(pki: Pki, **changes: object) -> TLSServerConfig:
    d = pki.directory
    settings: dict[str, object] = {
        "cert_file": str(d / "server.pem"),
        "key_file": str(d / "server.key"),
    }
    settings.update(changes)
    return TLSServerConfig(**settings)  # type: ignore[arg-type]


VERIFY = [
    (ClientAuth.NO_CLIENT_CERT, ssl.CERT_NONE),
    (ClientAuth.VERIFY_CLIENT_CERT_IF_GIVEN, ssl.CERT_OPTIONAL),
    (ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT, ssl.CERT_REQUIRED),
]


@pytest.mark.parametrize(("auth", "mode"), VERIFY, ids=[a.value for a, _ in VERIFY])
def test_client_auth_types(pki: Pki, auth: ClientAuth, mode: ssl.VerifyMode) -> None:
    ca = None if auth is ClientAuth.NO_CLIENT_CERT else str(pki.ca_file)
    context = server_context(tls(pki, client_auth_type=auth, client_ca_file=ca))
    assert context.verify_mode == mode
    if ca is not None:
        assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "test-ca"),),)]


@pytest.mark.parametrize(
    "auth", [ClientAuth.REQUEST_CLIENT_CERT, ClientAuth.REQUIRE_ANY_CLIENT_CERT], ids=str
)
def test_unverified_client_certificates_are_refused(pki: Pki, auth: ClientAuth) -> None:
    with pytest.raises(ConfigError, match=r"client_auth_type: .* is not supported by rwrouter"):
        server_context(tls(pki, client_auth_type=auth, client_ca_file=str(pki.ca_file)))


def test_versions_ciphers_and_curve(pki: Pki) -> None:
    context = server_context(
        tls(
            pki,
            min_version=TLSVersion.TLS12,
            max_version=TLSVersion.TLS12,
            cipher_suites=("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
            curve_preferences=("CurveP384",),
        )
    )
    assert context.minimum_version == context.maximum_version == ssl.TLSVersion.TLSv1_2
    tls12 = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES128-GCM-SHA256"]
    assert context.options & ssl.OP_CIPHER_SERVER_PREFERENCE


BAD = [
    ("two_curves", {"curve_preferences": ("CurveP256", "X25519")}, "curve_preferences: rwrouter"),
    (
        "tls13_suites_only",
        {"cipher_suites": ("TLS_AES_128_GCM_SHA256",)},
        "cipher_suites: names TLS 1.3 suites only: set min_version TLS13",
    ),
    ("missing_key", {"key_file": "/nonexistent.key"}, "cert_file: cannot load the certificate"),
    (
        "key_of_another_cert",
        {"key_file": "OTHER"},
        "cert_file: cannot load the certificate and key",
    ),
    (
        "ca_file_without_certificates",
        {"client_auth_type": ClientAuth.VERIFY_CLIENT_CERT_IF_GIVEN, "client_ca_file": "KEY"},
        "client_ca_file: cannot load",
    ),
]


@pytest.mark.parametrize(("changes", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_settings_ssl_cannot_take(pki: Pki, changes: dict[str, object], message: str) -> None:
    _, other_key = pki.issue("other", sans=["other"])
    paths = {"OTHER": str(other_key), "KEY": str(pki.directory / "server.key")}
    changes = {k: paths.get(v, v) if isinstance(v, str) else v for k, v in changes.items()}
    with pytest.raises(ConfigError, match=message) as info:
        server_context(tls(pki, **changes))
    assert "PRIVATE KEY" not in str(info.value)


def test_only_tls13_suites_with_tls13(pki: Pki) -> None:
    context = server_context(
        tls(pki, min_version=TLSVersion.TLS13, cipher_suites=("TLS_AES_256_GCM_SHA384",))
    )
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3


def write_web(path: Path, pki: Pki, *, users: str = "") -> None:
    d = pki.directory
    path.write_text(
        f"tls_server_config: {{cert_file: {d}/server.pem, key_file: {d}/server.key}}\n" + users
    )


def bump(path: Path) -> None:
    """Change ``path``'s modification time (a rewrite within the same tick looks the same)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_the_files_are_read_again_when_they_change(pki: Pki, tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    write_web(web, pki)
    now, outcomes = [0.0], list[bool]()
    source = WebConfigFile(str(web), on_loaded=outcomes.append, clock=lambda: now[0])
    first = source.context
    assert outcomes == [True] and first is not None and not source.config.authenticates
    hashed = "$2b$04$" + "a" * 53
    write_web(web, pki, users=f'basic_auth_users: {{ops: "{hashed}"}}\n')
    bump(web)
    source.refresh()
    assert source.generation == 0  # not looked at again within CHECK_EVERY seconds
    now[0] += 3.0
    source.refresh()
    assert source.generation == 1 and source.config.authenticates
    assert source.context is not first and outcomes == [True, True]
    now[0] += 3.0
    source.refresh()  # nothing changed
    assert source.generation == 1 and outcomes == [True, True]


BROKEN = [
    ("bad_yaml", lambda web, pki: web.write_text("tls_server_config: [\n")),
    ("tls_turned_off", lambda web, pki: web.write_text("")),
    ("key_gone", lambda web, pki: (pki.directory / "gone.key").unlink()),
]


@pytest.mark.parametrize("breaks", [c[1] for c in BROKEN], ids=[c[0] for c in BROKEN])
def test_a_broken_change_keeps_the_running_settings(
    tmp_path: Path, breaks: object, caplog: pytest.LogCaptureFixture
) -> None:
    pki = Pki.make(tmp_path / "pki")
    cert, key = pki.issue("gone", sans=["127.0.0.1"])
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config: {{cert_file: {cert}, key_file: {key}}}\n")
    now, outcomes = [0.0], list[bool]()
    source = WebConfigFile(str(web), on_loaded=outcomes.append, clock=lambda: now[0])
    running = source.config, source.context
    breaks(web, pki)  # type: ignore[operator]
    if web.exists():
        bump(web)
    for _ in range(3):
        now[0] += 3.0
        source.refresh()
    assert (source.config, source.context) == running
    assert outcomes == [True, False]  # once for the change, not per look
    assert sum("not applied" in r.getMessage() for r in caplog.records) == 1


def test_load_web_config_reads_the_token_files(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("the-token\n")
    web = tmp_path / "web.yml"
    web.write_text("bearer_tokens: [{name: a, token_file: t}]\n")
    (token,) = load_web_config(str(web)).bearer_tokens
    assert token.token.reveal() == "the-token" and token.token_file == str(tmp_path / "t")
    with pytest.raises(ConfigError, match="cannot read web config file"):
        load_web_config(str(tmp_path / "missing.yml"))
