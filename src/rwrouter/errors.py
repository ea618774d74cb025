"""rwrouter's exceptions.

Every error the package raises on purpose derives from :class:`RwrouterError`; a few keep a
built-in base as well, so code that caught them by it still does::

    RwrouterError
    ├── ConfigError              the configuration is invalid; names the YAML key path
    │   └── ConfigErrors         several of them, each its own ConfigError (check-config)
    ├── RequestError             the sender's mistake; carries the HTTP status to answer (4xx)
    │   ├── DecodeError          400: not a valid snappy-block remote write 1.0 or 2.0 request
    │   ├── TenantError          400: an X-Scope-OrgID header that is not a valid tenant ID
    │   ├── SlowBodyError        408: the body did not arrive within the read timeout
    │   ├── TooLargeError        413: body or declared decoded size over the configured limit
    │   └── UnsupportedError     415: another Content-Encoding or Content-Type
    ├── CredentialsError         no usable credentials for a destination (AWS, or a secret file)
    ├── StorageError             a durable queue could not be written (503: nothing acknowledged)
    ├── QueueInUseError          (also OSError) another process holds a queue directory
    ├── ListenError              (also OSError) the listen address cannot be bound
    ├── TransportError           a destination gave no answer (connection, TLS, DNS, timeout)
    ├── CaptureError             (also ValueError) not an rwrouter capture file
    ├── SeriesError              (also ValueError) an unparsable ``rwrouter relabel --series``
    ├── WorkspaceBackendError    the workspace double's backend Prometheus took no write/answer
    ├── AnswerError              (also ValueError) a store's answer to ``rwrouter compare`` is
    │                            not a Prometheus range query result (or an error answer)
    ├── RedirectError            the router asked by ``rwrouter reload``/``audit --url``
    │                            answered a redirect, not followed (the credential stays)
    └── PrometheusNotFoundError  (also RuntimeError) no ``prometheus`` binary for the demo

A :class:`RequestError` never becomes a 5xx answer, and it never affects the next request.
The commands (:mod:`rwrouter.cli`) print any RwrouterError as one line and exit 1, a
ConfigError with exit 2.

Outside the tree on purpose:

- :class:`InvariantError` (a RuntimeError): an internal invariant does not hold, a bug in
  rwrouter. It is not an RwrouterError, so the handlers that turn those into an answer or a
  one-line message do not dress a bug up as the sender's or the operator's mistake.
- Control flow that never leaves the package, hence private to its module and not an error:
  ``rwrouter.pipeline.fanout.Stale`` (a reload swapped the destinations while a request was
  decoded: it is routed again), ``rwrouter.server.decoders.Busy`` (a decoding lane is full:
  the server answers 503), ``rwrouter.server.bodies.ClientGone`` (the sender closed the
  connection before its answer: counted, nothing kept),
  ``rwrouter.server.bodies.ReadWaitTimeout`` (no read of the body came in time: 503) and
  ``rwrouter.server.frontdoor.Refused`` (the front door answers 401 or 403 itself: counted,
  the request never reaches its handler), ``rwrouter.send.stopping.HandedOver`` (a batch
  stops retrying when a reload hands its destination's queue to a successor, which sends it).
"""

from __future__ import annotations


class RwrouterError(Exception):
    """Base of every error rwrouter raises on purpose."""


class ConfigError(RwrouterError):
    """The configuration is invalid (:mod:`rwrouter.config`; also :mod:`rwrouter.auth.schemes`
    for a ``sigv4`` block without a region anywhere).

    ``path`` is the YAML key path of the offending value, e.g.
    ``remote_write[1].write_relabel_configs[2].regex``; ``str()`` gives ``"<path>: <reason>"``.
    ``rwrouter run`` and ``rwrouter check-config`` exit 2; a reload (SIGHUP, ``POST
    /-/reload``: 500) keeps the running configuration.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason)


class ConfigErrors(ConfigError):
    """Several independent mistakes in one configuration (:mod:`rwrouter.config` collects
    them per section, per destination and per mapping's unknown keys), in the order of the
    file: ``errors`` holds each as its own ConfigError (never a ConfigErrors). ``path`` and
    ``reason`` are the first one's; ``str()`` joins all with ``"; "`` (one log line);
    ``rwrouter check-config`` and ``rwrouter run`` print one line each."""

    def __init__(self, errors: list[ConfigError]) -> None:
        flat = [e for error in errors for e in getattr(error, "errors", (error,))]
        if not flat:
            raise InvariantError("ConfigErrors needs at least one error")
        self.errors: tuple[ConfigError, ...] = tuple(flat)
        RwrouterError.__init__(self, "; ".join(map(str, flat)))
        self.path, self.reason = flat[0].path, flat[0].reason

    @staticmethod
    def of(errors: list[ConfigError]) -> ConfigError:
        """The one error itself, or a ConfigErrors of several (``errors`` not empty)."""
        return errors[0] if len(errors) == 1 else ConfigErrors(errors)


class RequestError(RwrouterError):
    """A remote write request the router refuses; ``status`` is the 4xx status to answer.

    The message is one line, meant for the sender (it is the response body). Raised while
    receiving (:mod:`rwrouter.server.app`, :mod:`rwrouter.protocol`), decoding
    (:mod:`rwrouter.wire`, :mod:`rwrouter.routing`) and admitting (:mod:`rwrouter.pipeline`).
    """

    status = 400


class DecodeError(RequestError):
    """400: undecodable snappy, bad protobuf, invalid UTF-8, duplicate label names, empty body
    (:mod:`rwrouter.wire`, :mod:`rwrouter.routing.scan`)."""

    status = 400


class TenantError(RequestError):
    """400: an ``X-Scope-OrgID`` header that is not a valid tenant ID
    (:func:`rwrouter.config.tenant.check_tenant`)."""

    status = 400


class SlowBodyError(RequestError):
    """408: the body did not arrive within ``server.read_timeout`` (:mod:`rwrouter.server.app`)."""

    status = 408


class TooLargeError(RequestError):
    """413: the body, or the decoded size its snappy header declares, is over the limit; or a
    series alone is over a destination's ``max_request_bytes`` (:mod:`rwrouter.server.app`,
    :mod:`rwrouter.wire`, :mod:`rwrouter.pipeline.fanout`)."""

    status = 413


class UnsupportedError(RequestError):
    """415: a Content-Encoding or Content-Type the router does not accept
    (:func:`rwrouter.protocol.message_of`)."""

    status = 415


class CredentialsError(RwrouterError):
    """No usable credentials: no AWS credentials found, bad settings, a failed refresh (STS,
    instance metadata, ...), or an unreadable ``password_file``/``credentials_file``
    (:mod:`rwrouter.auth.credentials`, :mod:`rwrouter.auth.schemes`).

    The message says which source was tried; the underlying error is the ``__cause__``. At
    start-up ``rwrouter run`` exits 1; while sending, the attempt fails as one without an
    answer would (``rwrouter_sent_requests_total{code="error"}``) and is retried.
    """


class StorageError(RwrouterError):
    """A destination's disk queue could not be written (disk full, I/O error), or the
    destination is stopped (:mod:`rwrouter.pipeline`). The request is answered 503 and not
    acknowledged; the underlying OSError, if any, is the ``__cause__``."""


class QueueInUseError(RwrouterError, OSError):
    """Another process holds the lock of a queue directory (:func:`rwrouter.queue.segments.
    take_lock`): each rwrouter process needs its own ``storage.path``. ``rwrouter run`` exits
    1; a reload that adds the destination fails (500) and keeps the running configuration."""


class ListenError(RwrouterError, OSError):
    """``server.listen_address`` cannot be bound (the port is taken, the address is not the
    host's, a privileged port): :meth:`rwrouter.server.runner.RouterServer.start` raises it
    with the address and the reason in one line, after stopping what it had started;
    ``rwrouter run`` exits 1. The OSError of the bind is the ``__cause__``."""


class TransportError(RwrouterError):
    """No answer from a destination: connection refused or reset, TLS failure, DNS failure, or
    timeout (:class:`rwrouter.send.transport.Transport`). The send is retried with backoff
    (``rwrouter_retries_total{reason="network"}``); the request's sender never sees it."""


class CaptureError(RwrouterError, ValueError):
    """Not a capture file, or another version of one (:mod:`rwrouter.audit.capture`; also
    :mod:`rwrouter.server.capture` for an existing file it would append to).
    ``rwrouter capture`` and ``rwrouter audit --capture`` exit 1 with the message."""


class SeriesError(RwrouterError, ValueError):
    """An unparsable ``--series`` of ``rwrouter relabel`` (:func:`rwrouter.relabel.series.
    parse_series`): the message says what and where. The command exits 2."""


class WorkspaceBackendError(RwrouterError):
    """The Prometheus behind a workspace of the demo's workspace double did not take a write
    or did not answer a query (:mod:`rwrouter.doubles.workspace_backend`). ``status``: its
    HTTP status, 0 when it did not answer; ``timed_out``: its time bound passed first. The
    double turns it into an AWS-style 503/504 (400 when it refused a write)."""

    def __init__(self, message: str, *, status: int = 0, timed_out: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.timed_out = timed_out


class AnswerError(RwrouterError, ValueError):
    """A store's answer to a ``rwrouter compare`` query that is not a Prometheus API range
    query result: an error answer (its ``errorType`` and ``error``), another result type, a
    malformed one, or one over the size bound. The text says which
    (:mod:`rwrouter.compare.parity`); the command reports it as that store's failure."""


class RedirectError(RwrouterError):
    """The router asked by ``rwrouter reload --url`` or ``rwrouter audit --url`` answered a
    redirect, which is not followed (:func:`rwrouter.cli.audit.open_router`): the request
    carries the credential of ``--http.config.file``, for the router only. ``location``: where
    the answer pointed; the message reads ``redirected to HOST:PORT (not followed)``. The
    commands print it after the address asked and exit 1."""

    def __init__(self, message: str, *, location: str) -> None:
        super().__init__(message)
        self.location = location


class PrometheusNotFoundError(RwrouterError, RuntimeError):
    """The ``prometheus`` binary is not on PATH (Debian package ``prometheus``;
    :func:`rwrouter.doubles.prometheus.prometheus_binary`). ``rwrouter demo`` installs it when
    run as root, else says how and exits 2; the test suites skip what needs it (fail on CI)."""


class InvariantError(RuntimeError):
    """An internal invariant does not hold: a bug in rwrouter, never the sender's or the
    configuration's fault. Raised where an ``assert`` would be (``python -O`` removes those);
    the message names the invariant. Deliberately not an :class:`RwrouterError`."""
