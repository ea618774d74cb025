"""The HTTP client sections of a destination (pure): url, headers, auth, tls_config, proxy_url.

``${VAR}`` is expanded here, and only here: in the URLs, header values, credential fields and
``*_file`` paths. Errors name the key path and show values only through
:func:`~rwrouter.config.values.show` (secrets as ``<secret>``, URLs redacted). A credential or
header value with a line break (CR or LF) is refused: it cannot go into an HTTP header.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from rwrouter.config.collect import Collector
from rwrouter.config.model import Authorization, BasicAuth, SigV4Config, TLSConfig
from rwrouter.config.promkeys import GO_TLS_VERSIONS, REFUSED, flag_keys, read_flags
from rwrouter.config.values import (
    SECRET,
    Fields,
    Secret,
    expand_env,
    field_names,
    kind_of,
    show,
)
from rwrouter.errors import ConfigError, ConfigErrors
from rwrouter.protocol import NEVER_SIGNED

__all__ = [
    "NOT_SUPPORTED",
    "Context",
    "auth",
    "env_string",
    "headers",
    "http_url",
    "tenant_header",
    "tls",
]

NOT_SUPPORTED = "not supported by rwrouter"
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Prometheus `reservedHeaders` (config/config.go); Authorization and X-Amz-* are refused apart.
_RESERVED_HEADERS = frozenset(
    (
        "host",
        "content-encoding",
        "content-length",
        "content-type",
        "user-agent",
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "www-authenticate",
        "accept-encoding",
        "x-prometheus-remote-write-version",
        "x-prometheus-remote-read-version",
    )
)
_TLS_VERSIONS = ("TLS10", "TLS11", "TLS12", "TLS13")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """What the parser needs besides the YAML: the environment, the config file's directory;
    ``files``, when given, gets each ``*_file`` met: ``(key path, file path)``, for the
    caller to check (:func:`rwrouter.config.load.load_config`), even in a section that has
    other mistakes."""

    env: Mapping[str, str]
    base_dir: str | None
    files: list[tuple[str, str]] | None = None


def env_string(f: Fields, key: str, ctx: Context) -> str | None:
    value = f.string(key)
    return None if value is None else expand_env(value, ctx.env, f.at(key))


PLACEHOLDER = SECRET  # how Prometheus's /api/v1/status/config shows a secret it hides
LINE_BREAK = "must not contain a line break (CR or LF): it goes into an HTTP header"


def header_text(value: str, path: str) -> str:
    """``value`` unless it holds CR or LF (it would split an HTTP header: aiohttp refuses to
    send it, and Prometheus's Go client too); raises ConfigError naming ``path`` without
    showing the value."""
    if "\r" in value or "\n" in value:
        raise ConfigError(path, LINE_BREAK)
    return value


def secret_string(f: Fields, key: str, ctx: Context, *, file_key: str | None = None) -> str | None:
    """A secret's text (``${VAR}`` expanded, no line break: :func:`header_text`); refuses
    Prometheus's placeholder ``<secret>``, which a config copied from
    ``/api/v1/status/config`` holds instead of the secret."""
    value = env_string(f, key, ctx)
    if value is not None:
        header_text(value, f.at(key))
    if value == PLACEHOLDER:
        where = f", ${{VAR}} or {file_key}" if file_key else " or ${VAR}"
        raise ConfigError(
            f.at(key),
            "is <secret>, the placeholder Prometheus shows for a hidden "
            f"secret (/api/v1/status/config): put the real value{where}",
        )
    return value


def _file(f: Fields, key: str, ctx: Context) -> str | None:
    value = env_string(f, key, ctx)
    if value is not None and not value:
        raise ConfigError(f.at(key), "must not be empty")
    if value is None:
        return None
    joined = value if ctx.base_dir is None else os.path.join(ctx.base_dir, value)
    if ctx.files is not None:
        ctx.files.append((f.at(key), joined))
    return joined


def http_url(value: str | None, path: str, *, userinfo: bool) -> str:
    if not value:
        raise ConfigError(path, "is required (an http:// or https:// URL)")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(path, f"invalid URL {show(value, path)}: {exc}") from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or any(c.isspace() for c in value)
    ):
        raise ConfigError(
            path, f"expected an http:// or https:// URL with a host, got {show(value, path)}"
        )
    if not userinfo and (parts.username is not None or parts.password is not None):
        raise ConfigError(path, "credentials in the URL are not supported; use basic_auth")
    return value


def headers(f: Fields, ctx: Context, *, sigv4: bool) -> tuple[tuple[str, str], ...]:
    raw = f.raw("headers")  # None: absent or null (Fields); 0, false, "" are no mapping
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f.at("headers"),
            f"expected a mapping of header name to value, got {kind_of(raw, f.at('headers'))}",
        )
    seen: set[str] = set()
    headers, problems = [], []
    for name, value in raw.items():  # every bad header reported (ConfigErrors)
        path = f"{f.at('headers')}.{name}"
        try:
            headers.append((name, _header(name, value, path, ctx, sigv4=sigv4, seen=seen)))
        except ConfigError as exc:
            problems.append(exc)
    if problems:
        raise ConfigErrors.of(problems)
    return tuple(headers)


def _header(
    name: object, value: object, path: str, ctx: Context, *, sigv4: bool, seen: set[str]
) -> str:
    """The value of the header ``name`` (its ``${VAR}`` expanded); ``seen`` gets its name."""
    lower = str(name).lower()
    if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name) or lower in seen:
        raise ConfigError(path, "invalid or repeated header name")
    seen.add(lower)
    if lower == "authorization":
        raise ConfigError(
            path, "reserved header: set it with basic_auth, authorization or sigv4 instead"
        )
    if lower in _RESERVED_HEADERS or lower.startswith("x-amz-"):
        raise ConfigError(path, "reserved header: rwrouter sets it itself, it must not be set")
    if sigv4 and lower == "x-scope-orgid":
        raise ConfigError(path, "must not be sent to a sigv4 (managed workspace) destination")
    if sigv4 and lower in NEVER_SIGNED:
        raise ConfigError(path, "cannot be sent to a sigv4 destination: it would not be signed")
    if not isinstance(value, str):
        raise ConfigError(path, f"expected a string, got {kind_of(value, path)} (quote it)")
    return header_text(expand_env(value, ctx.env, path), path)


def tenant_header(f: Fields, *, sigv4: bool) -> str | None:
    """The ``tenant_header`` key (rwrouter's own): the name of the header that carries each
    request's tenant (``X-Scope-OrgID`` for Mimir and Cortex), or None. An HTTP token that is
    neither reserved (as in ``headers``) nor ``Authorization``; refused on a sigv4
    destination: the managed workspace has no tenants (a workspace is one) and never gets
    ``X-Scope-OrgID``."""
    name = f.string("tenant_header")
    if name is None:
        return None
    path = f.at("tenant_header")
    lower = name.lower()
    if not _HEADER_NAME.fullmatch(name):
        raise ConfigError(path, "expected a header name (an HTTP token, e.g. X-Scope-OrgID)")
    if lower == "authorization" or lower in _RESERVED_HEADERS or lower.startswith("x-amz-"):
        raise ConfigError(path, "reserved header: rwrouter sets it itself, it must not be set")
    if sigv4:
        raise ConfigError(
            path, "must not be set on a sigv4 (managed workspace) destination: it has no tenants"
        )
    return name


def _block(
    parent: Fields,
    key: str,
    errors: Collector | None,
    *,
    known: tuple[str, ...],
    unsupported: Mapping[str, str],
) -> Fields:
    """The section ``key`` of ``parent``; with ``errors``, its unknown and unsupported keys
    are kept there and its known keys still read (:meth:`Collector.fields`)."""
    if errors is None:
        return Fields(parent.raw(key), parent.at(key), known=known, unsupported=unsupported)
    return errors.fields(parent.raw(key), parent.at(key), known=known, unsupported=unsupported)


def auth(f: Fields, ctx: Context, *, errors: Collector | None = None) -> dict[str, Any]:
    """The (at most one) auth section: ``{"sigv4": SigV4Config}`` etc., or ``{}``. With
    ``errors``, the section's unknown keys are kept there (its values are still checked)."""
    parsers = {"sigv4": _sigv4, "basic_auth": _basic_auth, "authorization": _authorization}
    present = [key for key in parsers if key in f.nulls or f.has(key)]
    if len(present) > 1:
        raise ConfigError(
            f.at(present[1]),
            f"cannot be combined with {present[0]} "
            "(at most one of sigv4, basic_auth, authorization)",
        )
    if not present:
        return {}
    key = present[0]
    if key in f.nulls:
        hint = " (write `sigv4: {}` for the AWS default credential chain)" if key == "sigv4" else ""
        raise ConfigError(f.at(key), f"is empty{hint}")
    return {key: parsers[key](f, ctx, errors)}


def _sigv4(parent: Fields, ctx: Context, errors: Collector | None) -> SigV4Config:
    f = _block(
        parent,
        "sigv4",
        errors,
        known=(*field_names(SigV4Config), "service_name", *flag_keys("sigv4")),
        unsupported=REFUSED["sigv4"],
    )
    read_flags(f, "sigv4")
    values = {
        key: env_string(f, key, ctx) for key in ("region", "access_key", "profile", "role_arn")
    }
    values["secret_key"] = secret_string(f, "secret_key", ctx)
    if (values["access_key"] is None) != (values["secret_key"] is None):
        missing = "secret_key" if values["secret_key"] is None else "access_key"
        raise ConfigError(f.at(missing), "access_key and secret_key must be set together")
    if values["access_key"] is not None and values["profile"] is not None:
        raise ConfigError(f.at("profile"), "profile and access_key are mutually exclusive")
    secret = values.pop("secret_key")
    service = _service(f)
    return SigV4Config(
        secret_key=None if secret is None else Secret(secret), service=service, **values
    )


def _service(f: Fields) -> str:
    """``service``, or Prometheus's ``service_name`` (prometheus/sigv4 0.5; the same
    setting: at most one of them), else ``aps``."""
    key = "service_name" if f.has("service_name") else "service"
    if f.has("service") and f.has("service_name"):
        raise ConfigError(f.at("service_name"), "at most one of service and service_name")
    service = f.string(key, SigV4Config().service)
    if not service:
        raise ConfigError(f.at(key), "must not be empty")
    return service


def _basic_auth(parent: Fields, ctx: Context, errors: Collector | None) -> BasicAuth:
    f = _block(
        parent,
        "basic_auth",
        errors,
        known=field_names(BasicAuth),
        unsupported=REFUSED["basic_auth"],
    )
    username = env_string(f, "username", ctx)
    if not username:
        raise ConfigError(f.at("username"), "is required")
    header_text(username, f.at("username"))
    password = secret_string(f, "password", ctx, file_key="password_file")
    if password is not None and f.has("password_file"):
        raise ConfigError(f.at("password_file"), "at most one of password and password_file")
    return BasicAuth(
        username=username,
        password=None if password is None else Secret(password),
        password_file=_file(f, "password_file", ctx),
    )


def _authorization(parent: Fields, ctx: Context, errors: Collector | None) -> Authorization:
    f = _block(
        parent,
        "authorization",
        errors,
        known=field_names(Authorization),
        unsupported=REFUSED["authorization"],
    )
    kind = f.string("type", Authorization().type) or ""
    if kind.lower() == "basic":
        raise ConfigError(f.at("type"), f"invalid type {kind!r}: for Basic, use basic_auth")
    if not _HEADER_NAME.fullmatch(kind):  # not shown: "Bearer <token>" is a common mistake
        raise ConfigError(
            f.at("type"), "expected one word (an HTTP auth scheme such as Bearer), not shown"
        )
    credentials = secret_string(f, "credentials", ctx, file_key="credentials_file")
    if (credentials is None) == (not f.has("credentials_file")):
        raise ConfigError(f.path, "exactly one of credentials and credentials_file is required")
    return Authorization(
        type=kind,
        credentials=None if credentials is None else Secret(credentials),
        credentials_file=_file(f, "credentials_file", ctx),
    )


def tls(parent: Fields, ctx: Context, *, errors: Collector | None = None) -> TLSConfig:
    """The ``tls_config`` section; with ``errors``, as :func:`auth`."""
    f = _block(
        parent,
        "tls_config",
        errors,
        known=field_names(TLSConfig),
        unsupported=REFUSED["tls_config"],
    )
    if f.has("cert_file") != f.has("key_file"):
        missing, other = (
            ("key_file", "cert_file") if f.has("cert_file") else ("cert_file", "key_file")
        )
        raise ConfigError(f.at(missing), f"is required with {other}")
    number = f.raw("min_version")  # Prometheus 2.x dumps Go's number (771 = TLS12): a note
    go_name = GO_TLS_VERSIONS.get(number) if type(number) is int else None
    version = go_name or f.string("min_version")
    if version is not None and version not in _TLS_VERSIONS:
        raise ConfigError(
            f.at("min_version"),
            f"expected one of {', '.join(_TLS_VERSIONS)}, got {show(version, f.at('min_version'))}",
        )
    return TLSConfig(
        ca_file=_file(f, "ca_file", ctx),
        cert_file=_file(f, "cert_file", ctx),
        key_file=_file(f, "key_file", ctx),
        server_name=f.string("server_name"),
        insecure_skip_verify=f.boolean("insecure_skip_verify", False),
        min_version=version,
    )
