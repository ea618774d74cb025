"""The front door (I/O): who may call which endpoint (``--web.config.file``,
``--web.enable-lifecycle``), as an aiohttp middleware (:class:`FrontDoor`).

Roles by endpoint (docs/configuration.md, "Web configuration file"): the write endpoints need
``write``; ``/metrics``, ``/-/status``, ``/`` and ``/-/audit`` (and unknown paths) need
``read``; ``/-/reload`` needs ``admin`` and answers 403 "Lifecycle API is not enabled." without
``--web.enable-lifecycle`` (Prometheus's answer; SIGHUP always reloads); ``/-/healthy`` and
``/-/ready`` are open to all. Without a web configuration file, or with one that has neither
``basic_auth_users`` nor ``bearer_tokens``, every request has every role (the lifecycle rule
still holds).

Credentials: ``Authorization: Basic`` checked with bcrypt (the exporter toolkit's scheme: one
check at a time, off the event loop; an unknown user costs a check too, so timing does not tell
users apart; each outcome is remembered by an HMAC of user, hash and password, in bounded
caches, so a sender's requests do not each pay bcrypt), ``Authorization: Bearer`` compared in
constant time with every token. A missing or wrong credential gets 401 with
``WWW-Authenticate`` (``Basic realm="rwrouter"`` and/or ``Bearer realm="rwrouter"``); a valid
one without the role, or a client certificate without an allowed SAN, gets 403. Each refusal
is counted (``rwrouter_auth_failures_total{reason}``) and logged at most once per client address
and minute. The identity goes on the request (:data:`IDENTITY`).
"""

from __future__ import annotations

import asyncio
import binascii
import hashlib
import hmac
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import bcrypt
from aiohttp import web

from rwrouter.config.tenant import TENANT_HEADER, request_tenant
from rwrouter.config.web import Role, WebConfig
from rwrouter.logs import Throttle, kv
from rwrouter.metrics import ReceiveMetrics
from rwrouter.reasons import AuthReason
from rwrouter.server.webtls import WebConfigFile, peer_sans

log = logging.getLogger("rwrouter.frontdoor")

REALM = "rwrouter"
LIFECYCLE_PATH = "/-/reload"
LIFECYCLE_OFF = "Lifecycle API is not enabled."  # Prometheus's answer (web/api/v1, web.go)
OPEN_PATHS = frozenset({"/-/healthy", "/-/ready"})
#: The role each endpoint needs (a path not here, and not open, needs ``read``).
ENDPOINT_ROLES: Mapping[str, Role] = MappingProxyType(
    {
        "/api/v1/write": Role.WRITE,
        "/api/v1/push": Role.WRITE,
        "/metrics": Role.READ,
        "/-/status": Role.READ,
        "/": Role.READ,
        "/-/audit": Role.READ,
        LIFECYCLE_PATH: Role.ADMIN,
    }
)
LOG_EVERY = 60.0  # seconds: at most one refusal line per client address in that time
LOGGED_CLIENTS = 4096  # client addresses remembered for that (the oldest forgotten first)
CACHED_CHECKS = 1024  # bcrypt outcomes remembered, each of successes and failures
# A bcrypt hash (cost 10) of no password anyone uses: checked for an unknown user.
_DECOY = b"$2b$10$77XfCl8AXC4hT2uYCdIrNOEKkZ45ezVdX6clB2nrJStpjIr7EZ2ES"


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """Who a request is: ``name`` the credential's (a basic auth user or a token name; None
    when no credential was needed), its ``roles``, and the tenant settings of its ``access``
    entry (:func:`write_tenant`)."""

    name: str | None
    roles: frozenset[Role]
    tenant: str | None = None
    tenant_from_header: bool = False


EVERYONE = Identity(name=None, roles=frozenset(Role))
IDENTITY = web.RequestKey("identity", Identity)


def write_tenant(request: web.Request) -> str | None:
    """The tenant of a write request (:func:`rwrouter.config.tenant.request_tenant`) by its
    credential's :data:`IDENTITY` (none without a web configuration file, or without a front
    door). Raises TenantError (400) for an invalid ``X-Scope-OrgID`` the credential lets the
    sender give."""
    identity = request.get(IDENTITY)
    if identity is None:
        return None
    return request_tenant(
        tenant=identity.tenant,
        from_header=identity.tenant_from_header,
        header=request.headers.get(TENANT_HEADER),
    )


def required_role(path: str) -> Role | None:
    """The role ``path`` needs; None for the open endpoints."""
    if path in OPEN_PATHS:
        return None
    return ENDPOINT_ROLES.get(path, Role.READ)


@dataclass(frozen=True, slots=True, kw_only=True)
class DoorOptions:
    """What ``rwrouter run`` was told: ``--web.config.file`` and ``--web.enable-lifecycle``."""

    web_config_file: str | None = None
    enable_lifecycle: bool = False

    def args(self) -> tuple[str, ...]:
        """The same as ``rwrouter run`` arguments (for the workers of ``--workers``)."""
        file = ("--web.config.file", self.web_config_file) if self.web_config_file else ()
        return (*file, *(("--web.enable-lifecycle",) if self.enable_lifecycle else ()))


class Refused(Exception):
    """A request the front door answers itself: ``reason`` (counted), ``status``, ``text``."""

    def __init__(self, reason: AuthReason, status: int, text: str, **challenge: str) -> None:
        super().__init__(text)
        self.reason, self.status, self.text, self.challenge = reason, status, text, challenge


class Checks:
    """bcrypt checks, one at a time off the event loop, their outcomes remembered (bounded)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)  # the cache holds HMACs, never a password
        self._lock = asyncio.Lock()
        self._outcomes: dict[bool, OrderedDict[bytes, None]] = {
            True: OrderedDict(),
            False: OrderedDict(),
        }
        self.computed = 0  # bcrypt checks run (not answered from the caches)

    async def check(self, user: str, hashed: bytes, password: bytes) -> bool:
        """Whether ``password`` matches the bcrypt ``hashed`` (of ``user``)."""
        parts = (user.encode(), hashed, password)  # each length-prefixed: unambiguous
        message = b"".join(len(p).to_bytes(4, "big") + p for p in parts)
        key = hmac.new(self._key, message, hashlib.sha256).digest()
        for outcome, seen in self._outcomes.items():
            if key in seen:
                seen.move_to_end(key)
                return outcome
        async with self._lock:
            ok = await asyncio.to_thread(_checkpw, password, hashed)
            self.computed += 1
        seen = self._outcomes[ok]
        seen[key] = None
        if len(seen) > CACHED_CHECKS:
            seen.popitem(last=False)
        return ok


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # e.g. a password over 72 bytes: Go's bcrypt refuses it too
        return False


class FailureLog:
    """At most one log line per client address and :data:`LOG_EVERY` seconds, saying how many
    refusals of that client were not logged since (:class:`rwrouter.logs.Throttle`)."""

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._throttle = Throttle(every=LOG_EVERY, keys=LOGGED_CLIENTS)

    def refused(self, remote: str, refusal: Refused, path: str) -> None:
        unlogged = self._throttle.admit(remote, now=self._clock())
        if unlogged is None:
            return
        log.warning(
            kv(
                msg="request refused",
                remote=remote,
                status=refusal.status,
                reason=refusal.reason,
                path=path,
                why=refusal.text,
                unlogged=unlogged,
            )
        )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FrontDoor:
    """The middleware of the public listener (:attr:`middleware`) and the headers it adds to
    every answer (:meth:`add_headers`). ``source``: the web configuration file (None: no
    credentials, no TLS); ``lifecycle``: ``--web.enable-lifecycle``; ``metrics``: where the
    refusals are counted; ``clock``: monotonic seconds (the log's rate)."""

    def __init__(
        self,
        *,
        source: WebConfigFile | None,
        lifecycle: bool,
        metrics: ReceiveMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source, self.lifecycle, self.metrics = source, lifecycle, metrics
        self.checks = Checks()
        self._log = FailureLog(clock=clock)

    @property
    def config(self) -> WebConfig:
        """The web configuration as it is now (an empty one without a file)."""
        if self.source is None:
            return _NO_FILE
        self.source.refresh()
        return self.source.config

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        config = self.config
        try:
            request[IDENTITY] = await self._admit(request, config)
        except Refused as refusal:
            self.metrics.auth_failures.labels(refusal.reason).inc()
            self._log.refused(request.remote or "-", refusal, request.path)
            response = web.Response(status=refusal.status, text=refusal.text + "\n")
            for scheme, challenge in refusal.challenge.items():
                response.headers.add("WWW-Authenticate", f"{scheme} {challenge}")
            if request.can_read_body:  # its body is not read: nor is the next request
                response.force_close()
            return response
        return await handler(request)

    async def add_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        """``http_server_config.headers`` on every answer (``on_response_prepare``)."""
        for name, value in self.config.http_server_config.headers.items():
            response.headers[name] = value

    async def _admit(self, request: web.Request, config: WebConfig) -> Identity:
        """The identity of ``request`` if it may go on; raises Refused."""
        tls = config.tls_server_config
        if tls is not None and tls.client_allowed_sans:
            ssl_object = (
                request.transport.get_extra_info("ssl_object") if request.transport else None
            )
            if not peer_sans(ssl_object) & set(tls.client_allowed_sans):
                raise Refused(AuthReason.CLIENT_CERT, 403, "client certificate has no allowed SAN")
        role = required_role(request.path)
        if role is None:
            return EVERYONE
        identity = await self._identify(request.headers.get("Authorization"), config, role)
        if request.path == LIFECYCLE_PATH and not self.lifecycle:
            raise Refused(AuthReason.LIFECYCLE, 403, LIFECYCLE_OFF)
        if role not in identity.roles:
            who = f"credential {identity.name!r}" if identity.name else "a request without one"
            raise Refused(AuthReason.FORBIDDEN, 403, f"{who} lacks the {role} role")
        return identity

    async def _identify(self, header: str | None, config: WebConfig, role: Role) -> Identity:
        """Who the ``Authorization`` ``header`` says the request is; raises Refused (401)."""
        if not config.authenticates:
            return EVERYONE
        if header is None:
            if role in config.public_roles:
                return Identity(name=None, roles=config.public_roles)
            raise Refused(AuthReason.MISSING, 401, "authentication required", **_challenges(config))
        scheme, _, value = header.strip().partition(" ")
        name = None
        if scheme.lower() == "basic" and config.basic_auth_users:
            name = await self._basic(value.strip(), config)
        elif scheme.lower() == "bearer" and config.bearer_tokens:
            name = _bearer(value.strip(), config)
        if name is None:
            raise Refused(AuthReason.WRONG, 401, "wrong credentials", **_challenges(config))
        if config.access is None:
            return Identity(name=name, roles=frozenset(Role))
        entry = config.access[name]
        return Identity(
            name=name,
            roles=entry.roles,
            tenant=entry.tenant,
            tenant_from_header=entry.tenant_from_header,
        )

    async def _basic(self, value: str, config: WebConfig) -> str | None:
        """The user a ``Basic`` credential authenticates, or None."""
        try:
            decoded = binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
            user_bytes, colon, password = decoded.partition(b":")
            user = user_bytes.decode("utf-8")
        except (UnicodeError, binascii.Error):
            return None
        if not colon:
            return None
        hashed = config.basic_auth_users.get(user)
        known = hashed is not None
        digest = hashed.reveal().encode() if hashed is not None else _DECOY
        ok = await self.checks.check(user, digest, password)
        return user if ok and known else None


def _bearer(value: str, config: WebConfig) -> str | None:
    """The name of the token ``value`` is, or None; compares with every token."""
    found = None
    presented = value.encode("utf-8", "surrogateescape")
    for token in config.bearer_tokens:
        if hmac.compare_digest(presented, token.token.reveal().encode()):
            found = token.name
    return found


def _challenges(config: WebConfig) -> dict[str, str]:
    """The ``WWW-Authenticate`` challenges, by scheme, of the credentials configured."""
    challenges = {}
    if config.basic_auth_users:
        challenges["Basic"] = f'realm="{REALM}"'
    if config.bearer_tokens:
        challenges["Bearer"] = f'realm="{REALM}"'
    return challenges


_NO_FILE = WebConfig()
