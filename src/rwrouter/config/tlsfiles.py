"""A destination's TLS material loaded as ``rwrouter run`` loads it (the standard library's
:mod:`ssl`, so OpenSSL): ``ca_file`` (PEM certificates to verify the destination with, in
place of the system's), ``cert_file`` + ``key_file`` (the client certificate and its private
key). Like :mod:`rwrouter.config.load`, a module of ``rwrouter.config`` that reads files.

:func:`client_context` is the one way a ``tls_config`` becomes an :class:`ssl.SSLContext`:
the sending side (:func:`rwrouter.send.transport.ssl_context_for`) and ``check-config``
(:func:`rwrouter.config.load.load_config`) call it, so what check-config accepts loads at run
time, and what does not is told the same way, one line per file naming its key:
``remote_write[0].tls_config.ca_file: not a PEM certificate (no certificate or crl found)``.
Go's ``crypto/tls`` (Prometheus) refuses the same files: a CA file without a PEM certificate
("unable to use specified CA cert"), a key that does not match the certificate, an encrypted
key (which OpenSSL would otherwise ask for on the terminal: never asked here).
"""

from __future__ import annotations

import re
import ssl

from rwrouter.errors import ConfigError, ConfigErrors

__all__ = ["client_context"]

_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}


def _encrypted(key_path: str, key_file: str) -> bytes:
    """The password callback of an encrypted key: refused, never asked for."""
    why = f"{key_file!r} is an encrypted private key: not supported (nor by Prometheus)"
    raise ConfigError(key_path, why)


def _openssl(exc: Exception) -> str:
    """OpenSSL's words without the library tag and the source line: ``[X509:
    KEY_VALUES_MISMATCH] key values mismatch (_ssl.c:3926)`` -> ``key values mismatch``."""
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and exc.strerror:
        return exc.strerror
    text = str(exc.args[1] if len(exc.args) > 1 else exc)
    return re.sub(r"^\[[^\]]*\]\s*|\s*\(_ssl\.c:\d+\)$", "", text) or str(exc)


def client_context(
    path: str,
    *,
    ca_file: str | None,
    cert_file: str | None,
    key_file: str | None,
    insecure_skip_verify: bool = False,
    min_version: str | None = None,
) -> ssl.SSLContext:
    """The client TLS context of the ``tls_config`` at key path ``path`` (Prometheus field
    semantics): verified against ``ca_file`` (else the system's CAs), presenting
    ``cert_file``/``key_file`` when both are set, no verification with
    ``insecure_skip_verify``, at least ``min_version`` (``TLS10`` .. ``TLS13``).

    Raises ConfigError naming ``path.ca_file``, ``path.cert_file`` or ``path.key_file`` with
    a one-line reason (ConfigErrors when several files are bad): "not a PEM certificate",
    "not a PEM private key", "does not match cert_file", "an encrypted private key"."""
    problems: list[ConfigError] = []
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        problems.append(_certificate_error(f"{path}.ca_file", ca_file, exc))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # to check the pair still
    if cert_file and key_file:
        problems += _pair_errors(context, path, cert_file, key_file)
    if problems:
        raise ConfigErrors.of(problems)
    if insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if min_version:
        context.minimum_version = _VERSIONS[min_version]
    return context


def _certificate_error(key_path: str, file: str | None, exc: Exception) -> ConfigError:
    if isinstance(exc, ssl.SSLError):
        return ConfigError(key_path, f"{file!r} is not a PEM certificate ({_openssl(exc)})")
    return ConfigError(key_path, f"cannot read {file!r}: {_openssl(exc)}")


def _pair_errors(
    context: ssl.SSLContext, path: str, cert_file: str, key_file: str
) -> list[ConfigError]:
    """Load the client certificate and key into ``context``; the errors, by file."""
    try:  # a certificate at all? (load_cert_chain's "PEM lib" names neither file)
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert_file)
    except (OSError, ssl.SSLError) as exc:
        return [_certificate_error(f"{path}.cert_file", cert_file, exc)]
    key_path = f"{path}.key_file"
    try:
        context.load_cert_chain(
            cert_file, key_file, password=lambda: _encrypted(key_path, key_file)
        )
    except ConfigError as exc:  # from the password callback
        return [exc]
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            why = f"{key_file!r} does not match the certificate of cert_file ({_openssl(exc)})"
        else:
            why = f"{key_file!r} is not a PEM private key ({_openssl(exc)})"
        return [ConfigError(key_path, why)]
    except OSError as exc:
        return [ConfigError(key_path, f"cannot read {key_file!r}: {_openssl(exc)}")]
    return []
