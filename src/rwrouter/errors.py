"""rwrouter's exceptions.

Every error the router raises derives from :class:`RwrouterError`::

    RwrouterError
    ├── ConfigError            the configuration is invalid; names the YAML key path
    ├── RequestError           the sender's mistake; carries the HTTP status to answer (4xx)
    │   ├── DecodeError        400: body is not a valid snappy-block remote write 1.0 request
    │   ├── SlowBodyError      408: the body did not arrive within the read timeout
    │   ├── TooLargeError      413: body or declared decoded size over the configured limit
    │   └── UnsupportedError   415: another Content-Encoding or Content-Type
    ├── CredentialsError       no usable credentials for a destination (AWS, or a secret file)
    └── StorageError           a durable queue could not be written (503: nothing acknowledged)

A :class:`RequestError` never becomes a 5xx answer, and it never affects the next request.
"""

from __future__ import annotations


class RwrouterError(Exception):
    """Base of every rwrouter error."""


class ConfigError(RwrouterError):
    """The configuration is invalid.

    ``path`` is the YAML key path of the offending value, e.g.
    ``remote_write[1].write_relabel_configs[2].regex``; ``str()`` gives ``"<path>: <reason>"``.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason)


class RequestError(RwrouterError):
    """A remote write request the router refuses; ``status`` is the 4xx status to answer.

    The message is one line, meant for the sender (it is the response body).
    """

    status = 400


class DecodeError(RequestError):
    """400: undecodable snappy, bad protobuf, invalid UTF-8, duplicate label names, empty body."""

    status = 400


class SlowBodyError(RequestError):
    """408: the body did not arrive within ``server.read_timeout``."""

    status = 408


class TooLargeError(RequestError):
    """413: the body, or the decoded size its snappy header declares, is over the limit."""

    status = 413


class UnsupportedError(RequestError):
    """415: a Content-Encoding or Content-Type the router does not accept."""

    status = 415


class CredentialsError(RwrouterError):
    """No usable credentials: no AWS credentials found, bad settings, a failed refresh (STS,
    instance metadata, ...), or an unreadable ``password_file``/``credentials_file``.

    The message says which source was tried; the underlying error is the ``__cause__``.
    """


class StorageError(RwrouterError):
    """A destination's disk queue could not be written (disk full, I/O error). The request is
    answered 503 and not acknowledged; the underlying OSError is the ``__cause__``."""

