"""rwrouter.config: one bad file per rule (Prometheus config/testdata style), good files, shipped
configs, ${VAR} expansion, value syntax, and describe_config never printing a secret."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from rwrouter.config import (
    Authorization,
    BasicAuth,
    Config,
    MetadataConfig,
    OnSeriesLimit,
    PriceTier,
    QueueConfig,
    Secret,
    ServerConfig,
    SigV4Config,
    StorageConfig,
    TLSConfig,
    describe_config,
    format_duration,
    format_size,
    load_config,
    parse_config,
    parse_duration,
    parse_size,
)
from rwrouter.config.model import (
    AuditConfig,
    DestinationConfig,
    Fsync,
    HaDedupConfig,
    OnFull,
    RelabelCacheConfig,
)
from rwrouter.errors import ConfigError, ConfigErrors

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = ROOT / "tests" / "testdata" / "config"
ENV = {"AWS_REGION": "us-east-1"}
RW0 = "remote_write[0]"

# file stem -> substrings the error must contain (the first one is the key path).
BAD = {
    "unknown_top_level_key": ["remote_writes: unknown key", "did you mean 'remote_write'"],
    "unknown_destination_key": [f"{RW0}.urll: unknown key", "did you mean 'url'"],
    "unknown_server_key": ["server.listen_port: unknown key"],
    "unknown_queue_key": [f"{RW0}.queue_config.max_retries: unknown key"],
    "misplaced_queue_key": [
        f"{RW0}.max_samples_per_second: unknown key here",
        "`max_samples_per_second` belongs in `queue_config`",
    ],
    "prometheus_top_level_key": ["scrape_configs: a Prometheus setting, not read by rwrouter"],
    "global_scrape_interval": ["global.scrape_interval: a Prometheus setting, not read by"],
    "global_bad_validation_scheme": [
        "global.metric_name_validation_scheme: expected one of utf8, legacy, got 'utf-8'"
    ],
    "global_escaping_scheme": [
        "global.metric_name_escaping_scheme: a Prometheus scrape setting",
        "remote_write[].metric_name_escaping_scheme",
    ],
    "secret_placeholder": [
        f"{RW0}.sigv4.secret_key: is <secret>, the placeholder Prometheus",
        "put the real value or ${VAR}",
    ],
    "password_placeholder": [
        f"{RW0}.basic_auth.password: is <secret>",
        "put the real value, ${VAR} or password_file",
    ],
    "lone_surrogate": [f"{RW0}.headers.X-Team: invalid UTF-8: a lone surrogate \\ud800"],
    "protobuf_message_unknown": [
        f"{RW0}.protobuf_message: expected one of prometheus.WriteRequest, "
        "io.prometheus.write.v2.Request, got 'io.prometheus.write.v3.Request'"
    ],
    "escaping_scheme_unknown": [
        f"{RW0}.metric_name_escaping_scheme: expected one of allow-utf-8, underscores, dots, "
        "values, got 'utf8'"
    ],
    "no_destinations": ["remote_write: at least one destination is required"],
    "remote_write_not_a_list": ["remote_write: expected a list of destinations, got a mapping"],
    "destination_not_a_mapping": [f"{RW0}: expected a mapping, got the string"],
    "missing_url": [f"{RW0}.url: is required"],
    "bad_url_scheme": [f"{RW0}.url: expected an http:// or https:// URL", "ftp://"],
    "url_with_credentials": [f"{RW0}.url: credentials in the URL are not supported"],
    "relabel_bad_regex": ["remote_write[1].write_relabel_configs[2].regex: ", "missing )"],
    "global_relabel_bad_action": ["relabel_configs[0].action: ", "keepp"],
    "sigv4_and_basic_auth": [f"{RW0}.basic_auth: cannot be combined with sigv4"],
    "sigv4_access_key_without_secret_key": [
        f"{RW0}.sigv4.secret_key: access_key and secret_key must be set together"
    ],
    "sigv4_empty": [f"{RW0}.sigv4: is empty", "sigv4: {}"],
    "reserved_header": [f"{RW0}.headers.Content-Type: reserved header"],
    "authorization_header": [f"{RW0}.headers.Authorization: reserved header", "basic_auth"],
    "amz_header": [f"{RW0}.headers.X-Amz-Security-Token: reserved header"],
    "scope_orgid_with_sigv4": [f"{RW0}.headers.X-Scope-OrgID: must not be sent to a sigv4"],
    "unsigned_header_with_sigv4": [
        f"{RW0}.headers.traceparent: cannot be sent to a sigv4 destination"
    ],
    "sigv4_profile_and_access_key": [f"{RW0}.sigv4.profile: profile and access_key are mutually"],
    "authorization_credentials_line_break": [
        f"{RW0}.authorization.credentials: must not contain a line break (CR or LF)"
    ],
    "destination_name_too_long": [
        f"{RW0}.name: too long: its queue directory name",
        "256 bytes",
        "NAME_MAX",
    ],
    # headers: not a mapping (0, false, "" were read as no headers)
    "headers_zero": [f"{RW0}.headers: expected a mapping of header name to value, got an integer"],
    "headers_false": [f"{RW0}.headers: expected a mapping of header name to value, got a boolean"],
    "headers_empty_string": [f"{RW0}.headers: expected a mapping", "got the string"],
    "headers_list": [f"{RW0}.headers: expected a mapping of header name to value, got a list"],
    "headers_false_pasted_prometheus_block": [f"{RW0}.headers: expected a mapping", "a boolean"],
    "header_value_not_a_string": [
        f"{RW0}.headers.X-Scope-OrgID: expected a string, got an integer <secret> (quote it)"
    ],
    "duplicate_destination_name": [
        "remote_write[1].name: duplicate destination name 'primary'",
        "remote_write[0].name",
    ],
    "empty_destination_name": [f"{RW0}.name: must not be empty"],
    "unset_env_var": [f"{RW0}.url: environment variable AMP_WORKSPACE_ID is not set"],
    "bad_duration": [f"{RW0}.remote_timeout: not a valid duration string: '30'"],
    "zero_duration": [f"{RW0}.queue_config.batch_send_deadline: must be a positive duration"],
    "metadata_bad_send_interval": [
        f"{RW0}.metadata_config.send_interval: not a valid duration string: '1 minute'"
    ],
    "not_supported_oauth2": [
        f"{RW0}.oauth2: OAuth 2.0 is not supported by rwrouter",
        "credentials_file",
    ],
    "prometheus_proxy_from_environment": [
        f"{RW0}.proxy_from_environment: rwrouter does not read HTTP_PROXY",
        "proxy_url",
    ],
    "queue_negative_sample_age_limit": [
        f"{RW0}.queue_config.sample_age_limit: not a valid duration string: '-5m'"
    ],
    "not_supported_tls_inline_cert": [
        f"{RW0}.tls_config.ca: inline PEM is not supported by rwrouter",
        "ca_file",
    ],
    "queue_max_shards_zero": [f"{RW0}.queue_config.max_shards: must be >= 1"],
    "queue_min_shards_over_max": [f"{RW0}.queue_config.min_shards: must be <= max_shards (5)"],
    "queue_min_backoff_over_max": [f"{RW0}.queue_config.min_backoff: must be <= max_backoff"],
    "queue_capacity_not_an_integer": [
        f"{RW0}.queue_config.capacity: expected an integer, got the string 'lots'"
    ],
    "bool_not_a_boolean": [f"{RW0}.send_exemplars: expected true or false, got the string 'yes'"],
    "string_not_a_string": [f"{RW0}.name: expected a string, got an integer 123"],
    "duplicate_yaml_key": [f"{RW0}.url: duplicate key (lines 2 and 3)"],
    "invalid_yaml": ["invalid YAML", "invalid_yaml.bad.yml", "line 3"],
    "all_destinations_fallback": [
        f"{RW0}.fallback: at least one destination must not be a fallback"
    ],
    "series_limit_zero": [f"{RW0}.series_limit: must be >= 1"],
    "series_limit_missing": [f"{RW0}.on_series_limit: needs series_limit"],
    "series_limit_bad_action": [
        f"{RW0}.on_series_limit: expected one of fallback, drop, got 'divert'"
    ],
    "series_limit_no_fallback": [
        f"{RW0}.on_series_limit: fallback needs a destination with fallback: true that is not"
    ],
    "series_limit_fallback_on_fallback": [
        "remote_write[1].on_series_limit: a fallback destination's budget can only drop"
    ],
    "series_limit_fallback_only_shadow": [
        f"{RW0}.on_series_limit: fallback needs a destination with fallback: true that is not"
    ],
    "series_limit_empty": [f"{RW0}.series_limit: is empty"],
    "series_limit_shadow": ["remote_write[1].series_limit: a shadow destination sends nothing"],
    "series_limit_near_quota": [
        f"{RW0}.series_limit: 46000000 is within 10% of the workspace's limit of 50000000",
        "series_limit_near_quota: true",
    ],
    "series_limit_over_quota": [
        f"{RW0}.series_limit: 1000001 is over the workspace's limit of 1000000"
    ],
    "series_window_zero": [f"{RW0}.series_window: must be"],
    "bad_listen_address": ["server.listen_address: expected host:port", "'9250'"],
    "bad_size": ["server.max_request_bytes: expected a size in bytes", "'32 megabytes'"],
    "authorization_credentials_and_file": [
        f"{RW0}.authorization: exactly one of credentials and credentials_file"
    ],
    "authorization_type_basic": [f"{RW0}.authorization.type: ", "use basic_auth"],
    "basic_auth_password_and_file": [
        f"{RW0}.basic_auth.password_file: at most one of password and password_file"
    ],
    "basic_auth_missing_username": [f"{RW0}.basic_auth.username: is required"],
    "missing_credentials_file": [
        f"{RW0}.authorization.credentials_file: cannot read",
        "no-such-token.txt",
    ],
    "tls_bad_min_version": [f"{RW0}.tls_config.min_version: expected one of TLS10"],
    "tls_cert_without_key": [f"{RW0}.tls_config.key_file: is required with cert_file"],
    "proxy_url_bad_scheme": [f"{RW0}.proxy_url: expected an http:// or https:// URL"],
    "negative_shutdown_timeout": ["server.shutdown_timeout: not a valid duration string: '-30s'"],
    "server_buffered_below_request": [
        "server.max_buffered_body_bytes: must be at least max_request_bytes (32MiB)",
        "got 16MiB",
    ],
    "server_max_connections_zero": ["server.max_connections: must be >= 1, got 0"],
    "server_concurrent_reads_not_an_integer": [
        "server.max_concurrent_reads: expected an integer, got the string 'many'"
    ],
    "server_zero_header_read_timeout": ["server.header_read_timeout: must be a positive duration"],
    "storage_bad_fsync": ["storage.fsync: expected one of always, interval, got 'sometimes'"],
    "storage_empty_path": ["storage.path: must not be empty"],
    "storage_not_a_mapping": ["storage: expected a mapping, got the string '/var/lib/rwrouter'"],
    "storage_zero_fsync_interval": ["storage.fsync_interval: must be a positive duration"],
    "unknown_storage_key": [
        "storage.fsync_intervall: unknown key",
        "did you mean 'fsync_interval'",
    ],
    "prometheus_storage_section": [
        "storage.tsdb: a Prometheus setting (of its TSDB), not read by rwrouter: rwrouter's "
        "storage section holds its queues (path, fsync, fsync_interval, rejected_max_bytes)"
    ],
    "queue_bad_on_full": [
        f"{RW0}.queue_config.on_full: expected one of backpressure, drop_oldest, got 'block'"
    ],
    "queue_max_disk_bytes_zero": [
        f"{RW0}.queue_config.max_disk_bytes: must be at least 1 byte, got 0"
    ],
    "queue_negative_max_retry_duration": [
        f"{RW0}.queue_config.max_retry_duration: not a valid duration string: '-5m'"
    ],
    "queue_max_retry_duration_not_a_duration": [
        f"{RW0}.queue_config.max_retry_duration: not a valid duration string: 'forever'"
    ],
    # ha_dedup (HA pairs)
    "ha_dedup_same_labels": [f"{RW0}.ha_dedup.replica_label: must differ from cluster_label"],
    "ha_dedup_zero_failover_timeout": [
        f"{RW0}.ha_dedup.failover_timeout: must be a positive duration, got 0"
    ],
    "ha_dedup_empty_label": [f"{RW0}.ha_dedup.replica_label: expected a label name, got ''"],
    "ha_dedup_empty": [f"{RW0}.ha_dedup: is empty (write `ha_dedup: {{}}` for the defaults)"],
    "ha_dedup_name_label": [f"{RW0}.ha_dedup.replica_label: must not be __name__"],
    "ha_dedup_unknown_key": [
        f"{RW0}.ha_dedup.failover: unknown key (did you mean 'failover_timeout'?)"
    ],
    "queue_max_retry_duration_429_bare_number": [
        f"{RW0}.queue_config.max_retry_duration_on_http_429: not a valid duration string: '3600'"
    ],
    # pacing (max_samples_per_second, burst_samples)
    "queue_burst_without_rate": [
        f"{RW0}.queue_config.burst_samples: does nothing: pacing is off, "
        "max_samples_per_second is not set; set max_samples_per_second to the samples a "
        "second to pace at, or remove burst_samples"
    ],
    "queue_burst_with_zero_rate": [
        f"{RW0}.queue_config.burst_samples: does nothing: pacing is off, "
        "max_samples_per_second is 0 (off); set max_samples_per_second to the samples a "
        "second to pace at, or remove burst_samples"
    ],
    "queue_negative_max_samples_per_second": [
        f"{RW0}.queue_config.max_samples_per_second: must be >= 0, got -5"
    ],
    "queue_max_samples_per_second_not_an_integer": [
        f"{RW0}.queue_config.max_samples_per_second: expected an integer, got the string '5k'"
    ],
    "queue_zero_burst_samples": [f"{RW0}.queue_config.burst_samples: must be >= 1, got 0"],
    "several_mistakes": ["server.listen_adress: unknown key", "remote_write[1].url: expected"],
    "every_section_in_one_run": [
        "global.metric_name_validation_scheme: expected one of",
        "remote_write[1].tls_config.ca_file: ",
        "is not a PEM certificate (no certificate or crl found)",
    ],
    "one_destination_many_mistakes": [
        f"{RW0}.url: environment variable AMP_WORKSPACE_ID is not set",
        f"{RW0}.url: environment variable AMP_PATH is not set",
        "remote_write[1].name: duplicate destination name 'workspace'",
    ],
}

ONE_DESTINATION = [  # one_destination_many_mistakes.bad.yml: all thirteen, in one run
    f"{RW0}.url",  # AMP_WORKSPACE_ID
    f"{RW0}.url",  # AMP_PATH
    f"{RW0}.sigv4.servce",
    f"{RW0}.write_relabel_configs[0].regex",
    f"{RW0}.write_relabel_configs[1].modulus",
    f"{RW0}.queue_config.max_shards",
    f"{RW0}.queue_config.min_backoff",
    f"{RW0}.queue_config.retry_on_http_429",
    f"{RW0}.metadata_config.send",
    f"{RW0}.protobuf_message",
    "remote_write[1].remote_timeout",
    f"{RW0}.fallback",
    "remote_write[1].name",
]

SEVERAL = [  # several_mistakes.bad.yml: every independent mistake, in the order of the file
    "server.listen_adress",
    "server.read_timout",
    "storage.fsync",
    "relabel_configs[0].regex",
    f"{RW0}.queue_config.max_shard",
    "remote_write[1].url",
]


EVERY_SECTION = [  # every_section_in_one_run.bad.yml: all nineteen, in one run
    "global.metric_name_validation_scheme",
    "server.listen_address",
    "server.read_timeout",
    "server.shutdown_timeout",
    "server.max_connections",
    "storage.path",
    "storage.fsync",
    "relabel_cache.max_entries",
    "relabel_cache.max_age",
    "audit.window",
    "audit.currency",
    "relabel_configs[0].bogus",
    "relabel_configs[0].other",
    "relabel_configs[0].regex",
    f"{RW0}.headers.Authorization",
    f"{RW0}.headers.X-Amz-Date",
    "remote_write[1].sigv4.region",
    # then the files the destinations name, read once the text is parsed
    f"{RW0}.basic_auth.password_file",
    "remote_write[1].tls_config.ca_file",
]


def test_every_mistake_of_every_section_and_file_in_one_run() -> None:
    with pytest.raises(ConfigErrors) as info:
        load_config(TESTDATA / "every_section_in_one_run.bad.yml", env={})
    assert [e.path for e in info.value.errors] == EVERY_SECTION


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        pytest.param(
            (TESTDATA / "several_mistakes.bad.yml").read_text(), SEVERAL, id="every_section"
        ),
        pytest.param(
            "server: {listen_address: '0.0.0.0:99999', shutdown_timeout: forever}\n"
            "remote_write:\n  - {url: http://a/x}\n",
            ["server.listen_address", "server.shutdown_timeout"],
            id="every_bad_server_value",
        ),
        pytest.param(
            "server: {read_timeout: soon, shutdown_timeout: forever, max_request_bytes: 2MiB,"
            " max_buffered_body_bytes: 1MiB}\nremote_write:\n  - {url: http://a/x}\n",
            ["server.read_timeout", "server.shutdown_timeout", "server.max_buffered_body_bytes"],
            id="server_values_then_the_check_of_two",
        ),
        pytest.param(
            "storage: {path: '', fsync: x, fsync_interval: 0}\naudit: {window: x, max_series: 0}"
            "\nrelabel_cache: {max_bytes: x, max_tenants: 0}\nremote_write:\n  - {url: http://a/x}\n",
            [
                "storage.path",
                "storage.fsync",
                "storage.fsync_interval",
                "relabel_cache.max_bytes",
                "relabel_cache.max_tenants",
                "audit.window",
                "audit.max_series",
            ],
            id="every_bad_storage_relabel_cache_and_audit_value",
        ),
        pytest.param(
            "relabel_configs:\n  - {bogus: 1, other: 2, regex: '['}\n"
            "remote_write:\n  - {url: http://a/x}\n",
            ["relabel_configs[0].bogus", "relabel_configs[0].other", "relabel_configs[0].regex"],
            id="every_unknown_key_of_a_rule_and_its_regex",
        ),
        pytest.param(
            "remote_write:\n  - url: http://a/x\n    headers: {Authorization: x, X-Amz-Date: y,"
            " 'a b': z, X-Ok: 1}\n",
            [
                f"{RW0}.headers.Authorization",
                f"{RW0}.headers.X-Amz-Date",
                f"{RW0}.headers.a b",
                f"{RW0}.headers.X-Ok",
            ],
            id="every_bad_header",
        ),
        pytest.param(
            "remote_write:\n  - {url: http://a/x, shards: 2, retries: 1}\n",
            [f"{RW0}.shards", f"{RW0}.retries"],
            id="unknown_keys_of_one_mapping",
        ),
        pytest.param(
            "remote_write:\n  - {url: http://a/x, fallback: true}\n  - {url: http://b/x,"
            " fallback: true}\n",
            [f"{RW0}.fallback"],
            id="checks_across_destinations_once",
        ),
        pytest.param(
            "storage: {path: ''}\nremote_write:\n  - {url: http://a/x}\n",
            ["storage.path"],
            id="a_single_mistake_is_a_plain_config_error",
        ),
        pytest.param(
            (TESTDATA / "one_destination_many_mistakes.bad.yml").read_text(),
            ONE_DESTINATION,
            id="every_mistake_of_one_destination",
        ),
        pytest.param(
            "remote_write:\n  - {url: 'http://${A}:${B}/x', proxy_url: 'http://${A}:1'}\n",
            [f"{RW0}.url", f"{RW0}.url", f"{RW0}.proxy_url"],
            id="every_unset_variable_of_a_url",
        ),
        pytest.param(
            "remote_write:\n  - url: http://a/x\n    sigv4: {regoin: x, role: y}\n"
            "    tls_config: {ca: x, server_nam: y}\n    ha_dedup: {cluster: x}\n",
            [
                f"{RW0}.sigv4.regoin",
                f"{RW0}.sigv4.role",
                f"{RW0}.tls_config.ca",
                f"{RW0}.tls_config.server_nam",
                f"{RW0}.ha_dedup.cluster",
            ],
            id="every_sub_section_s_keys",
        ),
        pytest.param(
            "relabel_configs:\n  - {regex: '(('}\n  - {action: hashmod, target_label: t}\n"
            "  - {action: nope}\nremote_write:\n  - {url: http://a/x}\n",
            ["relabel_configs[0].regex", "relabel_configs[1].modulus", "relabel_configs[2].action"],
            id="every_broken_rule",
        ),
        pytest.param(
            "remote_write:\n  - url: http://a/x\n    queue_config: {max_shards: -1, min_shards: 9,"
            " min_backoff: 1, max_backoff: 1ms, burst_samples: 0, max_samples_per_send: x}\n",
            [
                f"{RW0}.queue_config.max_shards",
                f"{RW0}.queue_config.max_samples_per_send",
                f"{RW0}.queue_config.min_backoff",
            ],
            id="a_check_of_two_keys_waits_for_both",
        ),
        pytest.param(
            "remote_write:\n  - {url: http://a/x, max_shards: 2, queue_config: {min_shards: 3,"
            " max_shards: 2}}\n",
            [f"{RW0}.max_shards", f"{RW0}.queue_config.min_shards"],
            id="a_check_of_two_valid_keys_still_runs",
        ),
        pytest.param(
            "remote_write:\n  - {name: s, shadow: maybe}\n  - {name: '', url: http://b/x}\n",
            [f"{RW0}.shadow", "remote_write[1].name"],
            id="a_broken_shadow_does_not_make_url_required",
        ),
        pytest.param(
            "remote_write:\n  - {shadow: true}\n",
            [f"{RW0}.name"],
            id="a_shadow_without_url_needs_a_name",
        ),
        pytest.param(
            "remote_write:\n  - just-a-string\n  - {url: http://b/x, fallback: true}\n"
            "  - {name: n, url: http://c/x, fallback: true}\n  - {name: n, url: http://d/x,"
            " fallback: true}\n",
            [RW0, "remote_write[3].name"],
            id="an_unreadable_destination_skips_the_fallback_check_only",
        ),
    ],
)
def test_every_independent_mistake_is_reported(text: str, paths: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, env=ENV)
    errors = getattr(info.value, "errors", (info.value,))
    assert [e.path for e in errors] == paths
    assert isinstance(info.value, ConfigErrors) == (len(paths) > 1)


def test_every_bad_file_has_a_table_entry() -> None:
    stems = {path.name.removesuffix(".bad.yml") for path in TESTDATA.glob("*.bad.yml")}
    assert stems == set(BAD)


def test_a_series_budget_is_read_with_its_keys() -> None:
    dest = load_config(TESTDATA / "series_budget.good.yml", env={}).remote_write[0]
    assert (dest.series_limit, dest.on_series_limit, dest.series_window) == (
        950_000,
        OnSeriesLimit.FALLBACK,
        3600.0,
    )
    assert dest.series_limit_near_quota
    plain = load_config(TESTDATA / "minimal.good.yml", env={}).remote_write[0]
    assert plain.series_limit is None
    out = describe_config(load_config(TESTDATA / "series_budget.good.yml", env={}))
    assert (
        "  series_limit: 950,000 active series (series_limit_near_quota) within "
        "series_window=1h; a new series past it: the fallback destination "
        "(on_series_limit=fallback)"
    ) in out.splitlines()


@pytest.mark.parametrize(("stem", "expected"), BAD.items(), ids=list(BAD))
def test_bad_config(stem: str, expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(TESTDATA / f"{stem}.bad.yml", env=ENV)
    message = str(info.value)
    for part in expected:
        assert part in message
    assert message.startswith(f"{info.value.path}: ") or not info.value.path


def test_minimal_file_takes_every_default() -> None:
    config = load_config(TESTDATA / "minimal.good.yml", env={})
    assert config.server == ServerConfig()
    assert config.server.max_request_bytes == 32 * 1024 * 1024
    assert config.server.max_decoded_bytes == 64 * 1024 * 1024
    assert (config.server.listen_host, config.server.listen_port) == ("0.0.0.0", 9250)
    assert config.server.queue_full_retry_after == 5.0
    assert config.server.shutdown_timeout == 30.0
    assert config.storage == StorageConfig(
        path="data", fsync=Fsync.INTERVAL, fsync_interval=1.0, rejected_max_bytes=64 * 1024 * 1024
    )
    assert config.relabel_configs == ()
    (dest,) = config.remote_write
    assert dest.name == "prometheus"  # derived from the URL host
    assert dest.url == "http://prometheus:9090/api/v1/write"
    assert dest.remote_timeout == 30.0
    assert dest.queue_config == QueueConfig(
        capacity=10000,
        min_shards=1,
        max_shards=50,
        max_samples_per_send=2000,
        batch_send_deadline=5.0,
        min_backoff=0.03,
        max_backoff=5.0,
        retry_on_http_429=False,
        max_memory_bytes=256 * 1024 * 1024,
        max_disk_bytes=1024 * 1024 * 1024,
        on_full=OnFull.BACKPRESSURE,
        max_request_bytes=8 * 1024 * 1024,  # not a sigv4 destination
        max_retry_duration=0.0,  # unlimited
        max_retry_duration_on_http_429=3600.0,
    )
    assert dest.metadata_config == MetadataConfig(
        send=True, send_interval=60.0, max_samples_per_send=500
    )
    assert dest.send_exemplars and dest.send_native_histograms
    assert not dest.fallback
    assert (dest.sigv4, dest.basic_auth, dest.authorization) == (None, None, None)  # no auth
    assert dest.protobuf_message == "prometheus.WriteRequest"  # RW 1.0, as Prometheus
    assert dest.metric_name_escaping_scheme == "allow-utf-8"
    assert config.global_.metric_name_validation_scheme == "utf8"  # Prometheus 3's default
    assert (dest.headers, dest.write_relabel_configs, dest.tls_config, dest.proxy_url) == (
        (),
        (),
        None,
        None,
    )


PROTOCOL_CASES = [
    # (name, destination YAML lines, global YAML, expected message, escaping, validation)
    ("defaults", "", "", "prometheus.WriteRequest", "allow-utf-8", "utf8"),
    (
        "sigv4_escapes_underscores",
        "sigv4: {region: us-east-1}",
        "",
        "prometheus.WriteRequest",
        "underscores",
        "utf8",
    ),
    (
        "sigv4_allows_utf8_when_said",
        "sigv4: {region: us-east-1}\n    metric_name_escaping_scheme: allow-utf-8",
        "",
        "prometheus.WriteRequest",
        "allow-utf-8",
        "utf8",
    ),
    (
        "rw2_and_dots",
        "protobuf_message: io.prometheus.write.v2.Request\n    metric_name_escaping_scheme: dots",
        "",
        "io.prometheus.write.v2.Request",
        "dots",
        "utf8",
    ),
    (
        "rw1_named_values",
        "protobuf_message: prometheus.WriteRequest\n    metric_name_escaping_scheme: values",
        "",
        "prometheus.WriteRequest",
        "values",
        "utf8",
    ),
    (
        "legacy_global",
        "",
        "global: {metric_name_validation_scheme: legacy}\n",
        "prometheus.WriteRequest",
        "allow-utf-8",
        "legacy",
    ),
    ("empty_global", "", "global: {}\n", "prometheus.WriteRequest", "allow-utf-8", "utf8"),
    (
        "empty_scheme_is_unset",
        "",
        "global: {metric_name_validation_scheme: ''}\n",
        "prometheus.WriteRequest",
        "allow-utf-8",
        "utf8",
    ),
]


@pytest.mark.parametrize(
    ("name", "lines", "global_", "message", "escaping", "validation"),
    PROTOCOL_CASES,
    ids=[c[0] for c in PROTOCOL_CASES],
)
def test_protocol_and_name_settings(
    name: str, lines: str, global_: str, message: str, escaping: str, validation: str
) -> None:
    text = f"{global_}remote_write:\n  - url: https://example.com/api/v1/write\n    {lines}\n"
    config = parse_config(text, env={})
    (dest,) = config.remote_write
    assert (dest.protobuf_message, dest.metric_name_escaping_scheme) == (message, escaping)
    assert config.global_.metric_name_validation_scheme == validation


def test_pasted_prometheus_block_with_sigv4() -> None:
    config = load_config(TESTDATA / "prometheus_sigv4_paste.good.yml", env={})
    (dest,) = config.remote_write
    assert dest.name == "amp"
    assert dest.remote_timeout == 60.0
    assert dest.sigv4 == SigV4Config(
        region="us-west-2", role_arn="arn:aws:iam::123456789012:role/amp-ingest"
    )
    assert dest.sigv4.service == "aps"
    assert dest.sigv4.credential_source == (
        "default chain + role_arn arn:aws:iam::123456789012:role/amp-ingest"
    )
    assert dest.queue_config == dataclasses.replace(
        QueueConfig(),
        max_samples_per_send=1000,
        max_shards=200,
        capacity=2500,
        max_request_bytes=1024 * 1024,  # the sigv4 default
        retry_on_http_429=True,
    )
    assert dest.metadata_config.send_interval == 30.0
    keep, labeldrop = dest.write_relabel_configs
    assert (keep.action.value, keep.source_labels) == ("keep", ("__name__",))
    assert keep.regex.text == "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_.*"
    assert labeldrop.action.value == "labeldrop"


def test_full_file_reads_every_key() -> None:
    config = load_config(TESTDATA / "full.good.yml", env={})
    assert config.server == ServerConfig(
        listen_address="[::]:19250",
        max_request_bytes=1024 * 1024,
        max_decoded_bytes=512 * 1024,
        queue_full_retry_after=90.0,
        read_timeout=20.0,
        max_concurrent_reads=3,
        max_buffered_body_bytes=16 * 1024 * 1024,
        read_wait_timeout=2.0,
        header_read_timeout=3.0,
        idle_timeout=30.0,
        max_connections=100,
    )
    assert config.server.listen_host == "::"
    assert len(config.relabel_configs) == 1
    mimir, fallback, inline = config.remote_write
    assert mimir.headers == (("X-Scope-OrgID", "team-a"), ("X-Extra", "1"))
    assert mimir.authorization == Authorization(
        credentials_file=str(TESTDATA / "secrets" / "token.txt")
    )
    assert mimir.tls_config == TLSConfig(
        ca_file=str(TESTDATA / "secrets" / "ca.crt"),
        server_name="mimir.internal",
        insecure_skip_verify=True,
        min_version="TLS12",
    )
    assert mimir.proxy_url == "http://proxy.example.com:3128"
    assert mimir.queue_config == QueueConfig(
        capacity=20000,
        min_shards=2,
        max_shards=8,
        max_samples_per_send=500,
        batch_send_deadline=0.5,
        min_backoff=0.1,
        max_backoff=10.0,
        retry_on_http_429=True,
        max_memory_bytes=64 * 1024 * 1024,
    )
    assert mimir.metadata_config == MetadataConfig(
        send=False, send_interval=120.0, max_samples_per_send=100
    )
    assert not mimir.send_exemplars and not mimir.send_native_histograms
    assert fallback.fallback and (fallback.sigv4, fallback.authorization) == (None, None)
    assert fallback.basic_auth == BasicAuth(
        username="admin", password_file=str(TESTDATA / "secrets" / "password.txt")
    )
    # Two unnamed destinations on the same host get the index as suffix.
    assert (fallback.name, inline.name) == ("prometheus-1", "prometheus-2")
    assert inline.basic_auth is not None and inline.basic_auth.password == Secret("inline-password")


def test_durable_queue_file_reads_every_new_key() -> None:
    config = load_config(TESTDATA / "durable_queue.good.yml", env={})
    assert config.server.shutdown_timeout == 120.0
    assert config.storage == StorageConfig(
        path="/var/lib/rwrouter",
        fsync=Fsync.ALWAYS,
        fsync_interval=0.25,
        rejected_max_bytes=16 * 1024 * 1024,
    )
    workspace, self_hosted = config.remote_write
    assert workspace.queue_config == dataclasses.replace(
        QueueConfig(),
        retry_on_http_429=True,
        max_disk_bytes=8 * 1024 * 1024 * 1024,
        on_full=OnFull.DROP_OLDEST,
        max_request_bytes=512 * 1024,  # below the sigv4 default
        max_retry_duration=6 * 3600.0,
        max_retry_duration_on_http_429=1800.0,
    )
    assert self_hosted.queue_config == dataclasses.replace(
        QueueConfig(),
        max_disk_bytes=100 * 1024 * 1024,  # 100MB: sizes are base 2
        max_request_bytes=2 * 1024 * 1024,
        max_retry_duration=0.0,
        max_retry_duration_on_http_429=0.0,
    )


@pytest.mark.parametrize(
    ("auth", "queue", "expected"),
    [
        ("", "", 8 * 1024 * 1024),
        ("sigv4: {region: us-east-1}", "", 1024 * 1024),
        ("sigv4: {region: us-east-1}", "queue_config: {max_request_bytes: 4MiB}", 4 * 1024 * 1024),
        ("sigv4: {region: us-east-1}", "queue_config: {max_request_bytes: 1000}", 1000),
        ("", "queue_config: {max_request_bytes: 512KiB}", 512 * 1024),
        ("basic_auth: {username: u}", "", 8 * 1024 * 1024),
        ("authorization: {credentials: t}", "", 8 * 1024 * 1024),
        ("sigv4: {region: us-east-1}", "queue_config:", 1024 * 1024),  # null: the default
    ],
    ids=[
        "plain-8MiB",
        "sigv4-1MiB",
        "sigv4-raised",
        "sigv4-lowered",
        "plain-lowered",
        "basic-auth-8MiB",
        "authorization-8MiB",
        "sigv4-null-queue-config",
    ],
)
def test_max_request_bytes_default_depends_on_sigv4(auth: str, queue: str, expected: int) -> None:
    text = "remote_write:\n  - url: http://x:1/w\n"
    for line in (auth, queue):
        if line:
            text += f"    {line}\n"
    (dest,) = parse_config(text, env={}).remote_write
    assert dest.queue_config.max_request_bytes == expected


def test_sigv4_default_max_request_bytes_is_per_destination() -> None:
    text = """
remote_write:
  - url: https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write
    sigv4: {}
  - url: http://prometheus:9090/api/v1/write
    fallback: true
"""
    amp, prometheus = parse_config(text, env={}).remote_write
    assert amp.queue_config.max_request_bytes == 1024 * 1024
    assert prometheus.queue_config.max_request_bytes == 8 * 1024 * 1024


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("server:\n  shutdown_timeout: 0\n", ("server", "shutdown_timeout", 0.0)),
        ("server:\n  shutdown_timeout: 0s\n", ("server", "shutdown_timeout", 0.0)),
        ("server:\n  shutdown_timeout: 5m\n", ("server", "shutdown_timeout", 300.0)),
        ("server:\n", ("server", "shutdown_timeout", 30.0)),
        ("server:\n", ("server", "max_concurrent_reads", 8)),
        ("server:\n", ("server", "max_buffered_body_bytes", 128 << 20)),
        ("server:\n", ("server", "read_wait_timeout", 10.0)),
        ("server:\n", ("server", "header_read_timeout", 5.0)),
        ("server:\n", ("server", "idle_timeout", 60.0)),
        ("server:\n", ("server", "max_connections", 512)),
        ("server: {max_concurrent_reads: 2}\n", ("server", "max_concurrent_reads", 2)),
        (
            "server: {max_buffered_body_bytes: 1GiB}\n",
            ("server", "max_buffered_body_bytes", 1 << 30),
        ),
        (
            "server: {max_request_bytes: 1MiB, max_buffered_body_bytes: 1MiB}\n",
            ("server", "max_buffered_body_bytes", 1 << 20),
        ),
        ("server: {read_wait_timeout: 500ms}\n", ("server", "read_wait_timeout", 0.5)),
        ("server: {header_read_timeout: 10s}\n", ("server", "header_read_timeout", 10.0)),
        ("server: {idle_timeout: 2m}\n", ("server", "idle_timeout", 120.0)),
        ("server: {max_connections: 1}\n", ("server", "max_connections", 1)),
        ("storage:\n", ("storage", "path", "data")),
        ("storage: {}\n", ("storage", "fsync", "interval")),
        ("storage: {path: ./spool}\n", ("storage", "path", "./spool")),
        ("storage: {fsync: always}\n", ("storage", "fsync", "always")),
        ("storage: {fsync_interval: 100ms}\n", ("storage", "fsync_interval", 0.1)),
        ("storage: {rejected_max_bytes: 1GB}\n", ("storage", "rejected_max_bytes", 1 << 30)),
        ("relabel_cache:\n", ("relabel_cache", "max_entries", 2_000_000)),
        ("relabel_cache: {max_entries: 5000}\n", ("relabel_cache", "max_entries", 5000)),
        ("relabel_cache: {max_bytes: 64MiB}\n", ("relabel_cache", "max_bytes", 64 << 20)),
        ("relabel_cache: {max_age: 1h}\n", ("relabel_cache", "max_age", 3600.0)),
        ("relabel_cache: {max_tenants: 4}\n", ("relabel_cache", "max_tenants", 4)),
    ],
    ids=[
        "shutdown-0",
        "shutdown-0s",
        "shutdown-5m",
        "server-null",
        "reads-default",
        "buffered-default",
        "read-wait-default",
        "header-timeout-default",
        "idle-default",
        "connections-default",
        "reads-2",
        "buffered-1GiB",
        "buffered-equal-to-request",
        "read-wait-500ms",
        "header-timeout-10s",
        "idle-2m",
        "connections-1",
        "storage-null",
        "storage-empty",
        "storage-relative-path",
        "fsync-always",
        "fsync-interval",
        "rejected-bound",
        "cache-defaults",
        "cache-entries",
        "cache-bytes",
        "cache-age",
        "cache-tenants",
    ],
)
def test_server_and_storage_values(section: str, expected: tuple[str, str, object]) -> None:
    text = section + "remote_write:\n  - url: http://x:1/w\n"
    config = parse_config(text, env={})
    where, key, value = expected
    assert getattr(getattr(config, where), key) == pytest.approx(value)


def test_storage_path_is_taken_literally() -> None:
    # Not ${VAR}-expanded and not joined to the config file's directory (unlike *_file paths):
    # relative to the working directory of the process.
    text = "storage: {path: '${STATE_DIRECTORY}/q'}\nremote_write: [{url: 'http://x:1/w'}]\n"
    config = parse_config(text, env={"STATE_DIRECTORY": "/var/lib"}, base_dir="/etc/rwrouter")
    assert config.storage.path == "${STATE_DIRECTORY}/q"


QUEUE_VALUES = [
    ("max_retry_duration: 0", "max_retry_duration", 0.0),
    ("max_retry_duration: 1d", "max_retry_duration", 86400.0),
    ("max_retry_duration_on_http_429: 0s", "max_retry_duration_on_http_429", 0.0),
    ("max_retry_duration_on_http_429: 10m", "max_retry_duration_on_http_429", 600.0),
    ("max_disk_bytes: 1", "max_disk_bytes", 1),
    ("max_disk_bytes: 20GiB", "max_disk_bytes", 20 << 30),
    ("on_full: drop_oldest", "on_full", "drop_oldest"),
    ("on_full: backpressure", "on_full", "backpressure"),
    ("on_full:", "on_full", "backpressure"),  # null: the default
    ("sample_age_limit: 0s", "sample_age_limit", 0.0),  # off, Prometheus's default
    ("sample_age_limit: 0", "sample_age_limit", 0.0),
    ("sample_age_limit: 30m", "sample_age_limit", 1800.0),
    ("sample_age_limit: 1h30m", "sample_age_limit", 5400.0),
    ("sample_age_limit:", "sample_age_limit", 0.0),  # null: the default
]


@pytest.mark.parametrize(
    ("queue", "key", "value"), QUEUE_VALUES, ids=[q for q, _, _ in QUEUE_VALUES]
)
def test_queue_disk_and_retry_values(queue: str, key: str, value: object) -> None:
    text = f"remote_write:\n  - url: http://x:1/w\n    queue_config:\n      {queue}\n"
    (dest,) = parse_config(text, env={}).remote_write
    assert getattr(dest.queue_config, key) == value


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        (
            "queue_config: {on_full: Drop_Oldest}",
            "queue_config.on_full: expected one of backpressure, drop_oldest, got 'Drop_Oldest'",
        ),
        ("queue_config: {on_full: ''}", "queue_config.on_full: expected one of backpressure"),
        ("queue_config: {on_full: 1}", "queue_config.on_full: expected a string"),
        ("queue_config: {max_disk_bytes: 1.5GiB}", "queue_config.max_disk_bytes: expected a size"),
        (
            "queue_config: {max_request_bytes: 0}",
            "queue_config.max_request_bytes: must be at least",
        ),
        ("queue_config: {max_retry_duration: 1.5h}", "max_retry_duration: not a valid duration"),
        ("queue_config: {max_retry_duration: 60}", "max_retry_duration: not a valid duration"),
        ("queue_config: {max_retry_duration: true}", "max_retry_duration: expected a duration"),
        ("queue_config: {sample_age_limit: 60}", "sample_age_limit: not a valid duration"),
        ("queue_config: {sample_age_limit: 1.5h}", "sample_age_limit: not a valid duration"),
    ],
    ids=[
        "on-full-case",
        "on-full-empty",
        "on-full-int",
        "disk-fraction",
        "request-zero",
        "retry-fraction",
        "retry-bare-number",
        "retry-bool",
        "age-bare-number",
        "age-fraction",
    ],
)
def test_queue_disk_and_retry_errors(snippet: str, message: str) -> None:
    text = f"remote_write:\n  - url: http://x:1/w\n    {snippet}\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    assert str(info.value).startswith(f"{RW0}.queue_config.")
    assert message in str(info.value)


_HERE = "unknown key here:"
_ON_DEST = "on the destination (a `remote_write` entry)"
MISPLACED_CASES = [
    # ("dest": the snippet is a destination's key, "top": a top-level one; the error)
    pytest.param(
        "dest",
        "max_samples_per_second: 5",
        f"{RW0}.max_samples_per_second: {_HERE} `max_samples_per_second` belongs in `queue_config`",
        id="pacing-on-destination",
    ),
    pytest.param(
        "dest",
        "sample_age_limit: 1h",
        f"{RW0}.sample_age_limit: {_HERE} `sample_age_limit` belongs in `queue_config`",
        id="age-limit-on-destination",
    ),
    pytest.param(
        "dest",
        "queue_config: {series_limit: 5}",
        f"{RW0}.queue_config.series_limit: {_HERE} `series_limit` belongs {_ON_DEST} or in `audit`",
        id="budget-in-queue-config",
    ),
    pytest.param(
        "dest",
        "queue_config: {ha_dedup: {}}",
        f"{RW0}.queue_config.ha_dedup: {_HERE} `ha_dedup` belongs {_ON_DEST}",
        id="ha-dedup-in-queue-config",
    ),
    pytest.param(
        "dest",
        "ha_dedup: {series_window: 1h}",
        f"{RW0}.ha_dedup.series_window: {_HERE} `series_window` belongs {_ON_DEST}",
        id="budget-window-in-ha-dedup",
    ),
    pytest.param(
        "dest",
        "metadata_config: {capacity: 5}",
        f"{RW0}.metadata_config.capacity: {_HERE} `capacity` belongs in `queue_config`",
        id="queue-key-in-metadata-config",
    ),
    pytest.param(
        "dest",
        "max_request_bytes: 1MiB",
        f"{RW0}.max_request_bytes: {_HERE} `max_request_bytes` belongs in `queue_config` "
        "or in `server`",
        id="two-homes-nearest-first",
    ),
    pytest.param(
        "dest",
        "region: eu-west-1",
        f"{RW0}.region: {_HERE} `region` belongs in `sigv4`",
        id="sigv4-key-on-destination",
    ),
    pytest.param(
        "dest",
        "fsync: always",
        f"{RW0}.fsync: {_HERE} `fsync` belongs in `storage`",
        id="storage-key-on-destination",
    ),
    pytest.param(
        "dest",
        "relabel_configs: []",
        f"{RW0}.relabel_configs: {_HERE} `relabel_configs` belongs at the top level "
        "(or did you mean 'write_relabel_configs'?)",
        id="top-key-on-destination-and-close-match",
    ),
    pytest.param(
        "top",
        "remote_timeout: 1s",
        f"remote_timeout: {_HERE} `remote_timeout` belongs {_ON_DEST}",
        id="destination-key-at-top",
    ),
    pytest.param(
        "top",
        "global: {series_limit: 5}",
        f"global.series_limit: {_HERE} `series_limit` belongs in `audit` or {_ON_DEST}",
        id="budget-in-global-file-sections-first",
    ),
    pytest.param(
        "top",
        "server: {max_disk_bytes: 1GiB}",
        f"server.max_disk_bytes: {_HERE} `max_disk_bytes` belongs in `queue_config`",
        id="queue-key-in-server",
    ),
    pytest.param(
        "top",
        "storage: {max_age: 1h}",
        f"storage.max_age: {_HERE} `max_age` belongs in `relabel_cache`",
        id="cache-key-in-storage",
    ),
    pytest.param(
        "top",
        "relabel_cache: {window: 1h}",
        f"relabel_cache.window: {_HERE} `window` belongs in `audit`",
        id="audit-key-in-relabel-cache",
    ),
    pytest.param(
        "top",
        "audit: {path: /data}",
        f"audit.path: {_HERE} `path` belongs in `storage`",
        id="storage-key-in-audit",
    ),
    pytest.param(
        "top",
        "audit: {price_tiers: [{per_million: 1, currency: EUR}]}",
        f"audit.price_tiers[0].currency: {_HERE} `currency` belongs in `audit`",
        id="audit-key-in-price-tier",
    ),
    pytest.param(
        "dest",
        "queue_config: {max_retries: 3}",
        f"{RW0}.queue_config.max_retries: unknown key (did you mean 'max_retry_duration'?)",
        id="unknown-everywhere-close-match",
    ),
    pytest.param(
        "top",
        "server: {port: 9250}",
        "server.port: unknown key",
        id="unknown-everywhere-no-hint",
    ),
]


@pytest.mark.parametrize(("where", "snippet", "message"), MISPLACED_CASES)
def test_a_misplaced_key_says_where_it_belongs(where: str, snippet: str, message: str) -> None:
    """An unknown key known in another section says where it belongs
    (rwrouter.config.sections), in every section pair it can be misplaced in."""
    if where == "dest":
        text = f"remote_write:\n  - url: http://x:1/w\n    {snippet}\n"
    else:
        text = f"{snippet}\nremote_write: [{{url: http://x:1/w}}]\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("storage: {fsync: ALWAYS}", "storage.fsync: expected one of always, interval"),
        ("storage: {fsync: true}", "storage.fsync: expected a string, got a boolean"),
        ("storage: {path: 12}", "storage.path: expected a string, got an integer 12"),
        ("storage: {rejected_max_bytes: 0}", "storage.rejected_max_bytes: must be at least 1"),
        ("storage: {fsync_interval: 1}", "storage.fsync_interval: not a valid duration"),
        ("storage: [data]", "storage: expected a mapping, got a list"),
        ("server: {shutdown_timeout: 30}", "server.shutdown_timeout: not a valid duration"),
        ("relabel_cache: {max_entries: 0}", "relabel_cache.max_entries: must be >= 1"),
        ("relabel_cache: {max_age: 0s}", "relabel_cache.max_age: must be a positive duration"),
        ("relabel_cache: {max_tenants: 0}", "relabel_cache.max_tenants: must be >= 1"),
        ("relabel_cache: {size: 10}", "relabel_cache.size: unknown key"),
    ],
    ids=[
        "fsync-case",
        "fsync-bool",
        "path-int",
        "rejected-zero",
        "interval-bare-number",
        "storage-list",
        "shutdown-bare-number",
        "cache-entries-zero",
        "cache-age-zero",
        "cache-tenants-zero",
        "cache-unknown-key",
    ],
)
def test_storage_and_shutdown_errors(section: str, message: str) -> None:
    text = f"{section}\nremote_write:\n  - url: http://x:1/w\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    assert str(info.value).startswith(message)


SHIPPED_ENV = {
    "AWS_REGION": "us-east-1",
    "AMP_WORKSPACE_ID": "ws-00000000-0000-0000-0000-000000000000",
    "TEAM_A_WORKSPACE_ID": "ws-team-a",
    "TEAM_B_WORKSPACE_ID": "ws-team-b",
    "WORKSPACE_0_ID": "ws-shard-0",
    "WORKSPACE_1_ID": "ws-shard-1",
}
SHIPPED = [ROOT / "config" / "rwrouter.yaml", *sorted((ROOT / "config" / "examples").glob("*"))]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_config_parses(path: Path) -> None:
    config = load_config(path, env=SHIPPED_ENV)
    assert config.remote_write
    workspaces = [d for d in config.remote_write if "aps-workspaces" in d.url]
    shadows = [d for d in config.remote_write if d.shadow]
    assert shadows or (all("us-east-1" in d.url for d in workspaces) and workspaces)
    assert "${" not in describe_config(config)


def test_shipped_default_routes_gpu_series_to_the_workspace() -> None:
    config = load_config(ROOT / "config" / "rwrouter.yaml", env=SHIPPED_ENV)
    workspace, self_hosted = config.remote_write
    assert workspace.name == "workspace" and workspace.sigv4 is not None
    assert workspace.url == (
        "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/"
        "ws-00000000-0000-0000-0000-000000000000/api/v1/remote_write"
    )
    assert workspace.queue_config.retry_on_http_429 and workspace.audit
    (keep,) = workspace.write_relabel_configs
    assert keep.regex.text == (
        "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_MEM_COPY_UTIL|DCGM_FI_PROF_.*"
    )
    assert self_hosted.name == "self-hosted" and self_hosted.fallback


def test_env_expands_in_url_but_never_in_relabel_rules() -> None:
    text = """
remote_write:
  - url: http://${URL_HOST}/api/v1/write
    write_relabel_configs:
      - source_labels: [instance]
        regex: "(.*):.*"
        target_label: host
        replacement: "${1}"
      - source_labels: [job]
        target_label: job_copy
        replacement: "${URL_HOST}"
"""
    config = parse_config(text, env={"URL_HOST": "mimir:9009", "1": "oops"})
    (dest,) = config.remote_write
    assert dest.url == "http://mimir:9009/api/v1/write"
    assert dest.name == "mimir"
    first, second = dest.write_relabel_configs
    assert first.replacement == "${1}"
    assert second.replacement == "${URL_HOST}"


@pytest.mark.parametrize(
    ("yaml_snippet", "env", "field", "expected"),
    [
        (
            "headers: {X-Scope-OrgID: '${TENANT}'}",
            {"TENANT": "t1"},
            "headers",
            (("X-Scope-OrgID", "t1"),),
        ),
        (
            "sigv4: {region: '${R}', profile: '${P}', role_arn: '${A}'}",
            {"R": "eu-west-1", "P": "prod", "A": "arn:x"},
            "sigv4",
            SigV4Config(region="eu-west-1", profile="prod", role_arn="arn:x"),
        ),
        (
            "sigv4: {access_key: '${K}', secret_key: '${S}'}",
            {"K": "AK", "S": "SK"},
            "sigv4",
            SigV4Config(access_key="AK", secret_key=Secret("SK")),
        ),
        (
            "basic_auth: {username: '${U}', password: '${P}'}",
            {"U": "u", "P": "p"},
            "basic_auth",
            BasicAuth(username="u", password=Secret("p")),
        ),
        (
            "authorization: {credentials: '${T}'}",
            {"T": "tok"},
            "authorization",
            Authorization(credentials=Secret("tok")),
        ),
        ("proxy_url: 'http://${PROXY}'", {"PROXY": "proxy:3128"}, "proxy_url", "http://proxy:3128"),
    ],
    ids=["headers", "sigv4-names", "sigv4-keys", "basic-auth", "authorization", "proxy-url"],
)
def test_env_expansion_fields(
    yaml_snippet: str, env: dict[str, str], field: str, expected: object
) -> None:
    text = f"remote_write:\n  - url: http://x:1/w\n    {yaml_snippet}\n"
    (dest,) = parse_config(text, env=env).remote_write
    assert getattr(dest, field) == expected


def test_unset_env_var_in_header_names_path_and_variable() -> None:
    text = "remote_write:\n  - url: http://x:1/w\n    headers: {X-Tenant: '${TENANT}'}\n"
    with pytest.raises(ConfigError, match=r"remote_write\[0\]\.headers\.X-Tenant: .*TENANT"):
        parse_config(text, env={})


def test_explicit_names_are_kept_and_derived_ones_avoid_them() -> None:
    text = """
remote_write:
  - url: http://prometheus:9090/api/v1/write
  - name: prometheus
    url: http://other:9090/api/v1/write
"""
    names = [d.name for d in parse_config(text, env={}).remote_write]
    assert names == ["prometheus-0", "prometheus"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("0s", 0.0),
        ("30ms", 0.03),
        ("5s", 5.0),
        ("1m", 60.0),
        ("1h30m", 5400.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("1y", 31536000.0),
        ("2m500ms", 120.5),
        (0, 0.0),
    ],
    ids=lambda v: repr(v),
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text, "p") == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["30", 30, "", "1.5s", "1s1m", "1 s", "-1s", "5S", True, None, 1.5],
    ids=lambda v: repr(v),
)
def test_parse_duration_rejects(text: object) -> None:
    with pytest.raises(ConfigError, match=r"^p: "):
        parse_duration(text, "p")


@pytest.mark.parametrize("seconds", [0.0, 0.03, 5.0, 60.0, 90.0, 5400.0, 86400.5])
def test_format_duration_round_trips(seconds: float) -> None:
    assert parse_duration(format_duration(seconds), "p") == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (1000, 1000),
        ("1000", 1000),
        ("1000B", 1000),
        ("512KiB", 512 * 1024),
        ("1MB", 1 << 20),
        ("32MiB", 32 << 20),
        ("1GB", 1 << 30),
    ],
    ids=lambda v: repr(v),
)
def test_parse_size(value: object, size: int) -> None:
    assert parse_size(value, "p") == size
    assert parse_size(format_size(size), "p") == size


@pytest.mark.parametrize("value", ["1 megabyte", "1.5MB", "MB", True, [1]], ids=repr)
def test_parse_size_rejects(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^p: expected a size"):
        parse_size(value, "p")


SECRETS = {
    "PASSWORD": "pw-s3cret-1",
    "TOKEN": "tok-s3cret-2",
    "SECRET_KEY": "sk-s3cret-3",
    "HEADER": "hdr-s3cret-4",
    "QUERY": "q-s3cret-5",
    "PROXY_PASS": "proxy-s3cret-6",
}


def test_describe_config_never_prints_a_secret() -> None:
    text = """
remote_write:
  - name: amp
    url: https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write
    sigv4: {region: us-east-1, access_key: AKIDEXAMPLE, secret_key: "${SECRET_KEY}"}
    headers: {X-Api-Key: "${HEADER}"}
    proxy_url: "http://user:${PROXY_PASS}@proxy:3128"
  - url: "https://mimir.example.com/api/v1/push?api_key=${QUERY}"
    authorization: {credentials: "${TOKEN}"}
  - url: http://prometheus:9090/api/v1/write
    basic_auth: {username: admin, password: "${PASSWORD}"}
    fallback: true
"""
    config = parse_config(text, env=SECRETS)
    out = describe_config(config)
    for secret in SECRETS.values():
        assert secret not in out
    assert "sigv4 region=us-east-1 service=aps credentials=static keys" in out
    assert "authorization type=Bearer credentials <secret>" in out
    assert "basic_auth username=admin password <secret>" in out
    assert "X-Api-Key" in out
    # The secret-typed fields hide themselves from repr as well.
    for secret in ("pw-s3cret-1", "tok-s3cret-2", "sk-s3cret-3"):
        assert secret not in repr(config)
    assert config.remote_write[2].basic_auth is not None
    assert config.remote_write[2].basic_auth.password is not None
    assert config.remote_write[2].basic_auth.password.reveal() == "pw-s3cret-1"


def test_describe_config_lists_destinations_auth_queue_and_rules() -> None:
    config = load_config(ROOT / "config" / "rwrouter.yaml", env=SHIPPED_ENV)
    out = describe_config(config)
    assert "destination workspace:" in out
    assert "fallback: yes" in out and "fallback: no" in out
    assert "auth: sigv4 region=us-east-1 service=aps credentials=default chain" in out
    assert "auth: none" in out
    assert "retry_on_http_429=true" in out
    assert "backoff=30ms..5s" in out
    assert "action=keep source_labels=[__name__] regex='DCGM_FI_DEV_GPU_UTIL|" in out


def test_describe_config_shows_storage_shutdown_and_queue_keys() -> None:
    config = load_config(ROOT / "config" / "rwrouter.yaml", env=SHIPPED_ENV)
    out = describe_config(config)
    lines = out.splitlines()
    assert lines[1] == "global: metric_name_validation_scheme=utf8"
    assert lines[2].endswith(" read_timeout=1m shutdown_timeout=30s")
    assert lines[3] == (
        "  bounds: max_concurrent_reads=8 max_buffered_body_bytes=128MiB read_wait_timeout=10s"
        " header_read_timeout=5s idle_timeout=1m max_connections=512"
    )
    assert lines[4] == (
        "storage: path=data (relative to the working directory) fsync=interval"
        " fsync_interval=1s rejected_max_bytes=64MiB"
    )
    workspace = out[out.index("destination workspace:") : out.index("destination self-hosted:")]
    assert "  queue_config:\n    disk: max_disk_bytes=1GiB on_full=backpressure\n" in workspace
    assert (
        "    sending: shards=1..50 capacity=10000 max_memory_bytes=256MiB"
        " max_samples_per_send=2000 batch_send_deadline=5s max_request_bytes=1MiB\n"
    ) in workspace
    assert (
        "    retries: backoff=30ms..5s max_retry_duration=unlimited retry_on_http_429=true"
        " max_retry_duration_on_http_429=1h\n"
    ) in workspace
    self_hosted = out[out.index("destination self-hosted:") :]
    assert "max_request_bytes=8MiB" in self_hosted
    # The 429 limit is shown only where 429 answers are retried.
    assert "retry_on_http_429=false\n" in self_hosted
    assert "max_retry_duration_on_http_429" not in self_hosted


def test_describe_config_shows_non_default_durable_settings() -> None:
    out = describe_config(load_config(TESTDATA / "durable_queue.good.yml", env={}))
    assert " shutdown_timeout=2m\n" in out
    # fsync_interval is not used by fsync=always, so it is not shown.
    assert "storage: path=/var/lib/rwrouter fsync=always rejected_max_bytes=16MiB\n" in out
    assert "    disk: max_disk_bytes=8GiB on_full=drop_oldest\n" in out
    assert " max_request_bytes=512KiB\n" in out
    assert "max_retry_duration=6h retry_on_http_429=true max_retry_duration_on_http_429=30m" in out
    assert "    disk: max_disk_bytes=100MiB on_full=backpressure\n" in out
    assert "max_retry_duration=unlimited retry_on_http_429=false\n" in out


@pytest.mark.parametrize(
    ("queue", "shown"),
    [("{}", None), ("{sample_age_limit: 0s}", None), ("{sample_age_limit: 90m}", "1h30m")],
    ids=["default_off", "zero_off", "set"],
)
def test_describe_config_shows_sample_age_limit_when_set(queue: str, shown: str | None) -> None:
    text = f"remote_write:\n  - url: http://x:1/w\n    queue_config: {queue}\n"
    sending = next(
        line
        for line in describe_config(parse_config(text, env={})).splitlines()
        if line.startswith("    sending: ")
    )
    if shown is None:
        assert "sample_age_limit" not in sending
    else:
        assert sending.endswith(f" max_request_bytes=8MiB sample_age_limit={shown}")


def test_describe_config_relative_storage_path() -> None:
    text = "storage: {path: spool}\nremote_write: [{url: 'http://x:1/w'}]\n"
    out = describe_config(parse_config(text, env={}))
    assert "storage: path=spool (relative to the working directory) fsync=interval" in out


def test_secret_hides_itself() -> None:
    secret = Secret("hunter2")
    assert str(secret) == repr(secret) == f"{secret}" == "<secret>"
    assert secret.reveal() == "hunter2"
    assert secret == Secret("hunter2") and secret != Secret("other")


def test_config_objects_are_frozen() -> None:
    config = parse_config("remote_write: [{url: 'http://x:1/w'}]", env={})
    assert isinstance(config, Config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.remote_write[0].url = "http://y/"  # type: ignore[misc]
    hash(config)


# ---------------------------------------------------------------------------------------------
# Audit: shadow destinations and the audit section

AUDIT_VALUES = [
    # id, yaml, expected AuditConfig fields
    (
        "defaults",
        "",
        {
            "window": 7200.0,
            "series_limit": 50_000_000,
            "max_series": 2_000_000,
            "rate_window": 300.0,
            "currency": "USD",
            "refresh": 10.0,
        },
    ),
    (
        "every_key",
        "audit: {window: 30m, series_limit: 10000000, max_series: 500000,"
        " rate_window: 1m, currency: EUR, refresh: 30s}",
        {
            "window": 1800.0,
            "series_limit": 10_000_000,
            "max_series": 500_000,
            "rate_window": 60.0,
            "currency": "EUR",
            "refresh": 30.0,
        },
    ),
    ("refresh_0_builds_every_answer", "audit: {refresh: 0s}", {"refresh": 0.0}),
]


@pytest.mark.parametrize(
    ("section", "expected"), [c[1:] for c in AUDIT_VALUES], ids=[c[0] for c in AUDIT_VALUES]
)
def test_audit_values(section: str, expected: dict[str, object]) -> None:
    audit = parse_config(f"{section}\nremote_write:\n  - url: http://x:1/w\n", env={}).audit
    assert {key: getattr(audit, key) for key in expected} == expected


def test_audit_price_tiers_read_in_order() -> None:
    text = (
        "audit:\n  price_tiers:\n    - {up_to_samples: 1000, per_million: 2}\n"
        "    - {up_to_samples: 5000, per_million: 1.5}\n    - {per_million: 0}\n"
        "remote_write:\n  - url: http://x:1/w\n"
    )
    tiers = parse_config(text, env={}).audit.price_tiers
    assert tiers == (
        PriceTier(per_million=2.0, up_to_samples=1000),
        PriceTier(per_million=1.5, up_to_samples=5000),
        PriceTier(per_million=0.0),
    )


AUDIT_ERRORS = [
    ("refresh_negative", "audit: {refresh: -1s}", "audit.refresh: not a valid duration string"),
    (
        "tiers_empty",
        "audit: {price_tiers: []}",
        "audit.price_tiers: expected a non-empty list of tiers, got an empty list",
    ),
    ("tiers_not_list", "audit: {price_tiers: 0.09}", "audit.price_tiers: expected a non-empty"),
    (
        "last_tier_bounded",
        "audit: {price_tiers: [{up_to_samples: 10, per_million: 1}]}",
        "audit.price_tiers[0].up_to_samples: the last tier has no bound",
    ),
    (
        "middle_tier_unbounded",
        "audit: {price_tiers: [{per_million: 1}, {per_million: 2}]}",
        "audit.price_tiers[0].up_to_samples: required on every tier but the last",
    ),
    (
        "tiers_not_ascending",
        "audit: {price_tiers: [{up_to_samples: 10, per_million: 1},"
        " {up_to_samples: 10, per_million: 1}, {per_million: 1}]}",
        "audit.price_tiers[1].up_to_samples: must be >= 11",
    ),
    (
        "negative_price",
        "audit: {price_tiers: [{per_million: -1}]}",
        "audit.price_tiers[0].per_million: expected a finite price >= 0",
    ),
    (
        "price_string",
        "audit: {price_tiers: [{per_million: '0.09'}]}",
        "audit.price_tiers[0].per_million: expected a finite price >= 0",
    ),
    (
        "tier_unknown_key",
        "audit: {price_tiers: [{price: 1}]}",
        "audit.price_tiers[0].price: unknown key",
    ),
    (
        "infinite_price",
        "audit: {price_tiers: [{per_million: .inf}]}",
        "audit.price_tiers[0].per_million: expected a finite price >= 0",
    ),
    (
        "nan_price",
        "audit: {price_tiers: [{per_million: .nan}]}",
        "audit.price_tiers[0].per_million: expected a finite price >= 0",
    ),
    (
        "price_missing",
        "audit: {price_tiers: [{up_to_samples: 5, per_million: 1}, {}]}",
        "audit.price_tiers[1].per_million: required",
    ),
    ("window_zero", "audit: {window: 0s}", "audit.window: must be a positive duration"),
    ("limit_zero", "audit: {series_limit: 0}", "audit.series_limit: must be >= 1"),
    ("currency_empty", "audit: {currency: ' '}", "audit.currency: must not be empty"),
    ("unknown_key", "audit: {limit: 5}", "audit.limit: unknown key"),
]


@pytest.mark.parametrize(
    ("section", "message"), [c[1:] for c in AUDIT_ERRORS], ids=[c[0] for c in AUDIT_ERRORS]
)
def test_audit_errors(section: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(f"{section}\nremote_write:\n  - url: http://x:1/w\n", env={})
    assert str(info.value).startswith(message)


SHADOW_CASES = [
    # id, destination yaml, expected (name, url, shadow, audited) or an error message
    ("shadow_without_url", "{name: ws-audit, shadow: true}", ("ws-audit", "", True, True)),
    (
        "shadow_with_url",
        "{url: 'http://ws:1/w', shadow: true}",
        ("ws", "http://ws:1/w", True, True),
    ),
    (
        "audit_a_real_destination",
        "{url: 'http://ws:1/w', audit: true}",
        ("ws", "http://ws:1/w", False, True),
    ),
    (
        "shadow_without_url_or_name",
        "{shadow: true}",
        "remote_write[1].name: a shadow destination without url needs a name",
    ),
    ("url_still_required_without_shadow", "{name: x}", "remote_write[1].url: is required"),
]


@pytest.mark.parametrize(
    ("dest", "expected"), [c[1:] for c in SHADOW_CASES], ids=[c[0] for c in SHADOW_CASES]
)
def test_shadow_destinations(dest: str, expected: tuple[object, ...] | str) -> None:
    text = f"remote_write:\n  - url: http://x:1/w\n  - {dest}\n"
    if isinstance(expected, str):
        with pytest.raises(ConfigError) as info:
            parse_config(text, env={})
        assert str(info.value).startswith(expected)
        return
    d = parse_config(text, env={}).remote_write[1]
    assert (d.name, d.url, d.shadow, d.audited) == expected


def test_describe_config_shows_shadow_and_audit() -> None:
    text = (
        "audit: {series_limit: 1000}\nremote_write:\n  - url: http://x:1/w\n    audit: true\n"
        "  - {name: ws-audit, shadow: true}\n"
    )
    described = describe_config(parse_config(text, env={}))
    assert "audit: window=2h series_limit=1,000 " in described
    assert "  audit: yes: sent, and counted by the audit" in described
    assert "  url: (none)\n" in described
    assert "  shadow: yes: counted by the audit, never queued or sent" in described
    shadow_part = described.split("destination ws-audit:")[1]
    assert "queue_config" not in shadow_part and "auth:" not in shadow_part


def test_describe_rw2_sigv4_notes_and_regex_as_written() -> None:
    text = """remote_write:
  - url: https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write
    sigv4: {region: us-east-1}
    protobuf_message: io.prometheus.write.v2.Request
    write_relabel_configs:
      - {source_labels: [__name__], regex: 'gpu\\.utilization|it''s', action: keep}
      - {source_labels: [job], regex: '(.+)', target_label: job_copy, replacement: 'a\\1'}
  - url: http://prometheus:9090/api/v1/write
"""
    out = describe_config(parse_config(text, env={}))
    workspace, other = out.split("destination prometheus:")
    assert "remote write 1.0 from the first 415, or 2xx that wrote nothing, until a reload" in (
        workspace
    )
    assert "the managed workspace speaks remote write 1.0 only" in workspace
    assert "(send is not used with remote write 2.0" in workspace
    assert 'regex="gpu\\\\.utilization|it\'s"' in workspace  # a quote inside: Python's repr
    assert "replacement='a\\1'" in workspace  # backslashes as written
    assert "remote write 1.0 (protobuf_message: prometheus.WriteRequest)" in other
    assert "send is not used" not in other


MEMORY = [
    # id, YAML, the memory line check-config ends with
    (
        "rwrouter_defaults",
        "remote_write: [{url: 'http://p:9090/w'}]\n",
        "memory: about 1558MiB per process (per worker with --workers) = bodies 128MiB"
        " + relabel_cache 1024MiB + read_ahead 256MiB + base 150MiB",
    ),
    (
        "bodies_bound_and_audit",
        "server: {max_buffered_body_bytes: 512MiB}\n"
        "relabel_cache: {max_bytes: 256MiB}\naudit: {max_series: 500000}\n"
        "remote_write:\n"
        "  - {url: 'http://p:9090/w', audit: true, queue_config: {max_memory_bytes: 64MiB}}\n"
        "  - {name: candidate, shadow: true}\n",
        "memory: about 1078MiB per process (per worker with --workers) = bodies 512MiB"
        " + relabel_cache 256MiB + read_ahead 64MiB + audit 96MiB + base 150MiB",
    ),
    (
        "series_budget",
        "remote_write:\n"
        "  - {url: 'http://p:9090/w', series_limit: 1000000, on_series_limit: drop}\n",
        "memory: about 1654MiB per process (per worker with --workers) = bodies 128MiB"
        " + relabel_cache 1024MiB + read_ahead 256MiB + series_budget 96MiB + base 150MiB",
    ),
]


@pytest.mark.parametrize(("text", "line"), [c[1:] for c in MEMORY], ids=[c[0] for c in MEMORY])
def test_describe_config_ends_with_the_memory_estimate(text: str, line: str) -> None:
    # The Helm chart's sum (tests/deploy/test_helm.py: 1558Mi for rwrouter's defaults).
    assert describe_config(parse_config(text, env={})).splitlines()[-1] == line


DESCRIBED_NAMES = [
    pytest.param(
        "ha_dedup: {}",
        "  ha_dedup: cluster_label=cluster replica_label=__replica__ failover_timeout=30s"
        " (only the elected replica's samples per cluster; __replica__ removed)",
        id="ha-legacy-names-as-they-are",
    ),
    pytest.param(
        "ha_dedup: {cluster_label: my cluster, replica_label: service.replica}",
        '  ha_dedup: cluster_label="my cluster" replica_label="service.replica"'
        " failover_timeout=30s"
        ' (only the elected replica\'s samples per cluster; "service.replica" removed)',
        id="ha-utf8-names-quoted",
    ),
    pytest.param(
        "ha_dedup: {cluster_label: 1st, replica_label: 'say \"hi\"'}",
        '  ha_dedup: cluster_label="1st" replica_label="say \\"hi\\"" failover_timeout=30s'
        ' (only the elected replica\'s samples per cluster; "say \\"hi\\"" removed)',
        id="ha-digit-first-and-quotes-escaped",
    ),
    pytest.param(
        "write_relabel_configs: [{source_labels: [my label, job, 2x], regex: a, action: keep}]",
        '    [0] action=keep source_labels=["my label", job, "2x"] regex=\'a\'',
        id="rule-source-labels",
    ),
    pytest.param(
        "write_relabel_configs: [{source_labels: [job], target_label: my target, replacement: x}]",
        "    [0] action=replace source_labels=[job] regex='(.*)' target_label=\"my target\""
        " replacement='x'",
        id="rule-target-label-quoted",
    ),
    pytest.param(
        "write_relabel_configs: [{source_labels: [job], target_label: '${1}_total'}]",
        "    [0] action=replace source_labels=[job] regex='(.*)' target_label=${1}_total"
        " replacement='$1'",
        id="rule-target-label-template-as-it-is",
    ),
]


@pytest.mark.parametrize(("snippet", "line"), DESCRIBED_NAMES)
def test_describe_quotes_utf8_label_names_as_prometheus_3(snippet: str, line: str) -> None:
    """check-config prints a label name that is not a legacy one as Prometheus 3 prints it
    ({"my label"="v"}): ha_dedup's labels and the rules' source and target labels."""
    text = f"remote_write:\n  - url: http://x:1/w\n    {snippet}\n"
    assert line in describe_config(parse_config(text, env={})).splitlines()


URL = "url: http://x:1/w"
# section as the docs name it -> (its dataclass, the file with {kv} in that section)
DURATION_SECTIONS = {
    "server": (ServerConfig, "server: {{{kv}}}\nremote_write: [{{" + URL + "}}]"),
    "storage": (StorageConfig, "storage: {{{kv}}}\nremote_write: [{{" + URL + "}}]"),
    "relabel_cache": (
        RelabelCacheConfig,
        "relabel_cache: {{{kv}}}\nremote_write: [{{" + URL + "}}]",
    ),
    "audit": (AuditConfig, "audit: {{{kv}}}\nremote_write: [{{" + URL + "}}]"),
    "remote_write[]": (
        DestinationConfig,
        "remote_write: [{{" + URL + ", series_limit: 1, on_series_limit: drop, {kv}}}]",
    ),
    "queue_config": (QueueConfig, "remote_write: [{{" + URL + ", queue_config: {{{kv}}}}}]"),
    "metadata_config": (
        MetadataConfig,
        "remote_write: [{{" + URL + ", metadata_config: {{{kv}}}}}]",
    ),
    "ha_dedup": (HaDedupConfig, "remote_write: [{{" + URL + ", ha_dedup: {{{kv}}}}}]"),
}


def _accepts(template: str, key: str, value: str) -> str | None:
    """None when the file with ``key: value`` parses, else its error."""
    try:
        parse_config(template.format(kv=f"{key}: {value}"), env={})
    except ConfigError as exc:
        return str(exc)
    return None


def _durations_where_zero_is_allowed() -> tuple[set[str], set[str]]:
    """Every duration key of the file (the keys refusing ``1x`` as a duration) and those
    accepting ``0``, found by parsing, as ``section.key``."""
    durations, zero = set(), set()
    for section, (model, template) in DURATION_SECTIONS.items():
        for field in dataclasses.fields(model):
            if "not a valid duration" not in (_accepts(template, field.name, "1x") or ""):
                continue
            durations.add(f"{section}.{field.name}")
            if _accepts(template, field.name, "0") is None:
                zero.add(f"{section}.{field.name}")
    return durations, zero


def test_the_docs_list_exactly_the_durations_where_zero_is_allowed() -> None:
    """docs/configuration.md "Durations": "0 is refused everywhere except in <list>": the list
    is the code's truth."""
    durations, zero = _durations_where_zero_is_allowed()
    assert len(durations) >= 20  # the search found the duration keys
    text = (ROOT / "docs" / "configuration.md").read_text()
    paragraph = text.split("### Durations", 1)[1].split("###", 1)[0]
    listed = paragraph.split("everywhere except in", 1)[1].split(", where", 1)[0]
    documented = set(re.findall(r"`([a-z_\[\]]+\.[a-z_0-9]+)`", listed))
    assert documented == zero
    assert zero == {
        "server.shutdown_timeout",
        "audit.refresh",
        "queue_config.max_retry_duration",
        "queue_config.max_retry_duration_on_http_429",
        "queue_config.sample_age_limit",
    }


# go-yaml v2 resolve.go (Prometheus's YAML parser): the YAML 1.1 boolean words.
GO_YAML_V2_TRUE = ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")
GO_YAML_V2_FALSE = ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        *(pytest.param(w, True, id=f"true_{w}") for w in GO_YAML_V2_TRUE),
        *(pytest.param(w, False, id=f"false_{w}") for w in GO_YAML_V2_FALSE),
        *(
            pytest.param(w, None, id=f"refused_{w}")
            for w in ('"true"', "'y'", "1", "tRue", "yEs", "ye", "nO")
        ),
    ],
)
def test_booleans_are_go_yaml_v2_s_as_documented(word: str, expected: bool | None) -> None:
    """docs/configuration.md ("Types are checked"): go-yaml v2's boolean words, nothing else
    (a quoted word is a string there too)."""
    text = f"remote_write:\n  - url: http://a/x\n    send_exemplars: {word}\n"
    if expected is None:
        with pytest.raises(ConfigError, match="expected true or false"):
            parse_config(text, env={})
    else:
        assert parse_config(text, env={}).remote_write[0].send_exemplars is expected


def test_the_docs_list_go_yaml_v2_s_boolean_words() -> None:
    paragraph = (ROOT / "docs" / "configuration.md").read_text().split("- Types are checked")[1]
    paragraph = paragraph.split("\n- ", 1)[0]
    for word in GO_YAML_V2_TRUE + GO_YAML_V2_FALSE:
        assert f"`{word}`" in paragraph, word


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("y", "y", id="plain_y"),
        pytest.param("N", "N", id="plain_N"),
        pytest.param("'n'", "n", id="quoted_n"),
    ],
)
def test_a_short_boolean_word_is_a_string_in_a_string_field(value: str, expected: str) -> None:
    """go-yaml v2 decodes a plain ``y`` into a string field as the text itself."""
    text = (
        "remote_write:\n  - url: http://a/x\n    write_relabel_configs:\n"
        f"      - {{target_label: t, replacement: {value}}}\n"
    )
    rule = parse_config(text, env={}).remote_write[0].write_relabel_configs[0]
    assert rule.replacement == expected


@pytest.mark.parametrize(
    ("region", "env", "expected"),
    [
        pytest.param("ap-south-1", {"AWS_REGION": "x"}, ("ap-south-1", "sigv4.region"), id="file"),
        pytest.param(
            None,
            {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-west-2"},
            ("eu-west-1", "AWS_REGION"),
            id="aws_region_first",
        ),
        pytest.param(
            None,
            {"AWS_REGION": "", "AWS_DEFAULT_REGION": "eu-west-1"},
            ("eu-west-1", "AWS_DEFAULT_REGION"),
            id="aws_default_region",
        ),
        pytest.param(None, {"AWS_PROFILE": "writer"}, None, id="profile_is_looked_up_apart"),
    ],
)
def test_the_signing_region_says_where_it_came_from(
    region: str | None, env: dict[str, str], expected: tuple[str, str] | None
) -> None:
    v4 = SigV4Config(region=region)
    assert v4.region_source(env) == expected
    assert v4.signing_region(env) == (None if expected is None else expected[0])
