"""rwrouter.config.web: the web configuration file (exporter toolkit format + rwrouter's
bearer_tokens, access, public_roles): every key parsed, each rule's error with its key path,
no error or description quoting a hash, a token or a file's content. No file is read: token
files come from a dict."""

from __future__ import annotations

import bcrypt
import pytest

from rwrouter.config.web import (
    Access,
    ClientAuth,
    Role,
    TLSVersion,
    WebConfig,
    describe_web_config,
    parse_web_config,
)
from rwrouter.errors import ConfigError

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()  # cost 4: fast
TOKEN = "tok-0123456789abcdef"
FILES = {
    "/etc/web/a.token": f"{TOKEN}\n".encode(),
    "/etc/web/b.token": b"other-token",
    "/etc/web/same.token": f"  {TOKEN}  ".encode(),
    "/etc/web/empty.token": b" \n",
    "/etc/web/spaced.token": b"two words",
    "/etc/web/binary.token": b"\xff\xfe",
}
SECRETS = (HASH, TOKEN, "other-token")


def read_file(path: str) -> bytes:
    try:
        return FILES[path]
    except KeyError:
        raise FileNotFoundError(2, "No such file or directory", path) from None


def parse(text: str) -> WebConfig:
    return parse_web_config(text, source="web.yml", base_dir="/etc/web", read_file=read_file)


def test_an_empty_file_asks_for_nothing() -> None:
    config = parse("")
    assert config == WebConfig()
    assert not config.authenticates and config.tls_server_config is None
    assert config.access is None and config.public_roles == frozenset()


def test_every_key() -> None:
    config = parse(
        f"""
tls_server_config:
  cert_file: server.pem
  key_file: /abs/server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.pem
  client_allowed_sans: [sender.example, "127.0.0.1"]
  min_version: TLS13
  max_version: TLS13
  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
  prefer_server_cipher_suites: false
  curve_preferences: [X25519]
http_server_config:
  http2: false
  headers: {{X-Frame-Options: deny, Strict-Transport-Security: max-age=31536000}}
basic_auth_users: {{alice: "{HASH}"}}
bearer_tokens: [{{name: prom-a, token_file: a.token}}]
access:
  alice: {{roles: [read, admin]}}
  prom-a: {{roles: [write], tenant: team-a, tenant_from_header: true}}
public_roles: [read]
"""
    )
    tls = config.tls_server_config
    assert tls is not None
    assert (tls.cert_file, tls.key_file, tls.client_ca_file) == (
        "/etc/web/server.pem",
        "/abs/server.key",
        "/etc/web/ca.pem",
    )
    assert tls.client_auth_type is ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT
    assert tls.client_allowed_sans == ("sender.example", "127.0.0.1")
    assert (tls.min_version, tls.max_version) == (TLSVersion.TLS13, TLSVersion.TLS13)
    assert tls.cipher_suites == ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",)
    assert tls.prefer_server_cipher_suites is False and tls.curve_preferences == ("X25519",)
    assert config.http_server_config.http2 is False
    assert dict(config.http_server_config.headers) == {
        "X-Frame-Options": "deny",
        "Strict-Transport-Security": "max-age=31536000",
    }
    assert config.basic_auth_users["alice"].reveal() == HASH
    (token,) = config.bearer_tokens
    assert (token.name, token.token_file, token.token.reveal()) == (
        "prom-a",
        "/etc/web/a.token",
        TOKEN,
    )
    assert config.access == {
        "alice": Access(roles=frozenset({Role.READ, Role.ADMIN})),
        "prom-a": Access(roles=frozenset({Role.WRITE}), tenant="team-a", tenant_from_header=True),
    }
    assert config.public_roles == {Role.READ}
    assert config.authenticates
    assert config.files() == (
        "/etc/web/server.pem",
        "/abs/server.key",
        "/etc/web/ca.pem",
        "/etc/web/a.token",
    )


def test_the_toolkit_defaults() -> None:
    config = parse("tls_server_config: {cert_file: c.pem, key_file: c.key}\n")
    tls = config.tls_server_config
    assert tls is not None
    assert tls.client_auth_type is ClientAuth.NO_CLIENT_CERT and tls.client_ca_file is None
    assert (tls.min_version, tls.max_version) == (TLSVersion.TLS12, TLSVersion.TLS13)
    assert tls.prefer_server_cipher_suites is True
    assert tls.cipher_suites == tls.curve_preferences == tls.client_allowed_sans == ()
    assert config.http_server_config.http2 is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("RequireClientCert", ClientAuth.REQUIRE_ANY_CLIENT_CERT),
        *((c.value, c) for c in ClientAuth),
    ],
    ids=["old_name", *(c.value for c in ClientAuth)],
)
def test_client_auth_types(text: str, expected: ClientAuth) -> None:
    ca = "" if expected is ClientAuth.NO_CLIENT_CERT else ", client_ca_file: ca.pem"
    config = parse(
        f"tls_server_config: {{cert_file: c, key_file: k, client_auth_type: {text}{ca}}}\n"
    )
    assert config.tls_server_config is not None
    assert config.tls_server_config.client_auth_type is expected


TLS = "tls_server_config: {cert_file: c, key_file: k, "
USER = f'basic_auth_users: {{alice: "{HASH}"}}\n'
TOKENS = "bearer_tokens: [{name: prom-a, token_file: a.token}]\n"

# id, file text, substrings the error must contain (the first one is the key path)
BAD = [
    ("unknown_top_key", "tls_config: {}\n", ["tls_config: unknown key"]),
    ("rate_limit", "rate_limit: {interval: 1s, burst: 1}\n", ["rate_limit: not supported"]),
    ("invalid_yaml", "basic_auth_users: [\n", ["invalid YAML at line 2"]),
    ("duplicate_key", "public_roles: []\npublic_roles: []\n", ["public_roles: duplicate key"]),
    ("not_a_mapping", "- a\n", ["expected a mapping"]),
    ("tls_unknown_key", TLS + "ca_file: x}\n", ["tls_server_config.ca_file: unknown key"]),
    ("tls_inline_cert", TLS + "cert: x}\n", ["tls_server_config.cert: not supported"]),
    ("tls_no_cert", "tls_server_config: {key_file: k}\n", ["tls_server_config.cert_file: missing"]),
    ("tls_no_key", "tls_server_config: {cert_file: c}\n", ["tls_server_config.key_file: missing"]),
    (
        "tls_empty_cert",
        'tls_server_config: {cert_file: "", key_file: k}\n',
        ["tls_server_config.cert_file: expected"],
    ),
    (
        "client_auth_unknown",
        TLS + "client_auth_type: Always}\n",
        ["tls_server_config.client_auth_type: unknown client_auth_type 'Always'"],
    ),
    (
        "ca_without_client_auth",
        TLS + "client_ca_file: ca.pem}\n",
        ["tls_server_config.client_ca_file: set without a client_auth_type"],
    ),
    (
        "sans_without_requiring",
        TLS + "client_auth_type: VerifyClientCertIfGiven, client_allowed_sans: [a]}\n",
        ["tls_server_config.client_allowed_sans: needs client_auth_type RequireAnyClientCert"],
    ),
    (
        "sans_not_a_list",
        TLS + "client_auth_type: RequireAndVerifyClientCert, client_allowed_sans: a}\n",
        ["tls_server_config.client_allowed_sans: expected a list"],
    ),
    (
        "tls_version_unknown",
        TLS + "min_version: TLS14}\n",
        ["tls_server_config.min_version: unknown min_version"],
    ),
    (
        "tls_versions_crossed",
        TLS + "min_version: TLS13, max_version: TLS12}\n",
        ["tls_server_config.min_version: TLS13 is above max_version TLS12"],
    ),
    (
        "cipher_unknown",
        TLS + "cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]}\n",
        ["tls_server_config.cipher_suites[0]: unknown cipher 'TLS_RSA_WITH_RC4_128_SHA'"],
    ),
    (
        "curve_unknown",
        TLS + "curve_preferences: [CurveP999]}\n",
        ["tls_server_config.curve_preferences[0]: unknown curve"],
    ),
    (
        "prefer_not_bool",
        TLS + "prefer_server_cipher_suites: yes please}\n",
        ["tls_server_config.prefer_server_cipher_suites: expected true"],
    ),
    (
        "http_unknown_key",
        "http_server_config: {h2: true}\n",
        ["http_server_config.h2: unknown key"],
    ),
    ("http2_not_bool", "http_server_config: {http2: 1}\n", ["http_server_config.http2: expected"]),
    (
        "header_not_allowed",
        "http_server_config: {headers: {X-Custom: a}}\n",
        ["http_server_config.headers.X-Custom: HTTP header 'X-Custom' can not be configured"],
    ),
    (
        "header_value_not_allowed",
        "http_server_config: {headers: {X-Frame-Options: allow}}\n",
        ["http_server_config.headers.X-Frame-Options: expected one of deny, sameorigin"],
    ),
    (
        "header_value_newline",
        'http_server_config: {headers: {Content-Security-Policy: "a\\nb"}}\n',
        ["http_server_config.headers.Content-Security-Policy: expected a string without"],
    ),
    ("users_not_mapping", "basic_auth_users: [a]\n", ["basic_auth_users: expected a mapping"]),
    (
        "user_hash_not_string",
        "basic_auth_users: {alice: 20261201}\n",
        ["basic_auth_users.alice: expected a bcrypt hash string, got an integer"],
    ),
    (
        "user_hash_plain_password",
        "basic_auth_users: {alice: hunter2}\n",
        ["basic_auth_users.alice: not a bcrypt hash"],
    ),
    (
        "user_hash_cost",
        f'basic_auth_users: {{alice: "{HASH[:4]}99{HASH[6:]}"}}\n',
        ["basic_auth_users.alice: bcrypt cost 99 is outside 4 to 31"],
    ),
    (
        "user_hash_no_minor",
        f'basic_auth_users: {{alice: "$2{HASH[3:]}"}}\n',
        ["basic_auth_users.alice: not a bcrypt hash"],
    ),
    ("tokens_not_list", "bearer_tokens: {a: b}\n", ["bearer_tokens: expected a list"]),
    (
        "token_unknown_key",
        "bearer_tokens: [{name: a, token: x}]\n",
        ["bearer_tokens[0].token: unknown key"],
    ),
    (
        "token_no_name",
        "bearer_tokens: [{token_file: a.token}]\n",
        ["bearer_tokens[0].name: expected a non-empty token name"],
    ),
    (
        "token_no_file",
        "bearer_tokens: [{name: a}]\n",
        ["bearer_tokens[0].token_file: expected a non-empty file name"],
    ),
    (
        "token_file_missing",
        "bearer_tokens: [{name: a, token_file: gone.token}]\n",
        ["bearer_tokens[0].token_file: cannot read '/etc/web/gone.token'"],
    ),
    (
        "token_file_empty",
        "bearer_tokens: [{name: a, token_file: empty.token}]\n",
        ["bearer_tokens[0].token_file: '/etc/web/empty.token' holds no token"],
    ),
    (
        "token_with_space",
        "bearer_tokens: [{name: a, token_file: spaced.token}]\n",
        ["bearer_tokens[0].token_file: the token in '/etc/web/spaced.token' has a space"],
    ),
    (
        "token_not_utf8",
        "bearer_tokens: [{name: a, token_file: binary.token}]\n",
        ["bearer_tokens[0].token_file: '/etc/web/binary.token' is not UTF-8"],
    ),
    (
        "token_name_twice",
        "bearer_tokens: [{name: a, token_file: a.token}, {name: a, token_file: b.token}]\n",
        ["bearer_tokens[1].name: token name 'a' is given twice"],
    ),
    (
        "token_value_twice",
        "bearer_tokens: [{name: a, token_file: a.token}, {name: b, token_file: same.token}]\n",
        ["bearer_tokens[1].token_file: holds the same token as an earlier entry"],
    ),
    (
        "token_named_like_user",
        USER + "bearer_tokens: [{name: alice, token_file: a.token}]\n",
        ["bearer_tokens: name 'alice' is also a basic_auth_users user"],
    ),
    ("access_not_mapping", USER + "access: [alice]\n", ["access: expected a mapping"]),
    (
        "access_unknown_name",
        USER + "access: {alice: {roles: [read]}, bob: {roles: [read]}}\n",
        ["access.bob: no basic_auth_users user or bearer_tokens name is called so"],
    ),
    (
        "access_missing_credential",
        USER + TOKENS + "access: {alice: {roles: [read]}}\n",
        ["access: credential 'prom-a' has no entry"],
    ),
    (
        "access_unknown_key",
        USER + "access: {alice: {roles: [read], tenants: [a]}}\n",
        ["access.alice.tenants: unknown key"],
    ),
    (
        "access_no_roles",
        USER + "access: {alice: {roles: []}}\n",
        ["access.alice.roles: needs at least one role"],
    ),
    (
        "access_unknown_role",
        USER + "access: {alice: {roles: [root]}}\n",
        ["access.alice.roles[0]: unknown role 'root'"],
    ),
    (
        "access_role_twice",
        USER + "access: {alice: {roles: [read, read]}}\n",
        ["access.alice.roles[1]: role 'read' is given twice"],
    ),
    (
        "access_empty_tenant",
        USER + 'access: {alice: {roles: [read], tenant: ""}}\n',
        ["access.alice.tenant: expected a non-empty tenant string"],
    ),
    (
        "access_tenant_with_slash",
        USER + "access: {alice: {roles: [write], tenant: team/a}}\n",
        ["access.alice.tenant: the tenant ID may hold only letters, digits and !-_.*'()"],
    ),
    (
        "access_tenant_dot_dot",
        USER + 'access: {alice: {roles: [write], tenant: ".."}}\n',
        ["access.alice.tenant: the tenant ID '..' is not allowed"],
    ),
    (
        "access_tenant_too_long",
        USER + f"access: {{alice: {{roles: [write], tenant: {'t' * 151}}}}}\n",
        ["access.alice.tenant: the tenant ID is 151 characters long, over the limit of 150"],
    ),
    (
        "access_tenant_from_header_not_bool",
        USER + "access: {alice: {roles: [read], tenant_from_header: sometimes}}\n",
        ["access.alice.tenant_from_header: expected true or false"],
    ),
    (
        "public_roles_unknown",
        USER + "public_roles: [everything]\n",
        ["public_roles[0]: unknown role 'everything'"],
    ),
    (
        "public_roles_without_credentials",
        "public_roles: [read]\n",
        ["public_roles: no basic_auth_users or bearer_tokens"],
    ),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_files(text: str, expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse(text)
    message = str(info.value)
    for part in expected:
        assert part in message
    assert message.startswith(expected[0].split(":")[0])
    for secret in (*SECRETS, "20261201", "hunter2", "two words"):
        assert secret not in message


def test_the_description_names_credentials_and_roles_never_secrets() -> None:
    config = parse(
        USER
        + TOKENS
        + "access: {alice: {roles: [read]}, prom-a: {roles: [write], tenant: team-a}}\n"
        + "public_roles: [read]\n"
    )
    text = describe_web_config(config)
    assert "tls: off" in text
    assert "credential alice (basic auth): roles read" in text
    assert "credential prom-a (bearer token): roles write, tenant team-a" in text
    assert "public roles: read" in text
    for secret in SECRETS:
        assert secret not in text and secret not in repr(config)
