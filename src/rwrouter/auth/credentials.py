"""AWS credentials and SigV4 signing with botocore (the only module that imports botocore).

A :class:`CredentialsSource` is built once per destination from its ``sigv4`` settings
(:func:`load_source`, blocking; :func:`open_source` runs it in a thread) and then used from the
event loop without blocking it: botocore's refresh (STS, IMDS, container endpoint) is a
blocking HTTP call, so it always runs in a worker thread (:func:`asyncio.to_thread`).

Which credentials, in order: static keys (``access_key`` + ``secret_key``); ``profile`` (a
botocore session with that profile); else botocore's default chain (env keys, web identity =
EKS IRSA, SSO, shared files, credential_process, container provider = EKS Pod Identity,
instance metadata). ``role_arn`` wraps the credentials found so in STS AssumeRole, refreshed by
botocore's ``RefreshableCredentials`` (15 min advisory / 10 min mandatory before expiry);
``AWS_ENDPOINT_URL_STS`` points STS elsewhere. Source: shared/reference/managed-workspace.md
"Credentials"; Prometheus ``sigv4`` config (region, access_key, secret_key, profile, role_arn).

:func:`sign` signs one request with ``SigV4Auth(...).add_auth(AWSRequest(...))`` on exactly the
headers chosen by :func:`rwrouter.auth.sigv4.headers_to_sign` plus ``Host``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import botocore.session  # type: ignore[import-untyped,unused-ignore]
from botocore.auth import SigV4Auth  # type: ignore[import-untyped,unused-ignore]
from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped,unused-ignore]
from botocore.credentials import Credentials as BotoCredentials  # type: ignore[import-untyped,unused-ignore]
from botocore.credentials import DeferredRefreshableCredentials, RefreshableCredentials  # type: ignore[import-untyped,unused-ignore]
from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped,unused-ignore]

from rwrouter.auth import sigv4
from rwrouter.errors import CredentialsError

#: RoleSessionName of our AssumeRole calls (visible in CloudTrail).
ROLE_SESSION_NAME = "rwrouter"


@dataclass(frozen=True)
class FrozenCredentials:
    """One consistent set of keys to sign one request with; ``token`` is set for temporary
    credentials (it becomes ``X-Amz-Security-Token``). Secrets stay out of ``repr``."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class _Settings:
    region: str
    service: str = "aps"
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    profile: str | None = None
    role_arn: str | None = None


_SETTING_NAMES = (
    "region",
    "service",
    "access_key",
    "secret_key",
    "session_token",
    "profile",
    "role_arn",
)


class CredentialsSource:
    """Credentials of one destination, for use on the event loop.

    ``region`` and ``service`` are the signing scope. Build it with :func:`load_source`.
    """

    def __init__(self, *, credentials: Any, region: str, service: str, method: str) -> None:
        self._credentials = credentials
        self.region = region
        self.service = service
        #: Where the credentials come from: "static", "profile", "assume-role", or botocore's
        #: provider method ("env", "assume-role-with-web-identity", "container-role", "iam-role").
        self.method = method

    async def frozen(self) -> FrozenCredentials:
        """Current credentials, refreshed first when due (in a worker thread, never on the loop).

        Raises :class:`CredentialsError` when a mandatory refresh fails.
        """
        if not isinstance(self._credentials, RefreshableCredentials):
            return self._freeze()
        return await asyncio.to_thread(self._freeze)

    async def force_refresh(self) -> FrozenCredentials:
        """Refresh now, whatever the expiry says (after a 401 or 403 answer, see
        :meth:`rwrouter.auth.schemes.SigV4.refresh_after`), in a worker thread. Static
        credentials are returned as they are.

        Raises :class:`CredentialsError` when the refresh fails.
        """
        if not isinstance(self._credentials, RefreshableCredentials):
            return self._freeze()
        return await asyncio.to_thread(self._refresh_and_freeze)

    def expiry(self) -> float | None:
        """When the current credentials expire, in unix seconds; ``None`` for static keys or
        before the first (deferred) fetch. For a gauge; does not refresh."""
        expiry_time = getattr(self._credentials, "_expiry_time", None)  # botocore keeps it private
        return None if expiry_time is None else float(expiry_time.timestamp())

    def _freeze(self) -> FrozenCredentials:
        try:
            read_only = self._credentials.get_frozen_credentials()
        except (BotoCoreError, ClientError, RuntimeError) as exc:
            raise CredentialsError(f"refreshing {self.method} credentials failed: {exc}") from exc
        return FrozenCredentials(
            read_only.access_key, read_only.secret_key, read_only.token or None
        )

    def _refresh_and_freeze(self) -> FrozenCredentials:
        # botocore has no public "refresh now"; this is what its mandatory refresh does.
        credentials = self._credentials
        try:
            with credentials._refresh_lock:
                _forget_cached_fetch(credentials)
                credentials._protected_refresh(is_mandatory=True)
        except (BotoCoreError, ClientError, RuntimeError) as exc:
            raise CredentialsError(f"refreshing {self.method} credentials failed: {exc}") from exc
        return self._freeze()


def _forget_cached_fetch(credentials: RefreshableCredentials) -> None:
    """Drop the cached STS answer behind ``credentials``, if any. botocore's web-identity and
    assume-role fetchers (``CachedCredentialFetcher``) return their cached credentials until 15
    minutes before they expire, so a forced refresh would hand back the very key the
    destination just refused as expired, and never read a rotated token file."""
    fetcher = getattr(getattr(credentials, "_refresh_using", None), "__self__", None)
    cache, key = getattr(fetcher, "_cache", None), getattr(fetcher, "_cache_key", None)
    if cache is None or key is None:
        return
    with contextlib.suppress(KeyError, TypeError, OSError):
        del cache[key]


def load_source(
    config: object | None = None,
    *,
    region: str | None = None,
    service: str | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    session_token: str | None = None,
    profile: str | None = None,
    role_arn: str | None = None,
) -> CredentialsSource:
    """Build the credentials source of a ``sigv4`` block. BLOCKING (reads files, may call the
    instance metadata or container endpoint): call at start-up or use :func:`open_source`.

    ``config`` is any object with those attribute names (missing ones count as unset); keyword
    arguments win over it. ``region`` is required; ``service`` defaults to ``"aps"``.
    With ``role_arn`` nothing is fetched yet: the first :meth:`CredentialsSource.frozen` calls
    AssumeRole. Raises :class:`CredentialsError` for bad settings or when no credentials exist.
    """
    overrides = {
        "region": region,
        "service": service,
        "access_key": access_key,
        "secret_key": secret_key,
        "session_token": session_token,
        "profile": profile,
        "role_arn": role_arn,
    }
    settings = _merge_settings(config, overrides)
    session = botocore.session.Session(profile=settings.profile)
    session.set_config_variable("region", settings.region)
    base, method = _base_credentials(session=session, settings=settings)
    if settings.role_arn:
        refresh = _assume_role_refresher(
            session=session, base=base, role_arn=settings.role_arn, region=settings.region
        )
        base, method = DeferredRefreshableCredentials(refresh, "assume-role"), "assume-role"
    return CredentialsSource(
        credentials=base, region=settings.region, service=settings.service, method=method
    )


async def open_source(config: object | None = None, **settings: str | None) -> CredentialsSource:
    """:func:`load_source` in a worker thread (same arguments, same errors)."""
    return await asyncio.to_thread(lambda: load_source(config, **settings))


def profile_region(profile: str | None = None) -> str | None:
    """The region of an AWS profile (``profile``, else ``AWS_PROFILE`` or ``default``) from the
    shared config files, as botocore resolves it. BLOCKING (reads files)."""
    try:
        region = botocore.session.Session(profile=profile).get_config_variable("region")
    except (BotoCoreError, ClientError):
        return None
    return str(region) if region else None


def sign(
    *,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    credentials: FrozenCredentials,
    region: str,
    service: str,
    fixed: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Sign one request; returns every header to send except ``User-Agent`` (the caller adds
    it, unsigned) and ``Content-Length`` (the HTTP client adds it).

    ``headers`` are the destination's configured headers; the remote write headers are added
    and the set is filtered by :func:`rwrouter.auth.sigv4.headers_to_sign`, then ``Host``
    (:func:`rwrouter.auth.sigv4.host_header`). The result adds ``X-Amz-Date``,
    ``X-Amz-Security-Token`` (temporary credentials) and ``Authorization``; every header in it
    is signed. ``body`` must be the exact bytes sent (its sha256 is signed). ``fixed``: the
    protocol's headers (default: remote write's; ``{}`` for a query of the workspace's query
    API, ``rwrouter compare``). Reads the clock.
    Source: managed-workspace.md "Endpoint and headers"; botocore ``SigV4Auth``.
    """
    to_sign = sigv4.headers_to_sign(configured=headers, fixed=fixed)
    to_sign["Host"] = sigv4.host_header(url)
    request = AWSRequest(method=method.upper(), url=url, data=body, headers=to_sign)
    boto_credentials = BotoCredentials(
        credentials.access_key, credentials.secret_key, credentials.token
    )
    SigV4Auth(boto_credentials, service, region).add_auth(request)
    return {str(name): str(value) for name, value in request.headers.items()}


def _merge_settings(config: object | None, overrides: Mapping[str, str | None]) -> _Settings:
    values: dict[str, str] = {}
    for name in _SETTING_NAMES:
        value = overrides.get(name)
        if value is None and config is not None:
            value = getattr(config, name, None)
        if value:
            values[name] = str(value)
    if "region" not in values:
        raise CredentialsError("sigv4.region is required")
    if ("access_key" in values) != ("secret_key" in values):
        raise CredentialsError("sigv4.access_key and sigv4.secret_key must be set together")
    if "access_key" in values and "profile" in values:
        raise CredentialsError("sigv4: set either access_key/secret_key or profile, not both")
    return _Settings(**values)


def _base_credentials(*, session: Any, settings: _Settings) -> tuple[Any, str]:
    if settings.access_key and settings.secret_key:
        static = BotoCredentials(settings.access_key, settings.secret_key, settings.session_token)
        return static, "static"
    source = f"profile {settings.profile!r}" if settings.profile else "the default chain"
    try:
        credentials = session.get_credentials()
    except (BotoCoreError, ClientError) as exc:
        raise CredentialsError(f"loading AWS credentials from {source} failed: {exc}") from exc
    if credentials is None:
        raise CredentialsError(
            f"no AWS credentials found in {source} (env keys, web identity/IRSA, SSO, shared "
            "files, credential_process, container/Pod Identity, instance metadata); set "
            "sigv4.access_key and sigv4.secret_key, sigv4.profile, or fix the environment"
        )
    return credentials, "profile" if settings.profile else str(credentials.method)


def _assume_role_refresher(
    *, session: Any, base: Any, role_arn: str, region: str
) -> Callable[[], dict[str, str]]:
    """A botocore ``refresh_using`` callable: AssumeRole with the base credentials (blocking)."""

    def refresh() -> dict[str, str]:
        return _assume_role(session=session, base=base, role_arn=role_arn, region=region)

    return refresh


def _assume_role(*, session: Any, base: Any, role_arn: str, region: str) -> dict[str, str]:
    frozen = base.get_frozen_credentials()
    client = session.create_client(
        "sts",
        region_name=region,
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL_STS") or None,
        aws_access_key_id=frozen.access_key,
        aws_secret_access_key=frozen.secret_key,
        aws_session_token=frozen.token,
    )
    answer = client.assume_role(RoleArn=role_arn, RoleSessionName=ROLE_SESSION_NAME)
    issued = answer["Credentials"]
    return {
        "access_key": issued["AccessKeyId"],
        "secret_key": issued["SecretAccessKey"],
        "token": issued["SessionToken"],
        "expiry_time": issued["Expiration"].isoformat(),
    }
