"""The web configuration file at run time (I/O): read it (:func:`load_web_config`), build the
listener's TLS context from it (:func:`server_context`, the standard library's :mod:`ssl`), and
read it again when it or a file it names changes (:class:`WebConfigFile`), as Prometheus's
exporter toolkit does (it reads the file on every request and the certificate on every
handshake): certificates rotate without a restart.

How the toolkit's ``client_auth_type`` maps to :mod:`ssl`: ``NoClientCert`` -> ``CERT_NONE``,
``VerifyClientCertIfGiven`` -> ``CERT_OPTIONAL``, ``RequireAndVerifyClientCert`` ->
``CERT_REQUIRED`` (verified against ``client_ca_file``, else the system's CAs, as Go does).
``RequestClientCert`` and ``RequireAnyClientCert`` (a certificate taken without verifying it;
the toolkit calls them insecure) cannot be had from :mod:`ssl`, which verifies each client
certificate it asks for: they are refused at load. ``curve_preferences`` takes one curve at
most (:meth:`ssl.SSLContext.set_ecdh_curve` sets a single group). The TLS 1.3 cipher suites
are always on (as in Go).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import ssl
import time
from collections.abc import Callable
from typing import Any

from rwrouter.config.files import (
    CONFIG_FILE_MAX_BYTES,
    SECRET_FILE_MAX_BYTES,
    TLS_FILE_MAX_BYTES,
    read_named,
    read_regular,
)
from rwrouter.config.web import (
    CIPHER_SUITES,
    CURVES,
    ClientAuth,
    TLSServerConfig,
    TLSVersion,
    WebConfig,
    parse_web_config,
)
from rwrouter.errors import ConfigError, ConfigErrors
from rwrouter.logs import kv

log = logging.getLogger("rwrouter.frontdoor")

CHECK_EVERY = 3.0  # seconds between two looks at the files' modification times
_VERSIONS = {
    TLSVersion.TLS10: ssl.TLSVersion.TLSv1,
    TLSVersion.TLS11: ssl.TLSVersion.TLSv1_1,
    TLSVersion.TLS12: ssl.TLSVersion.TLSv1_2,
    TLSVersion.TLS13: ssl.TLSVersion.TLSv1_3,
}
_VERIFY = {
    ClientAuth.NO_CLIENT_CERT: ssl.CERT_NONE,
    ClientAuth.VERIFY_CLIENT_CERT_IF_GIVEN: ssl.CERT_OPTIONAL,
    ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT: ssl.CERT_REQUIRED,
}


def _read_token(path: str) -> bytes:
    """A ``token_file``: a regular file of at most SECRET_FILE_MAX_BYTES (a FIFO or a device
    is refused, never waited on or read without end); raises OSError or ValueError."""
    return read_regular(path, SECRET_FILE_MAX_BYTES)


def load_web_config(path: str) -> WebConfig:
    """Read and validate the web configuration file at ``path`` (a regular file of at most
    CONFIG_FILE_MAX_BYTES), the token files it names, and its certificate, key and client CA
    (regular files of at most TLS_FILE_MAX_BYTES, then loaded by building the TLS context).
    Raises ConfigError (ConfigErrors for several files) naming the key."""
    try:
        text = read_regular(path, CONFIG_FILE_MAX_BYTES).decode("utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read web config file {path!r}: {exc.strerror}") from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise ConfigError("", f"cannot read web config file {path!r}: {exc}") from None
    config = parse_web_config(
        text, source=path, base_dir=os.path.dirname(os.path.abspath(path)), read_file=_read_token
    )
    tls = config.tls_server_config
    if tls is not None:
        _check_tls_files(tls)
        server_context(tls)
    return config


def _check_tls_files(tls: TLSServerConfig) -> None:
    """Each TLS file is a regular file of at most TLS_FILE_MAX_BYTES (OpenSSL reads them
    from the path, without such bounds); every bad one reported."""
    problems = []
    named = {"cert_file": tls.cert_file, "key_file": tls.key_file}
    if tls.client_ca_file is not None:
        named["client_ca_file"] = tls.client_ca_file
    for key, file in named.items():
        try:
            read_named(f"tls_server_config.{key}", file, TLS_FILE_MAX_BYTES)
        except ConfigError as exc:
            problems.append(exc)
    if problems:
        raise ConfigErrors.of(problems)


def server_context(tls: TLSServerConfig) -> ssl.SSLContext:
    """A server-side TLS context of ``tls``: certificate chain, versions, ciphers, curve and
    client certificates (see the module docstring). Raises ConfigError naming the key."""
    path = "tls_server_config"
    verify = _VERIFY.get(tls.client_auth_type)
    if verify is None:
        raise ConfigError(
            f"{path}.client_auth_type",
            f"{tls.client_auth_type} is not supported by rwrouter (Python's ssl verifies every "
            "client certificate it asks for): use VerifyClientCertIfGiven or "
            "RequireAndVerifyClientCert",
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[tls.min_version]
    context.maximum_version = _VERSIONS[tls.max_version]
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        why = f"cannot load the certificate and key: {_why(exc)}"
        raise ConfigError(f"{path}.cert_file", why) from None
    context.verify_mode = verify
    if verify != ssl.CERT_NONE:
        _client_cas(context, tls.client_ca_file, f"{path}.client_ca_file")
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    _ciphers(context, tls.cipher_suites, f"{path}.cipher_suites")
    _curves(context, tls.curve_preferences, f"{path}.curve_preferences")
    return context


def _why(exc: Exception) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc)
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _client_cas(context: ssl.SSLContext, ca_file: str | None, path: str) -> None:
    if ca_file is None:
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        return
    try:
        context.load_verify_locations(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(path, f"cannot load {ca_file!r}: {_why(exc)}") from None
    if not context.get_ca_certs():
        raise ConfigError(path, f"{ca_file!r} holds no certificate")


def _ciphers(context: ssl.SSLContext, names: tuple[str, ...], path: str) -> None:
    openssl = [CIPHER_SUITES[n] for n in names if CIPHER_SUITES[n] is not None]
    if not names:
        return
    if not openssl:  # only TLS 1.3 suites named: those are always on
        if context.minimum_version < ssl.TLSVersion.TLSv1_3:
            raise ConfigError(path, "names TLS 1.3 suites only: set min_version TLS13")
        return
    try:
        context.set_ciphers(":".join(n for n in openssl if n))
    except ssl.SSLError as exc:
        raise ConfigError(path, f"refused by OpenSSL: {_why(exc)}") from None


def _curves(context: ssl.SSLContext, names: tuple[str, ...], path: str) -> None:
    if len(names) > 1:
        raise ConfigError(path, "rwrouter applies one curve (Python's ssl sets a single group)")
    if names:
        context.set_ecdh_curve(CURVES[names[0]])


def peer_sans(ssl_object: Any) -> set[str]:
    """The Subject Alternative Names of the verified client certificate of ``ssl_object`` (an
    :class:`ssl.SSLObject`) written as Go's ``x509.Certificate`` fields are (DNS names, e-mail
    addresses, IP addresses in Go's ``IP.String`` form, URIs); empty without one."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    sans = set()
    for kind, value in (cert or {}).get("subjectAltName", ()):
        if kind == "IP Address":
            value = str(ipaddress.ip_address(value.strip()))
        if kind in ("DNS", "email", "URI", "IP Address"):
            sans.add(value)
    return sans


class ReloadingContext(ssl.SSLContext):
    """The listener's TLS context: each new connection is wrapped by the context of the web
    configuration file as it is now (``source``: :class:`WebConfigFile`), so new settings and
    certificates apply from the next handshake; connections open before keep theirs."""

    source: WebConfigFile

    def __new__(cls, source: WebConfigFile) -> ReloadingContext:
        context = super().__new__(cls, ssl.PROTOCOL_TLS_SERVER)
        context.source = source
        return context

    def __init__(self, source: WebConfigFile) -> None:
        pass  # ssl.SSLContext is built by __new__

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self.source.refresh()
        current = self.source.context
        if current is None:  # cannot happen: TLS is on from the start or never
            raise ssl.SSLError("no TLS settings")
        return current.wrap_bio(*args, **kwargs)


class WebConfigFile:
    """The web configuration file ``path`` as it is now: :attr:`config` and (with
    ``tls_server_config``) :attr:`context`. :meth:`refresh` reads it again, at most every
    ``check_every`` seconds, when it or a file it names changed (modification time, size,
    inode); a new file that does not load, or that turns TLS on or off (which needs a
    restart), keeps the old settings, logged once per change. ``on_loaded(ok)`` is called
    after each attempt (the metric). Raises ConfigError at construction (the first read)."""

    def __init__(
        self,
        path: str,
        *,
        on_loaded: Callable[[bool], None] = lambda ok: None,
        clock: Callable[[], float] = time.monotonic,
        check_every: float = CHECK_EVERY,
    ) -> None:
        self.path = path
        self._clock, self._check_every, self._on_loaded = clock, check_every, on_loaded
        self.config = load_web_config(path)
        self.context = self._context(self.config)
        self._seen = self._signature(self.config)
        self._checked = clock()
        self.generation = 0  # how many times new settings were taken
        on_loaded(True)

    @staticmethod
    def _context(config: WebConfig) -> ssl.SSLContext | None:
        tls = config.tls_server_config
        return None if tls is None else server_context(tls)

    def _signature(self, config: WebConfig) -> tuple[object, ...]:
        found: list[object] = []
        for path in (self.path, *config.files()):
            try:
                st = os.stat(path)
                found.append((path, st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev))
            except OSError as exc:
                found.append((path, exc.errno))
        return tuple(found)

    def refresh(self) -> None:
        """Read the files again if one changed since the last look (see the class)."""
        now = self._clock()
        if now - self._checked < self._check_every:
            return
        self._checked = now
        seen = self._signature(self.config)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            config = load_web_config(self.path)
            if (config.tls_server_config is None) != (self.config.tls_server_config is None):
                raise ConfigError("tls_server_config", "turning TLS on or off needs a restart")
            context = self._context(config)
        except ConfigError as exc:
            log.error(kv(msg="web config file not applied: keeping the running one", error=exc))
            self._on_loaded(False)
            return
        self.config, self.context = config, context
        self._seen = self._signature(config)
        self.generation += 1
        log.info(kv(msg="web config file applied", file=self.path))
        self._on_loaded(True)
