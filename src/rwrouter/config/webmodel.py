"""The web configuration file's model (pure): one frozen dataclass per section of
Prometheus's exporter toolkit format plus rwrouter's additions (parsed by
:mod:`rwrouter.config.web`), the toolkit's fixed name tables, and the text ``rwrouter
check-config --web.config.file`` prints (:func:`describe_web_config`: no secret)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from rwrouter.config.values import Secret

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
]


class Role(StrEnum):
    """What a credential may do: ``write`` (remote write), ``read`` (``/metrics``, ``/-/status``,
    ``/``, ``/-/audit``), ``admin`` (``/-/reload``)."""

    WRITE = "write"
    READ = "read"
    ADMIN = "admin"


class ClientAuth(StrEnum):
    """``tls_server_config.client_auth_type``: Go's ``tls.ClientAuthType`` names."""

    NO_CLIENT_CERT = "NoClientCert"
    REQUEST_CLIENT_CERT = "RequestClientCert"
    REQUIRE_ANY_CLIENT_CERT = "RequireAnyClientCert"
    VERIFY_CLIENT_CERT_IF_GIVEN = "VerifyClientCertIfGiven"
    REQUIRE_AND_VERIFY_CLIENT_CERT = "RequireAndVerifyClientCert"


class TLSVersion(StrEnum):
    """``min_version``/``max_version`` (the toolkit's names), in order."""

    TLS10 = "TLS10"
    TLS11 = "TLS11"
    TLS12 = "TLS12"
    TLS13 = "TLS13"


#: Go's ``tls.CipherSuites()`` (the secure suites the toolkit accepts) -> the OpenSSL name;
#: None for the TLS 1.3 suites, which neither Go nor Python's ssl lets one configure.
CIPHER_SUITES: Mapping[str, str | None] = MappingProxyType(
    {
        "TLS_AES_128_GCM_SHA256": None,
        "TLS_AES_256_GCM_SHA384": None,
        "TLS_CHACHA20_POLY1305_SHA256": None,
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
        "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    }
)
#: The toolkit's curve names -> OpenSSL's.
CURVES: Mapping[str, str] = MappingProxyType(
    {
        "CurveP256": "prime256v1",
        "CurveP384": "secp384r1",
        "CurveP521": "secp521r1",
        "X25519": "X25519",
    }
)
#: exporter-toolkit ``extraHTTPHeaders``: the only headers it lets one set, some with fixed values.
SECURITY_HEADERS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "Strict-Transport-Security": (),
        "X-Content-Type-Options": ("nosniff",),
        "X-Frame-Options": ("deny", "sameorigin"),
        "X-XSS-Protection": (),
        "Content-Security-Policy": (),
    }
)
# Go's bcrypt.Cost accepts these; $2$ (no minor) too, which Python's bcrypt cannot check.


@dataclass(frozen=True, slots=True, kw_only=True)
class TLSServerConfig:
    """``tls_server_config`` (paths absolute: relative ones are taken from the file's
    directory, as the toolkit's ``SetDirectory``)."""

    cert_file: str
    key_file: str
    client_auth_type: ClientAuth = ClientAuth.NO_CLIENT_CERT
    client_ca_file: str | None = None
    client_allowed_sans: tuple[str, ...] = ()
    min_version: TLSVersion = TLSVersion.TLS12
    max_version: TLSVersion = TLSVersion.TLS13
    cipher_suites: tuple[str, ...] = ()  # Go names (CIPHER_SUITES); empty: the defaults
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()  # CURVES names; empty: the defaults


@dataclass(frozen=True, slots=True, kw_only=True)
class HTTPServerConfig:
    """``http_server_config``: ``headers`` added to every answer; ``http2`` is accepted and
    has no effect (rwrouter serves HTTP/1.1)."""

    http2: bool = True
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True, kw_only=True)
class BearerToken:
    """One of ``bearer_tokens``: its ``name`` (for ``access`` and the logs), the file, the token."""

    name: str
    token_file: str
    token: Secret


@dataclass(frozen=True, slots=True, kw_only=True)
class Access:
    """One credential's entry of ``access``."""

    roles: frozenset[Role]
    tenant: str | None = None
    tenant_from_header: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class WebConfig:
    """The whole file. ``tls_server_config`` None: plain HTTP. ``access`` None: every valid
    credential has every role. With neither users nor tokens no credential is asked for."""

    tls_server_config: TLSServerConfig | None = None
    http_server_config: HTTPServerConfig = field(default_factory=HTTPServerConfig)
    basic_auth_users: Mapping[str, Secret] = field(default_factory=lambda: MappingProxyType({}))
    bearer_tokens: tuple[BearerToken, ...] = ()
    access: Mapping[str, Access] | None = None
    public_roles: frozenset[Role] = frozenset()

    @property
    def authenticates(self) -> bool:
        """Whether requests must carry a credential (some users or tokens are configured)."""
        return bool(self.basic_auth_users or self.bearer_tokens)

    def files(self) -> tuple[str, ...]:
        """Every file this configuration was read from or names (to watch for changes)."""
        tls = self.tls_server_config
        named = (tls.cert_file, tls.key_file, tls.client_ca_file) if tls else ()
        tokens = tuple(t.token_file for t in self.bearer_tokens)
        return tuple(p for p in (*named, *tokens) if p)


def describe_web_config(config: WebConfig) -> str:
    """What ``rwrouter check-config --web.config.file FILE`` prints: TLS, the credentials by
    name and their roles, the public roles; never a hash or a token."""
    tls = config.tls_server_config
    lines = ["web config:"]
    if tls is None:
        lines.append("  tls: off (plain HTTP)")
    else:
        lines.append(
            f"  tls: {tls.min_version} to {tls.max_version}, client certificates "
            f"{tls.client_auth_type}"
            + (f", SANs {', '.join(tls.client_allowed_sans)}" if tls.client_allowed_sans else "")
        )
    names = [*(f"{u} (basic auth)" for u in config.basic_auth_users)]
    names += [f"{t.name} (bearer token)" for t in config.bearer_tokens]
    if not names:
        lines.append("  credentials: none asked for (every request has every role)")
    for name in names:
        entry = None if config.access is None else config.access.get(name.split(" (")[0])
        roles = ",".join(r for r in Role if entry is None or r in entry.roles)
        tenant = f", tenant {entry.tenant}" if entry and entry.tenant else ""
        lines.append(f"  credential {name}: roles {roles}{tenant}")
    if config.public_roles:
        lines.append(f"  public roles: {','.join(r for r in Role if r in config.public_roles)}")
    return "\n".join(lines)
