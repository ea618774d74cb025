"""The web configuration file of ``rwrouter run --web.config.file FILE`` (pure): YAML -> a frozen
:class:`WebConfig`. Reads no file itself: the token files are read through the ``read_file``
it is given.

The format is the Prometheus exporter toolkit's (``docs/web-configuration.md`` and
``web/tls_config.go`` of prometheus/exporter-toolkit, which Prometheus's own
``--web.config.file`` reads): ``tls_server_config``, ``http_server_config`` and
``basic_auth_users`` (user -> bcrypt hash), with the toolkit's rules: unknown keys are errors,
``min_version`` defaults to TLS12 and ``max_version`` to TLS13, ``client_auth_type`` is one of
five names (``RequireClientCert`` is kept as the old name of ``RequireAnyClientCert``), client
CAs need a client auth type that asks for a certificate, ``client_allowed_sans`` needs one that
requires it, and ``http_server_config.headers`` may set only the five security headers the
toolkit lists (two of them with fixed values). rwrouter adds, under its own keys:

- ``bearer_tokens``: a list of ``{name, token_file}``; the file holds the token (surrounding
  whitespace removed, as Prometheus reads ``credentials_file``);
- ``access``: per credential name (a basic auth user or a token name) its ``roles`` (write,
  read, admin), a ``tenant`` (a tenant ID as Cortex and Mimir take it:
  :mod:`rwrouter.config.tenant`) and ``tenant_from_header`` (the request's tenant is then its
  ``X-Scope-OrgID``: :func:`rwrouter.config.tenant.request_tenant`). Without ``access``
  every valid credential has every role (the toolkit's behaviour); with it, every credential
  needs an entry;
- ``public_roles``: the roles that need no credential.

Errors are :class:`~rwrouter.errors.ConfigError` with the key path; no error quotes a hash, a
token or a file's content.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import TypeVar

import yaml

from rwrouter.config.document import load_yaml
from rwrouter.config.tenant import TENANT_HEADER, check_tenant
from rwrouter.config.values import Fields, Secret, field_names
from rwrouter.config.webmodel import (
    CIPHER_SUITES,
    CURVES,
    SECURITY_HEADERS,
    Access,
    BearerToken,
    ClientAuth,
    HTTPServerConfig,
    Role,
    TLSServerConfig,
    TLSVersion,
    WebConfig,
    describe_web_config,
)
from rwrouter.errors import ConfigError, TenantError

__all__ = [
    "CIPHER_SUITES",
    "CURVES",
    "SECURITY_HEADERS",
    "Access",
    "BearerToken",
    "ClientAuth",
    "HTTPServerConfig",
    "Role",
    "TLSServerConfig",
    "TLSVersion",
    "WebConfig",
    "describe_web_config",
    "parse_web_config",
]


_BCRYPT = re.compile(r"\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
E = TypeVar("E", bound=StrEnum)
ReadFile = Callable[[str], bytes]  # a path -> its content; raises OSError or ValueError


def parse_web_config(text: str, *, source: str, base_dir: str, read_file: ReadFile) -> WebConfig:
    """Parse and validate a web configuration file's ``text`` (``source``: its name in
    errors; ``base_dir``: the directory relative paths are taken from; ``read_file``: reads a
    token file). Raises ConfigError naming the key path."""
    top = Fields(
        _document(text, source),
        "",
        known=field_names(WebConfig),
        unsupported={"rate_limit": "not supported by rwrouter (bound the senders instead)"},
    )
    users = _users(top.raw("basic_auth_users"))
    tokens = _tokens(top.raw("bearer_tokens"), base_dir, read_file)
    clash = sorted(set(users) & {t.name for t in tokens})
    if clash:
        raise ConfigError("bearer_tokens", f"name {clash[0]!r} is also a basic_auth_users user")
    config = WebConfig(
        tls_server_config=_tls(top.raw("tls_server_config"), base_dir),
        http_server_config=_http(top.raw("http_server_config")),
        basic_auth_users=MappingProxyType(users),
        bearer_tokens=tokens,
        access=_access(top.raw("access"), names=(*users, *(t.name for t in tokens))),
        public_roles=frozenset(_roles(top.raw("public_roles"), "public_roles", empty_ok=True)),
    )
    if config.public_roles and not config.authenticates:
        raise ConfigError("public_roles", "no basic_auth_users or bearer_tokens: every role is")
    return config


def _document(text: str, source: str) -> object:
    """The YAML document; a syntax error is told by line and column only (the toolkit's
    file holds hashes: its lines are not quoted)."""
    try:
        yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError("", f"invalid YAML{where}: {exc.problem}") from None
    except yaml.YAMLError:
        raise ConfigError("", f"invalid YAML in {source}") from None
    return load_yaml(text, source)


def _kind(value: object) -> str:
    """A value's YAML kind, never the value (it may be a secret)."""
    names = {bool: "a boolean", int: "an integer", float: "a number", list: "a list"}
    return names.get(type(value), "a mapping" if isinstance(value, dict) else "another value")


def _name(value: object, path: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(path, f"expected a non-empty {what} string")
    if _CONTROL.search(value):
        raise ConfigError(path, f"the {what} has a control character")
    return value


def _path(value: object, path: str, base_dir: str) -> str:
    return os.path.join(base_dir, _name(value, path, "file name"))


def _users(raw: object) -> dict[str, Secret]:
    """``basic_auth_users``: each value a bcrypt hash (Go's ``bcrypt.Cost`` rules)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("basic_auth_users", f"expected a mapping, got {_kind(raw)}")
    users = {}
    for user, hashed in raw.items():
        path = f"basic_auth_users.{user}"
        _name(user, "basic_auth_users", "user name")
        if not isinstance(hashed, str):
            raise ConfigError(path, f"expected a bcrypt hash string, got {_kind(hashed)}")
        match = _BCRYPT.fullmatch(hashed)
        if match is None:
            raise ConfigError(path, "not a bcrypt hash ($2a$, $2b$, $2x$ or $2y$, 60 characters)")
        if not 4 <= int(match.group(1)) <= 31:
            raise ConfigError(path, f"bcrypt cost {int(match.group(1))} is outside 4 to 31")
        users[user] = Secret(hashed)
    return users


def _tokens(raw: object, base_dir: str, read_file: ReadFile) -> tuple[BearerToken, ...]:
    """``bearer_tokens``: names and token values each unique; each file read now."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("bearer_tokens", f"expected a list, got {_kind(raw)}")
    tokens: list[BearerToken] = []
    for i, item in enumerate(raw):
        f = Fields(item, f"bearer_tokens[{i}]", known=("name", "token_file"))
        name = _name(f.raw("name"), f.at("name"), "token name")
        if name in {t.name for t in tokens}:
            raise ConfigError(f.at("name"), f"token name {name!r} is given twice")
        token_file = _path(f.raw("token_file"), f.at("token_file"), base_dir)
        token = _read_token(token_file, f.at("token_file"), read_file)
        if any(t.token == token for t in tokens):
            raise ConfigError(f.at("token_file"), "holds the same token as an earlier entry")
        tokens.append(BearerToken(name=name, token_file=token_file, token=token))
    return tuple(tokens)


def _read_token(path: str, key_path: str, read_file: ReadFile) -> Secret:
    try:
        data = read_file(path)
    except OSError as exc:
        raise ConfigError(key_path, f"cannot read {path!r}: {exc.strerror or exc}") from None
    except ValueError as exc:  # not a small regular file (rwrouter.config.files.read_regular)
        raise ConfigError(key_path, f"{path!r} {exc}") from None
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(key_path, f"{path!r} is not UTF-8 text") from None
    if not token:
        raise ConfigError(key_path, f"{path!r} holds no token")
    if _CONTROL.search(token) or " " in token:
        raise ConfigError(key_path, f"the token in {path!r} has a space or a control character")
    return Secret(token)


def _tls(raw: object, base_dir: str) -> TLSServerConfig | None:
    if raw is None:
        return None
    f = Fields(
        raw,
        "tls_server_config",
        known=field_names(TLSServerConfig),
        unsupported=dict.fromkeys(
            ("cert", "key", "client_ca"), "not supported by rwrouter (use the *_file key)"
        ),
    )
    for key in ("cert_file", "key_file"):
        if not f.has(key):
            raise ConfigError(f.at(key), "missing (TLS needs a certificate and its key)")
    auth = _choice(f, "client_auth_type", ClientAuth, ClientAuth.NO_CLIENT_CERT)
    ca = (
        _path(f.raw("client_ca_file"), f.at("client_ca_file"), base_dir)
        if f.has("client_ca_file")
        else None
    )
    sans = _strings(f, "client_allowed_sans")
    _check_client_auth(f, auth, ca=ca, sans=sans)
    low = _choice(f, "min_version", TLSVersion, TLSVersion.TLS12)
    high = _choice(f, "max_version", TLSVersion, TLSVersion.TLS13)
    if list(TLSVersion).index(low) > list(TLSVersion).index(high):
        raise ConfigError(f.at("min_version"), f"{low} is above max_version {high}")
    return TLSServerConfig(
        cert_file=_path(f.raw("cert_file"), f.at("cert_file"), base_dir),
        key_file=_path(f.raw("key_file"), f.at("key_file"), base_dir),
        client_auth_type=auth,
        client_ca_file=ca,
        client_allowed_sans=sans,
        min_version=low,
        max_version=high,
        cipher_suites=_known(f, "cipher_suites", CIPHER_SUITES, "cipher"),
        prefer_server_cipher_suites=f.boolean("prefer_server_cipher_suites", True),
        curve_preferences=_known(f, "curve_preferences", CURVES, "curve"),
    )


def _check_client_auth(
    f: Fields, auth: ClientAuth, *, ca: str | None, sans: tuple[str, ...]
) -> None:
    """The toolkit's ``ConfigToTLSConfig`` rules between the client certificate keys."""
    if ca is not None and auth is ClientAuth.NO_CLIENT_CERT:
        raise ConfigError(f.at("client_ca_file"), "set without a client_auth_type asking for one")
    requiring = (ClientAuth.REQUIRE_ANY_CLIENT_CERT, ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT)
    if sans and auth not in requiring:
        raise ConfigError(
            f.at("client_allowed_sans"),
            "needs client_auth_type RequireAnyClientCert or RequireAndVerifyClientCert",
        )


def _choice(f: Fields, key: str, enum: type[E], default: E) -> E:
    value = f.string(key)
    if value is None:
        return default
    if key == "client_auth_type" and value == "RequireClientCert":  # the toolkit's old name
        value = ClientAuth.REQUIRE_ANY_CLIENT_CERT
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(m.value for m in enum)
        raise ConfigError(f.at(key), f"unknown {key} {value!r} (one of {choices})") from None


def _strings(f: Fields, key: str) -> tuple[str, ...]:
    raw = f.raw(key)
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f.at(key), f"expected a list of strings, got {_kind(raw)}")
    return tuple(_name(v, f"{f.at(key)}[{i}]", "value") for i, v in enumerate(raw))


def _known(f: Fields, key: str, names: Mapping[str, object], what: str) -> tuple[str, ...]:
    values = _strings(f, key)
    for i, value in enumerate(values):
        if value not in names:
            raise ConfigError(f"{f.at(key)}[{i}]", f"unknown {what} {value!r}")
    return values


def _http(raw: object) -> HTTPServerConfig:
    f = Fields(raw, "http_server_config", known=("http2", "headers"))
    headers = f.raw("headers")
    if headers is None:
        headers = {}
    if not isinstance(headers, dict):
        raise ConfigError(f.at("headers"), f"expected a mapping, got {_kind(headers)}")
    for name, value in headers.items():
        path = f"{f.at('headers')}.{name}"
        if name not in SECURITY_HEADERS:
            raise ConfigError(path, f"HTTP header {name!r} can not be configured")
        allowed = SECURITY_HEADERS[name]
        if not isinstance(value, str) or _CONTROL.search(value):
            raise ConfigError(path, "expected a string without control characters")
        if allowed and value not in allowed:
            raise ConfigError(path, f"expected one of {', '.join(allowed)}, got {value!r}")
    return HTTPServerConfig(http2=f.boolean("http2", True), headers=MappingProxyType(headers))


def _roles(raw: object, path: str, *, empty_ok: bool) -> list[Role]:
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ConfigError(path, f"expected a list of roles, got {_kind(raw)}")
    if not raw and not empty_ok:
        raise ConfigError(path, "needs at least one role (write, read, admin)")
    roles: list[Role] = []
    for i, value in enumerate(raw):
        if not isinstance(value, str) or value not in set(Role):
            raise ConfigError(f"{path}[{i}]", f"unknown role {value!r} (write, read, admin)")
        if Role(value) in roles:
            raise ConfigError(f"{path}[{i}]", f"role {value!r} is given twice")
        roles.append(Role(value))
    return roles


def _tenant(value: object, path: str) -> str:
    """A credential's ``tenant``: a tenant ID as Cortex and Mimir take it
    (:func:`rwrouter.config.tenant.check_tenant`)."""
    try:
        return check_tenant(_name(value, path, "tenant"))
    except TenantError as exc:
        raise ConfigError(path, str(exc).removeprefix(f"{TENANT_HEADER}: ")) from None


def _access(raw: object, *, names: tuple[str, ...]) -> Mapping[str, Access] | None:
    """``access``: every key a known credential, every credential a key."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("access", f"expected a mapping, got {_kind(raw)}")
    entries = {}
    for name, item in raw.items():
        path = f"access.{name}"
        if name not in names:
            raise ConfigError(path, "no basic_auth_users user or bearer_tokens name is called so")
        f = Fields(item, path, known=("roles", "tenant", "tenant_from_header"))
        tenant = f.raw("tenant")
        entries[name] = Access(
            roles=frozenset(_roles(f.raw("roles"), f.at("roles"), empty_ok=False)),
            tenant=None if tenant is None else _tenant(tenant, f.at("tenant")),
            tenant_from_header=f.boolean("tenant_from_header", False),
        )
    missing = [n for n in names if n not in entries]
    if missing:
        raise ConfigError("access", f"credential {missing[0]!r} has no entry (give it its roles)")
    return MappingProxyType(entries)
