"""A destination's HTTP client sections as frozen objects (pure): ``sigv4``, ``basic_auth``,
``authorization``, ``tls_config`` (Prometheus ``remote_write`` syntax, ``config/config.go``;
parsed by :mod:`rwrouter.config.client`). Re-exported by :mod:`rwrouter.config.model`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rwrouter.config.values import Secret

__all__ = ["Authorization", "BasicAuth", "SigV4Config", "TLSConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SigV4Config:
    """AWS SigV4 signing (``sigv4``). ``sigv4: {}`` means the default credential chain.

    ``region``: when absent it is taken from ``AWS_REGION``, ``AWS_DEFAULT_REGION``, or the
    region of the AWS profile (``profile``, ``AWS_PROFILE``) in the shared config files.
    ``access_key``/``secret_key``: both or neither. ``role_arn`` wraps the base credentials in an
    STS AssumeRole. ``service`` is rwrouter's addition (``aps`` = Amazon Managed Prometheus).
    """

    region: str | None = None
    access_key: str | None = None
    secret_key: Secret | None = None
    profile: str | None = None
    role_arn: str | None = None
    service: str = "aps"

    def signing_region(self, env: Mapping[str, str]) -> str | None:
        """``region``, else ``AWS_REGION``, else ``AWS_DEFAULT_REGION`` from ``env``."""
        found = self.region_source(env)
        return None if found is None else found[0]

    def region_source(self, env: Mapping[str, str]) -> tuple[str, str] | None:
        """:meth:`signing_region` and where it came from: ``sigv4.region``, ``AWS_REGION``
        or ``AWS_DEFAULT_REGION``; None when none is set (the AWS profile's region is
        looked up by :func:`rwrouter.auth.schemes.sigv4_region_source`, which reads files)."""
        if self.region:
            return self.region, "sigv4.region"
        for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
            if env.get(name):
                return env[name], name
        return None

    @property
    def credential_source(self) -> str:
        """``static keys``, ``profile <name>`` or ``default chain``, plus ``+ role_arn <arn>``."""
        if self.access_key is not None:
            base = "static keys"
        elif self.profile is not None:
            base = f"profile {self.profile}"
        else:
            base = "default chain"
        return f"{base} + role_arn {self.role_arn}" if self.role_arn else base


@dataclass(frozen=True, slots=True, kw_only=True)
class BasicAuth:
    """HTTP basic auth (``basic_auth``): ``password`` or ``password_file`` (at most one)."""

    username: str
    password: Secret | None = None
    password_file: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Authorization:
    """``Authorization: <type> <credentials>`` (``authorization``): credentials or a file."""

    type: str = "Bearer"
    credentials: Secret | None = None
    credentials_file: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TLSConfig:
    """Client TLS (``tls_config``); ``min_version`` is one of TLS10, TLS11, TLS12, TLS13."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False
    min_version: str | None = None
