"""Per-destination request authentication: none, basic auth, Authorization header, SigV4.

Each scheme turns the destination's headers into the headers of one attempt. Secrets from files
(``password_file``, ``credentials_file``) are read at send time, as Prometheus does, so a rotated
file is picked up without a restart. SigV4 signs every attempt anew (fresh ``X-Amz-Date``) from
``get_frozen_credentials()`` (see :mod:`rwrouter.auth.credentials`).
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from rwrouter.auth.credentials import CredentialsSource, open_source, profile_region, sign
from rwrouter.config import SigV4Config
from rwrouter.config.files import SECRET_FILE_MAX_BYTES, read_regular
from rwrouter.config.workspace import signing_region_error
from rwrouter.errors import ConfigError, CredentialsError

#: Answers after which SigV4 credentials are refreshed and the request retried once.
REFRESH_STATUSES = frozenset((401, 403))


class Authenticator(Protocol):
    """How one destination authenticates its requests."""

    kind: str

    async def headers(self, *, url: str, body: bytes, base: Mapping[str, str]) -> dict[str, str]:
        """The headers of one attempt: ``base`` (protocol + configured headers) plus auth."""
        ...

    async def refresh_after(self, *, status: int, body_text: str) -> bool:
        """After a rejection: refresh credentials if that can help; True means retry once."""
        ...

    def expiry(self) -> float | None:
        """When the credentials expire (unix seconds), if they do."""
        ...


class NoAuth:
    """No authentication."""

    kind = "none"

    async def headers(self, *, url: str, body: bytes, base: Mapping[str, str]) -> dict[str, str]:
        return dict(base)

    async def refresh_after(self, *, status: int, body_text: str) -> bool:
        return False

    def expiry(self) -> float | None:
        return None


class HeaderAuth(NoAuth):
    """An ``Authorization`` header: ``Basic`` from user + password, or ``<type> <credentials>``.

    ``secret``/``secret_file``: the password (basic) or credentials; the file is read per
    request (at most :data:`~rwrouter.config.files.SECRET_FILE_MAX_BYTES`, a regular file
    only: :func:`~rwrouter.config.files.read_regular`) so rotation needs no restart.
    """

    def __init__(
        self,
        *,
        scheme: str,
        secret: str | None,
        secret_file: str | None,
        username: str | None = None,
    ) -> None:
        self.kind = "basic_auth" if username is not None else "authorization"
        self._scheme = scheme
        self._secret = secret
        self._secret_file = Path(secret_file) if secret_file else None
        self._username = username

    async def headers(self, *, url: str, body: bytes, base: Mapping[str, str]) -> dict[str, str]:
        secret = self._secret or ""
        if self._secret_file is not None:
            try:
                content = await asyncio.to_thread(
                    read_regular, self._secret_file, SECRET_FILE_MAX_BYTES
                )
                secret = content.decode("utf-8").strip()
            except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
                raise CredentialsError(f"reading {self._secret_file} failed: {exc}") from exc
        if self._username is not None:
            token = base64.b64encode(f"{self._username}:{secret}".encode()).decode()
            value = f"Basic {token}"
        else:
            value = f"{self._scheme} {secret}"
        return {**base, "Authorization": value}


class SigV4(NoAuth):
    """AWS SigV4 (Amazon Managed Service for Prometheus: service ``aps``)."""

    kind = "sigv4"

    def __init__(self, source: CredentialsSource) -> None:
        self.source = source

    async def headers(self, *, url: str, body: bytes, base: Mapping[str, str]) -> dict[str, str]:
        credentials = await self.source.frozen()
        return sign(
            method="POST",
            url=url,
            headers=base,
            body=body,
            credentials=credentials,
            region=self.source.region,
            service=self.source.service,
        )

    async def refresh_after(self, *, status: int, body_text: str) -> bool:
        """After a 401 or 403 (whatever its body: expired or invalid token, keys rotated,
        signature mismatch), force a credential refresh and return True: the caller retries
        once; a second 401/403 for the same request is final. False for any other status.
        Raises :class:`CredentialsError` when the refresh fails. Source: managed-workspace.md
        "Answers you will see" (403 security token expired/invalid: refresh and retry once)."""
        if status not in REFRESH_STATUSES:
            return False
        await self.source.force_refresh()
        return True

    def expiry(self) -> float | None:
        return self.source.expiry()


async def authenticator_for(destination: object, *, path: str) -> Authenticator:
    """Build the authenticator of a destination config (``sigv4``, ``basic_auth``,
    ``authorization`` or none). Raises ConfigError (naming ``path``) when SigV4 has no region
    and none is set in the environment, or when it is not the region of the destination's
    workspace URL (:func:`rwrouter.config.workspace.signing_region_error`: every request
    would be refused); CredentialsError when no AWS credentials are found."""
    v4 = getattr(destination, "sigv4", None)
    if v4 is not None:
        found = await asyncio.to_thread(sigv4_region_source, v4)
        if not found:
            raise ConfigError(f"{path}.sigv4.region", REGION_NOT_SET)
        region, origin = found
        mismatch = signing_region_error(
            getattr(destination, "url", ""), region, origin, f"{path}.sigv4.region"
        )
        if mismatch is not None:
            raise mismatch
        source = await open_source(
            None,
            region=region,
            service=v4.service,
            access_key=v4.access_key,
            secret_key=_text(v4.secret_key),
            profile=v4.profile,
            role_arn=v4.role_arn,
        )
        return SigV4(source)
    basic = getattr(destination, "basic_auth", None)
    if basic is not None:
        return HeaderAuth(
            scheme="Basic",
            secret=_text(basic.password),
            secret_file=basic.password_file,
            username=basic.username,
        )
    authz = getattr(destination, "authorization", None)
    if authz is not None:
        return HeaderAuth(
            scheme=authz.type,
            secret=_text(authz.credentials),
            secret_file=authz.credentials_file,
        )
    return NoAuth()


#: Why a sigv4 destination without a region anywhere is refused (the signer needs one): the
#: places :func:`sigv4_region` looks, in its order.
REGION_NOT_SET = (
    "not set, nor in AWS_REGION, AWS_DEFAULT_REGION or the AWS profile's region "
    "(sigv4.profile, else AWS_PROFILE, else default)"
)


def sigv4_region(v4: SigV4Config) -> str | None:
    """The signing region of a ``sigv4`` block: its ``region``, else ``AWS_REGION`` /
    ``AWS_DEFAULT_REGION``, else the AWS profile's region. BLOCKING (may read AWS files)."""
    found = sigv4_region_source(v4)
    return None if found is None else found[0]


def sigv4_region_source(v4: SigV4Config) -> tuple[str, str] | None:
    """:func:`sigv4_region` and where it came from (``sigv4.region``, ``AWS_REGION``,
    ``AWS_DEFAULT_REGION``, ``the AWS profile 'NAME'``), or None when none is set. BLOCKING
    (may read AWS files)."""
    found = v4.region_source(os.environ)
    if found is not None:
        return found
    region = profile_region(v4.profile)
    profile = v4.profile or os.environ.get("AWS_PROFILE") or "default"
    return None if region is None else (region, f"the AWS profile {profile!r}")


def _text(secret: object) -> str | None:
    """The plain text of a config secret (``Secret`` hides it from str/repr)."""
    if secret is None:
        return None
    reveal = getattr(secret, "reveal", None)
    return str(reveal()) if callable(reveal) else str(secret)
