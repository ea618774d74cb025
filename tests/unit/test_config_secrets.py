"""Configuration errors and descriptions never print a secret (issue 14, item 6): the value
printer (rwrouter.config.values.show) hides passwords, credentials, secret keys and header
values as ``<secret>`` (prometheus/common ``config.Secret``) and redacts URLs
(``redact_url``, Go's ``url.URL.Redacted`` for the password); credentials with CR or LF are
refused at load; ``check-config`` prints neither. The reload outputs are in
tests/integration/test_reload_secrets.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from rwrouter.auth.schemes import HeaderAuth
from rwrouter.cli import main
from rwrouter.config import load_config, parse_config, redact_url
from rwrouter.config.files import SECRET_FILE_MAX_BYTES
from rwrouter.config.values import is_secret, show
from rwrouter.errors import ConfigError, CredentialsError
from tests.support.secret_configs import BAD_SECRETS, GOOD_SECRETS, SecretCase

pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.mark.parametrize("case", BAD_SECRETS, ids=[c.id for c in BAD_SECRETS])
def test_check_config_error_names_the_key_but_not_the_secret(
    case: SecretCase, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rwrouter.yaml"
    path.write_text(case.yaml)
    assert main(["check-config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert case.secret not in out + err
    assert err.startswith(f"rwrouter: configuration error: {case.where}")
    assert err.count("\n") == 1  # one line


@pytest.mark.parametrize("case", GOOD_SECRETS, ids=[c.id for c in GOOD_SECRETS])
def test_check_config_description_does_not_show_the_secret(
    case: SecretCase, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rwrouter.yaml"
    path.write_text(case.yaml)
    assert main(["check-config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "destination d:" in out
    assert case.secret not in out + err


URLS = [
    ("password", "http://pu:Passw0rd@h:1/p", "http://pu:xxxxx@h:1/p"),
    ("user_alone_is_a_token", "https://ghp_T0ken@github.com/x", "https://xxxxx@github.com/x"),
    (
        "query_values",
        "http://h/p?apikey=K3y&team=a&flag",
        "http://h/p?apikey=xxxxx&team=xxxxx&flag",
    ),
    ("fragment", "http://h/p#t0ken", "http://h/p#xxxxx"),
    ("port_out_of_range", "http://u:p@127.0.0.1:192840", "http://u:xxxxx@127.0.0.1:192840"),
    ("no_scheme", "u:p@h:1/x", "u:xxxxx@h:1/x"),
    ("at_in_the_path_is_no_userinfo", "http://h/a@b", "http://h/a@b"),
    ("at_in_the_password", "http://u:p@ss@h/", "http://u:xxxxx@h/"),
    ("plain", "https://h:9090/api/v1/write", "https://h:9090/api/v1/write"),
    ("unbalanced_ipv6", "http://u:p@[::1/x?k=v", "http://u:xxxxx@[::1/x?k=xxxxx"),
]


@pytest.mark.parametrize(("url", "redacted"), [u[1:] for u in URLS], ids=[u[0] for u in URLS])
def test_redact_url(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted


SHOWN = [
    ("password", "remote_write[0].basic_auth.password", 1234, "<secret>"),
    ("credentials", "remote_write[2].authorization.credentials", "x", "<secret>"),
    ("secret_key", "remote_write[0].sigv4.secret_key", "x", "<secret>"),
    ("header_value", "remote_write[0].headers.X-Api-Key", "x", "<secret>"),
    ("dotted_header_name", "remote_write[0].headers.X.Key", "x", "<secret>"),
    ("url", "remote_write[0].url", "http://u:p@h/", "'http://u:xxxxx@h/'"),
    ("proxy_url", "remote_write[0].proxy_url", "http://h/?k=v", "'http://h/?k=xxxxx'"),
    ("username_is_not_a_secret", "remote_write[0].basic_auth.username", "bob", "'bob'"),
    ("access_key_is_not_a_secret", "remote_write[0].sigv4.access_key", "AKID", "'AKID'"),
    ("other_value", "remote_write[0].name", 12, "12"),
    ("section_as_a_string", "remote_write[0].basic_auth", "u:p", "<secret>"),
    ("url_string_elsewhere", "remote_write[0]", "http://u:p@h/", "'http://u:xxxxx@h/'"),
]


@pytest.mark.parametrize(
    ("path", "value", "shown"), [s[1:] for s in SHOWN], ids=[s[0] for s in SHOWN]
)
def test_show_knows_the_secret_keys(path: str, value: object, shown: str) -> None:
    assert show(value, path) == shown
    assert is_secret(path) == (shown == "<secret>")


BASE = "remote_write:\n  - url: http://h/write\n"
LINE_BREAKS = [
    ("authorization_credentials_crlf", '    authorization: {credentials: "T0k\\r\\nX-A: 1"}\n', {}),
    ("basic_auth_password_lf", '    basic_auth: {username: u, password: "Pa\\nss"}\n', {}),
    ("basic_auth_username_cr", '    basic_auth: {username: "u\\rX", password: p}\n', {}),
    ("header_value_crlf", '    headers: {X-Api-Key: "K3y\\r\\nX-A: 1"}\n', {}),
    ("credentials_from_env", '    authorization: {credentials: "${TOKEN}"}\n', {"TOKEN": "T\r\nX"}),
]
LINE_BREAK_PATHS = {
    "authorization_credentials_crlf": "remote_write[0].authorization.credentials",
    "basic_auth_password_lf": "remote_write[0].basic_auth.password",
    "basic_auth_username_cr": "remote_write[0].basic_auth.username",
    "header_value_crlf": "remote_write[0].headers.X-Api-Key",
    "credentials_from_env": "remote_write[0].authorization.credentials",
}


@pytest.mark.parametrize(("case", "section", "env"), LINE_BREAKS, ids=[c[0] for c in LINE_BREAKS])
def test_credentials_with_a_line_break_are_refused_at_load(
    case: str, section: str, env: dict[str, str]
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + section, env=env)
    assert info.value.path == LINE_BREAK_PATHS[case]
    assert "line break (CR or LF)" in info.value.reason
    assert "\r" not in str(info.value) and "\n" not in str(info.value)


SECRET_FILES = [
    ("credentials_file_lf_inside", "authorization: {credentials_file: %s}", "T0k\nX-A: 1\n", True),
    ("password_file_cr_inside", "basic_auth: {username: u, password_file: %s}", "p\rq", True),
    ("credentials_file_trailing_newline", "authorization: {credentials_file: %s}", "T0k\n", False),
    (
        "password_file_crlf_at_the_end",
        "basic_auth: {username: u, password_file: %s}",
        "p\r\n",
        False,
    ),
]


@pytest.mark.parametrize(
    ("section", "content", "refused"),
    [s[1:] for s in SECRET_FILES],
    ids=[s[0] for s in SECRET_FILES],
)
def test_secret_files_with_a_line_break_inside_are_refused_at_load(
    tmp_path: Path, section: str, content: str, refused: bool
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(content.encode())
    config = tmp_path / "rwrouter.yaml"
    config.write_text(BASE + "    " + section % secret + "\n")
    if not refused:  # stripped as the sender strips it: no line break left
        load_config(config, env={})
        return
    with pytest.raises(ConfigError) as info:
        load_config(config, env={})
    assert info.value.path.endswith("_file")
    assert "line break" in info.value.reason
    assert content.strip() not in str(info.value)


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "fifo")
    return str(tmp_path / "fifo")


def _big(tmp_path: Path) -> str:
    (tmp_path / "big").write_bytes(b"x" * (SECRET_FILE_MAX_BYTES + 1))
    return str(tmp_path / "big")


UNBOUNDED_FILES = [
    pytest.param(
        "authorization: {credentials_file: %s}",
        lambda _: "/dev/zero",
        "is not a regular file",
        id="credentials_file_dev_zero",
    ),
    pytest.param(
        "basic_auth: {username: u, password_file: %s}",
        _big,
        f"is over {SECRET_FILE_MAX_BYTES:,} bytes",
        id="password_file_too_large",
    ),
    pytest.param("tls_config: {ca_file: %s}", _fifo, "is not a regular file", id="ca_file_fifo"),
    pytest.param(
        "tls_config: {ca_file: %s}", lambda p: str(p), "is a directory", id="ca_file_directory"
    ),
]


@pytest.mark.timeout(10)  # a FIFO opened for reading waits for a writer: it must not
@pytest.mark.parametrize(("section", "path_of", "reason"), UNBOUNDED_FILES)
def test_files_that_are_not_small_regular_files_are_refused_at_load(
    tmp_path: Path, section: str, path_of: Callable[[Path], str], reason: str
) -> None:
    config = tmp_path / "rwrouter.yaml"
    config.write_text(BASE + "    " + section % path_of(tmp_path) + "\n")
    with pytest.raises(ConfigError, match=reason) as info:
        load_config(config, env={})
    assert info.value.path.startswith("remote_write[0].") and info.value.path.endswith("_file")


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "path_of",
    [
        pytest.param(lambda _: "/dev/zero", id="device"),
        pytest.param(_fifo, id="fifo"),
        pytest.param(_big, id="too_large"),
    ],
)
async def test_a_secret_file_read_at_send_time_is_bounded(
    tmp_path: Path, path_of: Callable[[Path], str]
) -> None:
    auth = HeaderAuth(scheme="Bearer", secret=None, secret_file=path_of(tmp_path))
    with pytest.raises(CredentialsError, match=r"reading .* failed"):
        await auth.headers(url="http://h/write", body=b"", base={})


def test_check_config_escapes_control_characters_in_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rwrouter.yaml"
    path.write_text('remote_write:\n  - name: "a\\e]0;title\\ab"\n    url: http://h/write\n')
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "destination a\\x1b]0;title\\x07b:" in out
    assert "\x1b" not in out and "\x07" not in out
