"""The Prometheus ``remote_write`` keys rwrouter has no setting of its own for (pure): what
each one means here.

A block copied from a Prometheus's ``/api/v1/status/config`` spells out defaults a
``prometheus.yml`` rarely writes (``follow_redirects: true``, ``enable_http2: false`` on
3.x and ``true`` on 2.x, ``protobuf_message``, ``separator: ;`` in every rule, ...). Every
key of Prometheus's ``remote_write`` is therefore one of:

- implemented: a setting of :class:`~rwrouter.config.model.DestinationConfig` and its
  sections (``url``, ``queue_config``, ...), read by :mod:`rwrouter.config.destinations`;
- a :class:`Flag` here: a boolean whose one value means what rwrouter does anyway (read
  silently) and whose other value is accepted with a :class:`~rwrouter.config.model.ConfigNote`
  saying what applies instead, or refused with what to write;
- :data:`REFUSED` here: refused at load with a reason that says what to do.

Sources of the key lists and defaults: Prometheus 3.16 ``config/config.go``
(``RemoteWriteConfig``, ``DefaultRemoteWriteHTTPClientConfig``), prometheus/common 0.72
``config/http_config.go`` (``HTTPClientConfig``, ``ProxyConfig``, ``TLSConfig``,
``BasicAuth``, ``Authorization``), prometheus/sigv4 0.5 (``SigV4Config``). A unit test
checks each against the dumps of the two Prometheus versions the project runs
(``tests/testdata/promdump/``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rwrouter.config.model import ConfigNote
from rwrouter.config.values import Fields
from rwrouter.errors import ConfigError

__all__ = [
    "FLAGS",
    "GO_TLS_VERSIONS",
    "PROMETHEUS_ONLY",
    "REFUSED",
    "Flag",
    "flag_keys",
    "notes",
    "read_flags",
]


@dataclass(frozen=True, slots=True)
class Flag:
    """A boolean Prometheus key with no rwrouter setting: ``same`` is the value that means
    what rwrouter does (read without a word); the other value gets ``note`` (accepted: the
    note says what applies) or, when ``refused`` is set, is refused with that reason."""

    same: bool
    note: str = ""
    refused: str = ""


_AUTH_FILE = (
    "have the token refreshed into a file outside rwrouter and write "
    "`authorization: {credentials_file: FILE}` (read at every attempt)"
)

FLAGS: Mapping[str, Mapping[str, Flag]] = {
    "destination": {
        "follow_redirects": Flag(
            same=False,
            note="rwrouter never follows a redirect (a redirected POST would lose its body): "
            "a 3xx answer is refused for good and kept in the dead-letter store "
            '(reason="3xx"); point url at the final address',
        ),
        "enable_http2": Flag(
            same=False,
            note="rwrouter sends over HTTP/1.1 with keep-alive (aiohttp has no HTTP/2 "
            "client; Prometheus 3's default is false too): the same requests arrive",
        ),
        "round_robin_dns": Flag(
            same=True,
            note="rwrouter always spreads new connections over the addresses the host "
            "resolves to (aiohttp's DNS cache starts each at the next address), as "
            "round_robin_dns: true does",
        ),
        "failed_request_logging": Flag(
            same=False,
            note="rwrouter logs every refused batch with the start of the answer and keeps "
            "it in the dead-letter store (`rwrouter rejected list`); it logs no request "
            "bodies",
        ),
        "convert_nhcb_to_classic": Flag(
            same=False,
            refused="rwrouter forwards native histograms as it receives them: set "
            "convert_nhcb_to_classic: true on the remote_write of the Prometheus that "
            "sends to rwrouter, or send_native_histograms: false here to leave them out",
        ),
        "proxy_from_environment": Flag(
            same=False,
            refused="rwrouter does not read HTTP_PROXY/HTTPS_PROXY/NO_PROXY: write the "
            "proxy as proxy_url (or remove the key to connect directly)",
        ),
    },
    "sigv4": {
        "use_fips_sts_endpoint": Flag(
            same=False,
            refused="set AWS_USE_FIPS_ENDPOINT=true in rwrouter's environment instead "
            "(botocore then calls the FIPS endpoints, STS included)",
        ),
    },
}
"""Section -> key -> :class:`Flag`. Sections: ``destination`` (a ``remote_write`` entry),
``sigv4``."""

REFUSED: Mapping[str, Mapping[str, str]] = {
    "destination": {
        "oauth2": f"OAuth 2.0 is not supported by rwrouter: {_AUTH_FILE}",
        "azuread": f"Azure AD authentication is not supported by rwrouter: {_AUTH_FILE}",
        "google_iam": f"Google IAM authentication is not supported by rwrouter: {_AUTH_FILE}",
        "bearer_token": "deprecated in Prometheus, not read by rwrouter: write "
        "`authorization: {credentials: ...}` (${VAR} is expanded in it)",
        "bearer_token_file": "deprecated in Prometheus, not read by rwrouter: write "
        "`authorization: {credentials_file: ...}`",
        "http_headers": "not supported by rwrouter: write the headers under `headers` "
        "(name: value; ${VAR} is expanded in values)",
        "no_proxy": "not supported by rwrouter (one proxy_url per destination): remove it, "
        "and remove proxy_url too if this destination's host should be reached directly",
        "proxy_connect_header": "not supported by rwrouter: give the proxy's credentials "
        "in proxy_url (http://user:password@proxy:3128)",
        "enable_compression": "a scrape_configs setting, not a remote_write one (remote "
        "write is always snappy-compressed): remove it",
    },
    "sigv4": {
        "external_id": "not supported by rwrouter: put role_arn and external_id (with "
        "source_profile or credential_source) in an AWS profile and set sigv4.profile "
        "instead of role_arn",
        "session_name": "not supported by rwrouter (its AssumeRole session is named "
        "rwrouter): put role_arn and role_session_name in an AWS profile and set "
        "sigv4.profile instead of role_arn",
        "tags": "not supported by rwrouter (its AssumeRole session has no tags): remove it",
    },
    "basic_auth": {
        "username_file": "not supported by rwrouter: write username (${VAR} is expanded in it)",
        "username_ref": "secret references are not supported by rwrouter: write username",
        "password_ref": "secret references are not supported by rwrouter: use password_file",
    },
    "authorization": {
        "credentials_ref": "secret references are not supported by rwrouter: use credentials_file",
    },
    "tls_config": {
        **{
            key: f"inline PEM is not supported by rwrouter: write it to a file and set {key}_file"
            for key in ("ca", "cert", "key")
        },
        **{
            f"{key}_ref": f"secret references are not supported by rwrouter: use {key}_file"
            for key in ("ca", "cert", "key")
        },
        "max_version": "not supported by rwrouter (it negotiates up to TLS 1.3; "
        "min_version is supported): remove it",
    },
}
"""Section -> key -> the reason it is refused, with what to write instead."""

PROMETHEUS_ONLY: Mapping[str, tuple[str, ...]] = {
    "top": (
        "scrape_configs",
        "scrape_config_files",
        "rule_files",
        "alerting",
        "remote_read",
        "tracing",
        "otlp",
        "runtime",
    ),
    "global": (
        "scrape_interval",
        "scrape_timeout",
        "scrape_protocols",
        "evaluation_interval",
        "rule_query_offset",
        "query_log_file",
        "scrape_failure_log_file",
        "body_size_limit",
        "sample_limit",
        "label_limit",
        "label_name_length_limit",
        "label_value_length_limit",
        "target_limit",
        "keep_dropped_targets",
        "always_scrape_classic_histograms",
        "convert_classic_histograms_to_nhcb",
        "scrape_native_histograms",
        "extra_scrape_metrics",
    ),
    "storage": ("tsdb", "exemplars"),
}
"""Section of rwrouter's file (``top``, and the two that share a Prometheus section's name,
``global`` and ``storage``) -> the keys a Prometheus configuration has there that rwrouter
does not read: a pasted ``prometheus.yml`` or ``/api/v1/status/config`` dump gets "a
Prometheus setting" for each, not "unknown key". Sources: Prometheus 3.16
``config/config.go`` (``Config``, ``GlobalConfig``, ``StorageConfig``: ``tsdb``,
``exemplars``); ``tests/integration/test_prometheus_paste.py`` checks them against the dump
of a real Prometheus 3 with every section set."""

GO_TLS_VERSIONS: Mapping[int, str] = {769: "TLS10", 770: "TLS11", 771: "TLS12", 772: "TLS13"}
"""``tls_config.min_version`` as Prometheus 2.x's ``/api/v1/status/config`` writes it: Go's
``crypto/tls`` constant (``tls.VersionTLS12`` = 0x0303 = 771; prometheus/common before its
``TLSVersion.MarshalYAML``), which Prometheus itself does not read back. rwrouter reads it
as the name, with a note."""

_DUMP_OMITS_FALSE = {
    "send_exemplars": "exemplars",
    "send_native_histograms": "native histograms",
}


def flag_keys(section: str) -> tuple[str, ...]:
    """The :data:`FLAGS` keys of ``section`` (none for a section without any)."""
    return tuple(FLAGS.get(section, {}))


def read_flags(f: Fields, section: str) -> None:
    """Check the :data:`FLAGS` keys of ``section`` present in ``f``: a boolean each, and not
    a refused value. Raises ConfigError naming the key (``expected true or false``, or the
    flag's reason)."""
    for key, flag in FLAGS.get(section, {}).items():
        if f.has(key) and f.boolean(key, flag.same) != flag.same and flag.refused:
            raise ConfigError(f.at(key), flag.refused)


def notes(raw: object, path: str) -> tuple[ConfigNote, ...]:
    """The notes of the ``remote_write`` list ``raw`` at ``path`` (already validated by
    :func:`rwrouter.config.destinations.parse_destinations`), in the order of the file:
    its :data:`FLAGS` set to their noted value, and :func:`_dumped_defaults`."""
    found: list[ConfigNote] = []
    for i, item in enumerate(raw if isinstance(raw, list) else ()):
        if not isinstance(item, dict) or not all(isinstance(k, str) for k in item):
            continue  # refused by parse_destinations, with the other mistakes
            continue
        f = Fields(item, f"{path}[{i}]", known=tuple(item))
        found += _flag_notes(f, "destination") + _dumped_defaults(f)
        sigv4 = f.raw("sigv4")
        if isinstance(sigv4, dict):
            found += _flag_notes(Fields(sigv4, f.at("sigv4"), known=tuple(sigv4)), "sigv4")
        found += _go_tls_version(f)
    return tuple(found)


def _go_tls_version(f: Fields) -> tuple[ConfigNote, ...]:
    """The note of a ``tls_config.min_version`` written as a number (:data:`GO_TLS_VERSIONS`)."""
    tls = f.raw("tls_config")
    number = tls.get("min_version") if isinstance(tls, dict) else None
    if not isinstance(number, int) or number not in GO_TLS_VERSIONS:
        return ()
    name = GO_TLS_VERSIONS[number]
    return (
        ConfigNote(
            f"{f.at('tls_config')}.min_version",
            f"{number} is Go's number for {name}, as Prometheus 2.x's /api/v1/status/config "
            f"writes it: read as {name} (write {name}: Prometheus does not read the number)",
        ),
    )


def _flag_notes(f: Fields, section: str) -> tuple[ConfigNote, ...]:
    """The notes of the :data:`FLAGS` keys of ``section`` set in ``f`` (read by
    :func:`read_flags` first) to their accepted other value."""
    return tuple(
        ConfigNote(f.at(key), flag.note)
        for key, flag in FLAGS.get(section, {}).items()
        if f.has(key) and f.raw(key) != flag.same and flag.note
    )


def _dumped_defaults(f: Fields) -> tuple[ConfigNote, ...]:
    """Notes for a destination ``f`` that Prometheus wrote (``/api/v1/status/config`` always
    writes ``follow_redirects``, a ``prometheus.yml`` rarely does) without
    ``send_exemplars`` or ``send_native_histograms``: that dump omits ``false``, so the
    Prometheus did not send them, while rwrouter's default (``true``) forwards them."""
    if not f.has("follow_redirects"):
        return ()
    return tuple(
        ConfigNote(
            f.at(key),
            f"not set: rwrouter forwards the {what} it receives (its default is true); "
            f"a block copied from /api/v1/status/config omits {key}: false, so the "
            f"Prometheus it came from did not send them: write {key}: false to keep that",
        )
        for key, what in _DUMP_OMITS_FALSE.items()
        if not f.has(key) and key not in f.nulls
    )
