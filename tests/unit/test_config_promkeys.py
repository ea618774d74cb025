"""Pasting a Prometheus ``remote_write`` block (issue 17, item 3): every key of Prometheus's
``remote_write`` is implemented, accepted with a note saying what applies, or refused with
what to write instead (:mod:`rwrouter.config.promkeys`); the blocks real Prometheus 3 and
2.42 wrote (``tests/testdata/promdump/``, made by ``tests/integration/
test_prometheus_paste.py``) load with the notes they should get.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rwrouter.config import DestinationConfig, parse_config
from rwrouter.config.promkeys import FLAGS, REFUSED
from rwrouter.errors import ConfigError
from tests.support.promdump import EXPECTED_NOTES, FIXTURES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
URL = "http://127.0.0.1:9999/api/v1/write"
IMPLEMENTED, NOTED, REFUSES = "implemented", "accepted with a note", "refused"

# Where a section's keys go in a destination, and what else it needs to be valid.
_BASES: dict[str, tuple[str | None, dict[str, Any]]] = {
    "destination": (None, {}),
    "sigv4": ("sigv4", {"region": "us-east-1"}),
    "basic_auth": ("basic_auth", {"username": "u"}),
    "authorization": ("authorization", {"credentials": "t"}),
    "tls_config": ("tls_config", {}),
    "queue_config": ("queue_config", {}),
    "metadata_config": ("metadata_config", {}),
    "rule": ("write_relabel_configs", {"source_labels": ["a"], "target_label": "b"}),
}

# Every key of Prometheus 3.16's remote_write with its sections: config/config.go
# (RemoteWriteConfig, QueueConfig, MetadataConfig), prometheus/common 0.72
# config/http_config.go (HTTPClientConfig, ProxyConfig, BasicAuth, Authorization, TLSConfig),
# prometheus/sigv4 0.5 (SigV4Config), model/relabel (Config).
PROMETHEUS_KEYS = {
    "destination": (
        "url remote_timeout headers write_relabel_configs name send_exemplars "
        "send_native_histograms round_robin_dns protobuf_message failed_request_logging "
        "queue_config metadata_config sigv4 azuread google_iam convert_nhcb_to_classic "
        "basic_auth authorization oauth2 bearer_token bearer_token_file tls_config "
        "follow_redirects enable_http2 proxy_url no_proxy proxy_from_environment "
        "proxy_connect_header http_headers"
    ),
    "queue_config": (
        "capacity max_shards min_shards max_samples_per_send batch_send_deadline "
        "min_backoff max_backoff retry_on_http_429 sample_age_limit"
    ),
    "metadata_config": "send send_interval max_samples_per_send",
    "sigv4": (
        "region access_key secret_key profile role_arn external_id session_name tags "
        "use_fips_sts_endpoint service_name"
    ),
    "basic_auth": "username username_file username_ref password password_file password_ref",
    "authorization": "type credentials credentials_file credentials_ref",
    "tls_config": (
        "ca cert key ca_file cert_file key_file ca_ref cert_ref key_ref server_name "
        "insecure_skip_verify min_version max_version"
    ),
    "rule": "source_labels separator regex modulus target_label replacement action",
}


@dataclass(frozen=True)
class Case:
    """``entries`` (key -> value) set in ``section`` of a destination, and the outcome:
    ``text`` is in the note or the refusal; ``check`` reads the parsed destination."""

    section: str
    entries: dict[str, Any]
    outcome: str
    text: str = ""
    check: Callable[[DestinationConfig], bool] | None = None

    @property
    def key(self) -> str:
        return next(iter(self.entries))


def _c(section: str, outcome: str, text: str = "", check: Any = None, **entries: Any) -> Any:
    case = Case(section, entries, outcome, text, check)
    value = next(iter(entries.values()))
    shown = str(value).lower() if isinstance(value, bool | int) else type(value).__name__
    return pytest.param(case, id=f"{section}.{case.key}={shown}-{outcome.split()[0]}")


IMPL, NOTE, REF = IMPLEMENTED, NOTED, REFUSES
CASES = [
    # A remote_write entry's own keys.
    _c("destination", IMPL, url=URL),
    _c("destination", IMPL, check=lambda d: d.name == "ws", name="ws"),
    _c("destination", IMPL, check=lambda d: d.remote_timeout == 20, remote_timeout="20s"),
    _c("destination", IMPL, headers={"X-Team": "gpu"}),
    _c("destination", IMPL, write_relabel_configs=[{"regex": "pod_uid", "action": "labeldrop"}]),
    _c("destination", IMPL, check=lambda d: not d.send_exemplars, send_exemplars=False),
    _c("destination", IMPL, send_native_histograms=True),
    _c("destination", IMPL, protobuf_message="io.prometheus.write.v2.Request"),
    _c("destination", IMPL, queue_config={"max_shards": 10}),
    _c("destination", IMPL, metadata_config={"send": False}),
    _c("destination", IMPL, sigv4={"region": "us-east-1"}),
    _c("destination", IMPL, basic_auth={"username": "u", "password_file": "p"}),
    _c("destination", IMPL, authorization={"credentials_file": "t"}),
    _c("destination", IMPL, tls_config={"insecure_skip_verify": True}),
    _c("destination", IMPL, proxy_url="http://127.0.0.1:3128"),
    _c("destination", IMPL, follow_redirects=False),
    _c("destination", NOTE, "never follows a redirect", follow_redirects=True),
    _c("destination", REF, "expected true or false", follow_redirects="yes"),
    _c("destination", IMPL, enable_http2=False),
    _c("destination", NOTE, "HTTP/1.1", enable_http2=True),
    _c("destination", IMPL, round_robin_dns=True),
    _c("destination", NOTE, "always spreads new connections", round_robin_dns=False),
    _c("destination", IMPL, failed_request_logging=False),
    _c("destination", NOTE, "dead-letter store", failed_request_logging=True),
    _c("destination", IMPL, convert_nhcb_to_classic=False),
    _c("destination", REF, "Prometheus that sends to rwrouter", convert_nhcb_to_classic=True),
    _c("destination", IMPL, proxy_from_environment=False),
    _c("destination", REF, "write the proxy as proxy_url", proxy_from_environment=True),
    _c("destination", REF, "remove proxy_url too", no_proxy="localhost"),
    _c("destination", REF, "in proxy_url", proxy_connect_header={"X-A": ["b"]}),
    _c("destination", REF, "under `headers`", http_headers={"X-A": {"values": ["b"]}}),
    _c("destination", REF, "authorization: {credentials: ...}", bearer_token="t"),
    _c("destination", REF, "authorization: {credentials_file: ...}", bearer_token_file="t"),
    _c("destination", REF, "credentials_file", oauth2={"client_id": "a", "token_url": URL}),
    _c("destination", REF, "credentials_file", azuread={"cloud": "AzurePublic"}),
    _c("destination", REF, "credentials_file", google_iam={"credentials_file": "f"}),
    _c("destination", REF, "a scrape_configs setting", enable_compression=True),
    # sigv4
    _c("sigv4", IMPL, region="eu-west-1"),
    _c("sigv4", IMPL, access_key="AKID", secret_key="SECRET"),
    _c("sigv4", IMPL, profile="amp"),
    _c("sigv4", IMPL, role_arn="arn:aws:iam::123456789012:role/amp"),
    _c("sigv4", IMPL, check=lambda d: d.sigv4.service == "aps", service="aps"),
    _c("sigv4", IMPL, check=lambda d: d.sigv4.service == "execute-api", service_name="execute-api"),
    _c("sigv4", REF, "at most one of service and service_name", service="aps", service_name="x"),
    _c("sigv4", REF, "set sigv4.profile instead of role_arn", external_id="e"),
    _c("sigv4", REF, "role_session_name in an AWS profile", session_name="s"),
    _c("sigv4", REF, "remove it", tags={"team": "gpu"}),
    _c("sigv4", IMPL, use_fips_sts_endpoint=False),
    _c("sigv4", REF, "AWS_USE_FIPS_ENDPOINT=true", use_fips_sts_endpoint=True),
    # basic_auth
    _c("basic_auth", IMPL, username="rwrouter"),
    _c("basic_auth", IMPL, password="p"),
    _c("basic_auth", IMPL, password_file="p"),
    _c("basic_auth", REF, "write username", username_file="u"),
    _c("basic_auth", REF, "write username", username_ref="u"),
    _c("basic_auth", REF, "use password_file", password_ref="p"),
    # authorization
    _c("authorization", IMPL, type="Bearer"),
    _c("authorization", IMPL, credentials="t"),
    _c("authorization", IMPL, credentials_file="t", credentials=None),
    _c("authorization", REF, "use credentials_file", credentials_ref="t"),
    # tls_config
    _c("tls_config", IMPL, ca_file="ca.pem"),
    _c("tls_config", IMPL, cert_file="c.pem", key_file="k.pem"),
    _c("tls_config", IMPL, server_name="prometheus.internal"),
    _c("tls_config", IMPL, insecure_skip_verify=False),
    _c(
        "tls_config", IMPL, check=lambda d: d.tls_config.min_version == "TLS13", min_version="TLS13"
    ),
    _c(
        "tls_config",
        NOTE,
        "771 is Go's number for TLS12",
        check=lambda d: d.tls_config.min_version == "TLS12",
        min_version=771,
    ),
    _c("tls_config", REF, "expected a string", min_version=770_000),
    *(
        _c("tls_config", REF, f"set {key}_file", **{key: "-----BEGIN"})
        for key in ("ca", "cert", "key")
    ),
    *(
        _c("tls_config", REF, f"use {key}_file", **{f"{key}_ref": "r"})
        for key in ("ca", "cert", "key")
    ),
    _c("tls_config", REF, "min_version is supported", max_version="TLS12"),
    # queue_config and metadata_config: all of Prometheus's keys are rwrouter's too
    _c("queue_config", IMPL, check=lambda d: d.queue_config.capacity == 2500, capacity=2500),
    _c("queue_config", IMPL, max_shards=200),
    _c("queue_config", IMPL, min_shards=2),
    _c("queue_config", IMPL, max_samples_per_send=500),
    _c("queue_config", IMPL, batch_send_deadline="5s"),
    _c("queue_config", IMPL, min_backoff="30ms"),
    _c("queue_config", IMPL, max_backoff="5s"),
    _c("queue_config", IMPL, retry_on_http_429=True),
    _c("queue_config", IMPL, sample_age_limit="50m"),
    _c("metadata_config", IMPL, send=True),
    _c("metadata_config", IMPL, send_interval="1m"),
    _c("metadata_config", IMPL, max_samples_per_send=2000),
    # write_relabel_configs with every default spelled out, as the dumps write them
    _c("rule", IMPL, source_labels=["Hostname"]),
    _c("rule", IMPL, separator=";"),
    _c("rule", IMPL, regex="(.*)"),
    _c("rule", IMPL, modulus=4, action="hashmod"),
    _c("rule", IMPL, target_label="node"),
    _c("rule", IMPL, replacement="$1"),
    _c("rule", IMPL, action="replace"),
]


def _destination(case: Case) -> dict[str, Any]:
    """A destination with ``case.entries`` in its section (a None value removes a key of
    the section's base)."""
    where, base = _BASES[case.section]
    merged = {k: v for k, v in {**base, **case.entries}.items() if v is not None}
    if where is None:
        return {"url": URL, **merged}
    return {"url": URL, where: [merged] if where == "write_relabel_configs" else merged}


def _parse(dest: dict[str, Any]) -> Any:
    return parse_config(yaml.safe_dump({"remote_write": [dest]}), env={})


def _key_path(case: Case) -> str:
    where = _BASES[case.section][0]
    return {
        None: f"remote_write[0].{case.key}",
        "write_relabel_configs": f"remote_write[0].write_relabel_configs[0].{case.key}",
    }.get(where, f"remote_write[0].{where}.{case.key}")


@pytest.mark.parametrize("case", CASES)
def test_each_prometheus_key(case: Case) -> None:
    path = _key_path(case)
    if case.outcome == REFUSES:
        with pytest.raises(ConfigError) as info:
            _parse(_destination(case))
        assert info.value.path.startswith("remote_write[0]")
        assert case.text in str(info.value)
        assert case.key in str(info.value)
        return
    config = _parse(_destination(case))
    notes = {note.path: note.note for note in config.notes}
    if case.outcome == NOTED:
        assert case.text in notes[path]
    else:
        assert path not in notes
    if case.check is not None:
        assert case.check(config.remote_write[0])


def _cases() -> Iterator[Case]:
    for param in CASES:
        (case,) = param.values
        assert isinstance(case, Case)
        yield case


def _covered() -> dict[str, set[tuple[str, object]]]:
    """section -> {(key, outcome)} of the table."""
    found: dict[str, set[tuple[str, object]]] = {}
    for case in _cases():
        for key, value in case.entries.items():
            if value is not None:
                found.setdefault(case.section, set()).add((key, case.outcome))
    return found


def test_every_prometheus_key_has_a_case() -> None:
    covered = _covered()
    missing = [
        f"{section}.{key}"
        for section, keys in PROMETHEUS_KEYS.items()
        for key in keys.split()
        if key not in {k for k, _ in covered.get(section, set())}
    ]
    assert missing == []


def test_every_flag_value_and_refused_key_has_a_case() -> None:
    cases = list(_cases())
    for section, flags in FLAGS.items():
        for key, flag in flags.items():
            values = {c.entries[key] for c in cases if c.section == section and c.key == key}
            assert {True, False} <= values, f"{section}.{key}"
            other = next(c for c in cases if c.key == key and c.entries[key] is (not flag.same))
            assert other.outcome == (REFUSES if flag.refused else NOTED)
    for section, refused in REFUSED.items():
        for key in refused:
            assert any(
                c.section == section and c.key == key and c.outcome == REFUSES for c in cases
            )


def _dumped_keys(block: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    for dest in block:
        for key, value in dest.items():
            yield "destination", key
            if key == "write_relabel_configs":
                yield from (("rule", k) for rule in value for k in rule)
            elif key in _BASES and isinstance(value, dict):
                yield from ((key, k) for k in value)


@pytest.mark.parametrize(
    "generation", [pytest.param(3, id="prometheus-3"), pytest.param(2, id="prometheus-2.42")]
)
def test_every_key_of_a_real_dump_has_a_case(generation: int) -> None:
    block = yaml.safe_load((FIXTURES / f"prometheus-{generation}.yml").read_text())["remote_write"]
    covered = {(section, key) for section, keys in _covered().items() for key, _ in keys}
    assert sorted(set(_dumped_keys(block)) - covered) == []


@pytest.mark.parametrize(
    ("generation", "expected"),
    [
        pytest.param(
            3,
            {
                "workspace": ("prometheus.WriteRequest", "aps", None, 3000.0),
                "self-hosted": ("io.prometheus.write.v2.Request", None, "TLS12", 0.0),
                "mimir": ("prometheus.WriteRequest", None, None, 0.0),
            },
            id="prometheus-3",
        ),
        pytest.param(
            2,
            {
                "workspace": ("prometheus.WriteRequest", "aps", None, 0.0),
                "self-hosted": ("prometheus.WriteRequest", None, "TLS12", 0.0),
                "mimir": ("prometheus.WriteRequest", None, None, 0.0),
            },
            id="prometheus-2.42",
        ),
    ],
)
def test_a_real_dump_loads_with_its_notes(
    generation: int, expected: dict[str, tuple[str, str | None, str | None, float]]
) -> None:
    text = (FIXTURES / f"prometheus-{generation}.yml").read_text()
    config = parse_config(text, env={})
    assert tuple(note.path for note in config.notes) == EXPECTED_NOTES[generation]
    got = {
        d.name: (
            d.protobuf_message,
            d.sigv4.service if d.sigv4 else None,
            d.tls_config.min_version if d.tls_config else None,
            d.queue_config.sample_age_limit,
        )
        for d in config.remote_write
    }
    assert got == expected


@pytest.mark.parametrize(
    ("dest", "noted"),
    [
        pytest.param(
            {"follow_redirects": True},
            ["follow_redirects", "send_exemplars", "send_native_histograms"],
            id="dumped-without-either",
        ),
        pytest.param(
            {"follow_redirects": False, "send_exemplars": True, "send_native_histograms": False},
            [],
            id="dumped-with-both",
        ),
        pytest.param({}, [], id="written-by-hand"),
    ],
)
def test_a_dumped_block_without_send_exemplars_gets_a_note(
    dest: dict[str, Any], noted: list[str]
) -> None:
    """/api/v1/status/config omits ``send_exemplars: false`` (omitempty) but always writes
    ``follow_redirects``: such a block without the key came from a Prometheus that did not
    send exemplars, and rwrouter's default (true) would."""
    config = _parse({"url": URL, **dest})
    assert [note.path.removeprefix("remote_write[0].") for note in config.notes] == noted


def _pasting_section() -> str:
    text = DOCS.read_text()
    start = text.index("### Pasting a Prometheus remote_write block")
    return text[start : text.index("\n## ", start)]


def test_the_docs_give_every_key_its_fate() -> None:
    section = _pasting_section()
    named = {name.rpartition(".")[2] for name in re.findall(r"`([a-z0-9_.]+)(?::[^`]*)?`", section)}
    keys = {key for keys in PROMETHEUS_KEYS.values() for key in keys.split()}
    assert sorted(keys - named) == []
