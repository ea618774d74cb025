"""The files a configuration names, loaded as ``run`` loads them: a destination's TLS
material (check-config and run name the key), the signing region against the workspace URL,
and the configuration files themselves read bounded (a FIFO or /dev/zero is refused)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from rwrouter.auth.schemes import authenticator_for
from rwrouter.cli import main
from rwrouter.cli.audit import router_request
from rwrouter.config import load_config, parse_config
from rwrouter.config.workspace import workspace_region
from rwrouter.errors import ConfigError
from rwrouter.send.transport import transport_for
from tests.support.tls import Pki

RW0 = "remote_write[0]"


def _pki(tmp_path: Path) -> dict[str, str]:
    """Files by name: a CA, a client pair, another key, an encrypted key, junk."""
    pki = Pki.make(tmp_path)
    cert, key = pki.issue("client", sans=["client.example"])
    _, other = pki.issue("other", sans=["other.example"])
    loaded = serialization.load_pem_private_key(key.read_bytes(), password=None)
    (tmp_path / "encrypted.key").write_bytes(
        loaded.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pass"),
        )
    )
    (tmp_path / "empty.pem").write_text("")
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    (tmp_path / "ca.der").write_bytes(b"0\x82\x01\x00" + b"\x00" * 64)
    names = {"ca": pki.ca_file, "cert": cert, "key": key, "other_key": other}
    return {
        **{n: str(p) for n, p in names.items()},
        **{
            n: str(tmp_path / f)
            for n, f in [("encrypted", "encrypted.key"), ("empty", "empty.pem")]
        },
        "junk": str(tmp_path / "junk.pem"),
        "der": str(tmp_path / "ca.der"),
    }


TLS_CASES = [
    pytest.param("{ca_file: empty}", [("ca_file", "is not a PEM certificate")], id="ca_empty"),
    pytest.param("{ca_file: junk}", [("ca_file", "is not a PEM certificate")], id="ca_junk"),
    pytest.param("{ca_file: der}", [("ca_file", "is not a PEM certificate")], id="ca_der"),
    pytest.param("{ca_file: key}", [("ca_file", "is not a PEM certificate")], id="ca_is_a_key"),
    pytest.param(
        "{cert_file: key, key_file: key}",
        [("cert_file", "is not a PEM certificate")],
        id="cert_is_a_key",
    ),
    pytest.param(
        "{cert_file: cert, key_file: junk}",
        [("key_file", "is not a PEM private key")],
        id="key_junk",
    ),
    pytest.param(
        "{cert_file: cert, key_file: other_key}",
        [("key_file", "does not match the certificate of cert_file (key values mismatch)")],
        id="key_mismatch",
    ),
    pytest.param(
        "{cert_file: cert, key_file: encrypted}",
        [("key_file", "is an encrypted private key: not supported")],
        id="key_encrypted_never_prompted",
    ),
    pytest.param(
        "{ca_file: empty, cert_file: cert, key_file: other_key}",
        [("ca_file", "is not a PEM certificate"), ("key_file", "does not match")],
        id="ca_and_pair_both_reported",
    ),
    pytest.param("{ca_file: ca, cert_file: cert, key_file: key}", [], id="good"),
]


def _with_files(section: str, files: dict[str, str]) -> str:
    for name, path in sorted(files.items(), key=lambda item: -len(item[0])):
        section = section.replace(f": {name}", f": {path}")
    return section


@pytest.mark.parametrize(("section", "expected"), TLS_CASES)
def test_tls_files_load_as_run_loads_them(
    tmp_path: Path, section: str, expected: list[tuple[str, str]]
) -> None:
    files = _pki(tmp_path)
    config = tmp_path / "rwrouter.yaml"
    tls = _with_files(section, files)
    config.write_text(f"remote_write:\n  - url: https://a/x\n    tls_config: {tls}\n")
    if not expected:
        dest = load_config(config, env={}).remote_write[0]
        assert transport_for(dest, path=RW0)._ssl is not True  # a context of its own
        return
    with pytest.raises(ConfigError) as info:
        load_config(config, env={})
    errors = getattr(info.value, "errors", (info.value,))
    got = [(e.path, e.reason) for e in errors]
    assert [p for p, _ in got] == [f"{RW0}.tls_config.{key}" for key, _ in expected]
    assert all(why in reason for (_, why), (_, reason) in zip(expected, got, strict=True))


def test_run_names_the_destination_and_key_of_a_bad_tls_file(tmp_path: Path) -> None:
    """What check-config did not see (the file changed since) still fails with the key."""
    files = _pki(tmp_path)
    config = tmp_path / "rwrouter.yaml"
    config.write_text(
        f"remote_write:\n  - url: https://a/x\n    tls_config: {{ca_file: {files['ca']}}}\n"
    )
    dest = load_config(config, env={}).remote_write[0]
    Path(files["ca"]).write_text("")
    with pytest.raises(ConfigError) as info:
        transport_for(dest, path="remote_write[3]")
    assert info.value.path == "remote_write[3].tls_config.ca_file"
    assert "is not a PEM certificate (no certificate or crl found)" in info.value.reason


WORKSPACE = "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-x/api/v1/remote_write"


@pytest.mark.parametrize(
    ("url", "region"),
    [
        pytest.param(WORKSPACE, "eu-west-1", id="ipv4"),
        pytest.param(
            "https://aps-workspaces-fips.us-gov-west-1.amazonaws.com/workspaces/w/api/v1/remote_write",
            "us-gov-west-1",
            id="fips",
        ),
        pytest.param(
            "https://aps-workspaces.ap-southeast-2.api.aws/workspaces/w",
            "ap-southeast-2",
            id="dualstack",
        ),
        pytest.param(
            "https://aps-workspaces-fips.us-east-2.api.aws/w", "us-east-2", id="fips_dualstack"
        ),
        pytest.param(
            "https://vpce-0a1b-abc.aps-workspaces.eu-west-1.vpce.amazonaws.com/workspaces/w",
            None,
            id="vpc_endpoint",
        ),
        pytest.param("http://127.0.0.1:9090/api/v1/write", None, id="other_host"),
        pytest.param("https://aps-workspaces.0.amazonaws.com/w", None, id="unset_variable"),
    ],
)
def test_the_region_of_a_workspace_url(url: str, region: str | None) -> None:
    assert workspace_region(url) == region


@pytest.mark.parametrize(
    ("sigv4", "url", "error"),
    [
        pytest.param("{region: us-east-1}", WORKSPACE, True, id="file_region_differs"),
        pytest.param("{region: eu-west-1}", WORKSPACE, False, id="file_region_matches"),
        pytest.param(
            "{region: us-east-1}", WORKSPACE.replace("aps-", "vpce-1.aps-"), False, id="vpce"
        ),
    ],
)
def test_a_file_s_signing_region_must_be_the_workspace_s(sigv4: str, url: str, error: bool) -> None:
    text = f"remote_write:\n  - url: {url}\n    sigv4: {sigv4}\n"
    if not error:
        parse_config(text, env={})
        return
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    assert info.value.path == f"{RW0}.sigv4.region"
    assert (
        "('eu-west-1')" in info.value.reason and "set sigv4.region: eu-west-1" in info.value.reason
    )


@pytest.mark.parametrize(
    ("sigv4", "env", "says"),
    [
        pytest.param("{}", {"AWS_REGION": "us-east-1"}, "(from AWS_REGION)", id="aws_region"),
        pytest.param(
            "{}",
            {"AWS_DEFAULT_REGION": "us-east-1"},
            "(from AWS_DEFAULT_REGION)",
            id="default_region",
        ),
        pytest.param("{}", {"AWS_REGION": "eu-west-1"}, None, id="env_matches"),
        pytest.param(
            "{region: us-east-1}", {"AWS_REGION": "eu-west-1"}, "'us-east-1' is not", id="file_wins"
        ),
    ],
)
def test_check_config_and_run_refuse_a_region_from_the_environment_that_cannot_work(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sigv4: str,
    env: dict[str, str],
    says: str | None,
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = tmp_path / "rwrouter.yaml"
    config.write_text(f"remote_write:\n  - url: {WORKSPACE}\n    sigv4: {sigv4}\n")
    code = main(["check-config", str(config)])
    err = capsys.readouterr().err
    assert code == (0 if says is None else 2), err
    if says is not None:
        assert err.startswith(f"rwrouter: configuration error: {RW0}.sigv4.region: ")
        assert says in err and err.count("\n") == 1


async def test_run_refuses_a_region_from_the_environment_that_cannot_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    dest = parse_config(
        f"remote_write:\n  - url: {WORKSPACE}\n    sigv4: {{}}\n", env={}
    ).remote_write[0]
    with pytest.raises(ConfigError, match=r"'us-east-1' \(from AWS_REGION\) is not the region"):
        await authenticator_for(dest, path="remote_write[2]")


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "fifo")
    return str(tmp_path / "fifo")


NOT_REGULAR = [
    pytest.param(lambda _: "/dev/zero", id="dev_zero"),
    pytest.param(_fifo, id="fifo"),
]


@pytest.mark.timeout(10)  # a FIFO opened for reading waits for a writer: it must not
@pytest.mark.parametrize("path_of", NOT_REGULAR)
@pytest.mark.parametrize(
    ("args_of", "says"),
    [
        pytest.param(
            lambda bad, web, ok: ["check-config", "--config", bad],
            "cannot read config file",
            id="config",
        ),
        pytest.param(
            lambda bad, web, ok: ["check-config", "--web.config.file", bad, ok],
            "cannot read web config file",
            id="web_config",
        ),
        pytest.param(
            lambda bad, web, ok: ["check-config", "--web.config.file", web, ok],
            "bearer_tokens[0].token_file: ",
            id="web_token_file",
        ),
    ],
)
def test_config_files_that_are_not_regular_files_are_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    path_of: Callable[[Path], str],
    args_of: Callable[[str, str, str], list[str]],
    says: str,
) -> None:
    bad = path_of(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text(f"bearer_tokens:\n  - {{name: a, token_file: {bad}}}\n")
    (tmp_path / "ok.yml").write_text("remote_write:\n  - url: http://a/x\n")
    assert main(args_of(bad, str(web), str(tmp_path / "ok.yml"))) == 2
    err = capsys.readouterr().err
    assert says in err and "is not a regular file" in err and err.count("\n") == 1


@pytest.mark.timeout(10)
@pytest.mark.parametrize("path_of", NOT_REGULAR)
def test_the_http_config_file_of_audit_is_read_bounded(
    tmp_path: Path, path_of: Callable[[Path], str]
) -> None:
    with pytest.raises(ConfigError, match="is not a regular file"):
        router_request("http://127.0.0.1:1/-/audit", path_of(tmp_path))


def test_the_web_config_s_tls_files_must_be_regular_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: /dev/zero\n  key_file: {_fifo(tmp_path)}\n")
    (tmp_path / "ok.yml").write_text("remote_write:\n  - url: http://a/x\n")
    assert main(["check-config", "--web.config.file", str(web), str(tmp_path / "ok.yml")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[3] for line in lines] == [
        "tls_server_config.cert_file",
        "tls_server_config.key_file",
    ]
    assert all("is not a regular file" in line for line in lines)
