"""Human-readable summary of a :class:`Config` (what ``rwrouter check-config FILE`` prints).

Never prints a secret: passwords, bearer credentials and secret keys show as ``<secret>``,
header values are not shown, URLs go through :func:`~rwrouter.config.values.redact_url`
(user info and query values as ``xxxxx``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from rwrouter.config.model import (
    AuditConfig,
    Config,
    DestinationConfig,
    EscapingScheme,
    Fsync,
    HaDedupConfig,
    QueueConfig,
    StorageConfig,
    TLSConfig,
)
from rwrouter.config.values import format_duration, format_size, redact_url
from rwrouter.relabel import RelabelConfig
from rwrouter.relabel.names import go_quote, is_legacy_label_name

__all__ = ["describe_config", "describe_rule", "label_name", "memory_estimate"]


def describe_config(config: Config, *, regions: Mapping[int, tuple[str, str]] | None = None) -> str:
    """Multi-line text: server settings, storage, global rules, then each destination with its
    name, URL, fallback flag, auth mode, queue settings and rules (one per line). Ends with a
    newline. ``regions``: by destination index, a sigv4 destination's signing region and where
    it came from (:func:`rwrouter.auth.schemes.sigv4_region_source`: ``check-config``
    resolves it as ``run`` does); one not set in the file and not given shows as "(from the
    AWS environment)"."""
    server = config.server
    lines = [
        f"config: {config.source}",
        f"global: metric_name_validation_scheme={config.global_.metric_name_validation_scheme}",
        f"server: listen_address={server.listen_address}"
        f" max_request_bytes={format_size(server.max_request_bytes)}"
        f" max_decoded_bytes={format_size(server.max_decoded_bytes)}"
        f" queue_full_retry_after={format_duration(server.queue_full_retry_after)}"
        f" read_timeout={format_duration(server.read_timeout)}"
        f" shutdown_timeout={format_duration(server.shutdown_timeout)}",
        f"  bounds: max_concurrent_reads={server.max_concurrent_reads}"
        f" max_buffered_body_bytes={format_size(server.max_buffered_body_bytes)}"
        f" read_wait_timeout={format_duration(server.read_wait_timeout)}"
        f" header_read_timeout={format_duration(server.header_read_timeout)}"
        f" idle_timeout={format_duration(server.idle_timeout)}"
        f" max_connections={server.max_connections}",
        f"storage: {_storage(config.storage)}",
        f"relabel_cache: max_entries={config.relabel_cache.max_entries}"
        f" max_bytes={format_size(config.relabel_cache.max_bytes)}"
        f" max_age={format_duration(config.relabel_cache.max_age)}"
        f" max_tenants={config.relabel_cache.max_tenants}",
        f"audit: {_audit(config.audit)}",
        "relabel_configs (global, applied to every series before fan-out):",
        *_rules(config.relabel_configs),
    ]
    for i, dest in enumerate(config.remote_write):
        lines.extend(_destination(dest, (regions or {}).get(i)))
    lines.append(_memory(config))
    return "\n".join(lines) + "\n"


AUDIT_SERIES_BYTES = 100  # memory per series an audit remembers (bench/RESULTS.md: 83)
BASE_MEMORY = 150 * 1024 * 1024  # the interpreter, libraries and buffers besides the bounds


def memory_estimate(config: Config) -> dict[str, int]:
    """The memory bounds of one router process (one ``--workers`` worker), in bytes, by part:
    ``bodies`` (``server.max_buffered_body_bytes``), ``relabel_cache``
    (``relabel_cache.max_bytes``), ``read_ahead`` (the ``max_memory_bytes`` of the
    destinations that are not shadow), ``audit`` (``audit.max_series`` x
    :data:`AUDIT_SERIES_BYTES` per audited destination), ``series_budget`` (``series_limit``
    x :data:`AUDIT_SERIES_BYTES` per destination with a series budget: its active series) and
    ``base`` (:data:`BASE_MEMORY`).
    The same sum as the Helm chart's (``rwrouter.bounds`` in deploy/helm's _helpers.tpl)."""
    dests = config.remote_write
    return {
        "bodies": config.server.max_buffered_body_bytes,
        "relabel_cache": config.relabel_cache.max_bytes,
        "read_ahead": sum(d.queue_config.max_memory_bytes for d in dests if not d.shadow),
        "audit": sum(d.audited for d in dests) * config.audit.max_series * AUDIT_SERIES_BYTES,
        "series_budget": sum(d.series_limit or 0 for d in dests) * AUDIT_SERIES_BYTES,
        "base": BASE_MEMORY,
    }


def _memory(config: Config) -> str:
    """The memory estimate in MiB (rounded up), parts of 0 left out."""
    parts = memory_estimate(config)
    shown = " + ".join(f"{name} {_mib(size)}" for name, size in parts.items() if size)
    total = _mib(sum(parts.values()))
    return f"memory: about {total} per process (per worker with --workers) = {shown}"


def _mib(size: int) -> str:
    return f"{-(-size // (1024 * 1024))}MiB"


def _audit(audit: AuditConfig) -> str:
    tiers = ", ".join(
        f"{t.per_million:g}/M" + (f" up to {t.up_to_samples:,}" if t.up_to_samples else " beyond")
        for t in audit.price_tiers
    )
    return (
        f"window={format_duration(audit.window)} series_limit={audit.series_limit:,}"
        f" max_series={audit.max_series:,} rate_window={format_duration(audit.rate_window)}"
        f" price_tiers={audit.currency} [{tiers}] a month refresh={format_duration(audit.refresh)}"
    )


def _ha(ha: HaDedupConfig) -> str:
    """The HA labels quoted as Prometheus 3 prints a UTF-8 name (:func:`label_name`)."""
    replica = label_name(ha.replica_label)
    return (
        f"cluster_label={label_name(ha.cluster_label)} replica_label={replica}"
        f" failover_timeout={format_duration(ha.failover_timeout)}"
        f" (only the elected replica's samples per cluster; {replica} removed)"
    )


def _budget(dest: DestinationConfig) -> str:
    """A destination's series budget on one line (``series_limit`` set)."""
    where = "the fallback destination" if dest.on_series_limit == "fallback" else "dropped"
    near = " (series_limit_near_quota)" if dest.series_limit_near_quota else ""
    return (
        f"{dest.series_limit:,} active series{near} within series_window="
        f"{format_duration(dest.series_window)}; a new series past it: {where}"
        f" (on_series_limit={dest.on_series_limit})"
    )


def _destination(dest: DestinationConfig, region: tuple[str, str] | None) -> list[str]:
    role = (
        "yes: receives the series no non-fallback, non-shadow destination kept"
        if dest.fallback
        else "no: receives the series its write_relabel_configs keep"
    )
    lines = [
        f"destination {dest.name}:",
        f"  url: {redact_url(dest.url) if dest.url else '(none)'}",
        f"  fallback: {role}",
    ]
    if dest.shadow:  # no queue, no connection: only what decides its series
        return [
            *lines,
            "  shadow: yes: counted by the audit, never queued or sent",
            f"  send_exemplars={_flag(dest.send_exemplars)}"
            f" send_native_histograms={_flag(dest.send_native_histograms)}",
            "  write_relabel_configs:",
            *_rules(dest.write_relabel_configs, indent="    "),
        ]
    if dest.audit:
        lines.append("  audit: yes: sent, and counted by the audit")
    if dest.series_limit is not None:
        lines.append(f"  series_limit: {_budget(dest)}")
    lines += [
        f"  auth: {_auth(dest, region)}",
        f"  protocol: {_protocol(dest)}",
        f"  metric_name_escaping_scheme: {_escaping(dest)}",
        f"  remote_timeout: {format_duration(dest.remote_timeout)}",
    ]
    if dest.headers:
        names = ", ".join(name for name, _ in dest.headers)
        lines.append(f"  headers: {names} (values not shown)")
    if dest.tenant_header is not None:
        lines.append(f"  tenant_header: {dest.tenant_header} (each request's tenant)")
    if dest.ha_dedup is not None:
        lines.append(f"  ha_dedup: {_ha(dest.ha_dedup)}")
    if dest.tls_config is not None:
        lines.append(f"  tls_config: {_tls(dest.tls_config)}")
    if dest.proxy_url is not None:
        lines.append(f"  proxy_url: {redact_url(dest.proxy_url)}")
    meta = dest.metadata_config
    lines += [
        *_queue(dest.queue_config),
        f"  metadata_config: send={_flag(meta.send)}"
        f" send_interval={format_duration(meta.send_interval)}"
        f" max_samples_per_send={meta.max_samples_per_send}"
        + (
            " (send is not used with remote write 2.0: metadata goes inside each series)"
            if dest.protobuf_message != "prometheus.WriteRequest"
            else ""
        ),
        f"  send_exemplars={_flag(dest.send_exemplars)}"
        f" send_native_histograms={_flag(dest.send_native_histograms)}",
        "  write_relabel_configs:",
        *_rules(dest.write_relabel_configs, indent="    "),
    ]
    return lines


def _tls(tls: TLSConfig) -> str:
    fields = [
        f"{k}={v}"
        for k, v in (
            ("ca_file", tls.ca_file),
            ("cert_file", tls.cert_file),
            ("key_file", tls.key_file),
            ("server_name", tls.server_name),
            ("min_version", tls.min_version),
        )
        if v is not None
    ]
    fields.append(f"insecure_skip_verify={_flag(tls.insecure_skip_verify)}")
    return " ".join(fields)


def _protocol(dest: DestinationConfig) -> str:
    if dest.protobuf_message == "prometheus.WriteRequest":
        return "remote write 1.0 (protobuf_message: prometheus.WriteRequest)"
    text = (
        f"remote write 2.0 (protobuf_message: {dest.protobuf_message}; remote write 1.0 "
        "from the first 415, or 2xx that wrote nothing, until a reload)"
    )
    if dest.sigv4 is not None:
        text += (
            "; note: the managed workspace speaks remote write 1.0 only (it answers 415 "
            "to 2.0), so this destination would fall back at its first request"
        )
    return text


def _escaping(dest: DestinationConfig) -> str:
    scheme = dest.metric_name_escaping_scheme
    if scheme == EscapingScheme.ALLOW_UTF8:
        return "allow-utf-8 (UTF-8 metric and label names are sent as they are)"
    default = dest.sigv4 is not None and scheme == EscapingScheme.UNDERSCORES
    why = (
        "the default for a sigv4 destination: the managed workspace refuses UTF-8 names"
        if default
        else "set in the file"
    )
    return f"{scheme} (names outside the legacy character set are escaped; {why})"


def _auth(dest: DestinationConfig, resolved: tuple[str, str] | None) -> str:
    if dest.sigv4 is not None:
        sig = dest.sigv4
        region = sig.region or "(from the AWS environment)"
        if resolved is not None and not sig.region:
            region = f"{resolved[0]} (from {resolved[1]})"
        return f"sigv4 region={region} service={sig.service} credentials={sig.credential_source}"
    if dest.basic_auth is not None:
        basic = dest.basic_auth
        if basic.password_file is not None:
            password = f"from file {basic.password_file}"
        else:
            password = "<secret>" if basic.password is not None else "(empty)"
        return f"basic_auth username={basic.username} password {password}"
    if dest.authorization is not None:
        auth = dest.authorization
        source = (
            f"from file {auth.credentials_file}"
            if auth.credentials_file is not None
            else "<secret> (inline)"
        )
        return f"authorization type={auth.type} credentials {source}"
    return "none"


def _storage(storage: StorageConfig) -> str:
    """``path`` (said to be relative to the working directory when it is), the fsync policy
    (with its interval only for ``interval``, the only policy using it), the dead-letter bound."""
    where = "" if os.path.isabs(storage.path) else " (relative to the working directory)"
    fsync = f"fsync={storage.fsync}"
    if storage.fsync == Fsync.INTERVAL:
        fsync += f" fsync_interval={format_duration(storage.fsync_interval)}"
    return (
        f"path={storage.path}{where} {fsync}"
        f" rejected_max_bytes={format_size(storage.rejected_max_bytes)}"
    )


def _queue(queue: QueueConfig) -> list[str]:
    """Four lines: the disk queue and its admission policy, what the senders read ahead and
    send (``sample_age_limit`` only when set), the retry limits (``max_retry_duration`` 0
    shows as ``unlimited``; the 429 limit only when 429 is retried), the pacing."""
    retry_for = (
        format_duration(queue.max_retry_duration) if queue.max_retry_duration else "unlimited"
    )
    retries = (
        f"backoff={format_duration(queue.min_backoff)}..{format_duration(queue.max_backoff)}"
        f" max_retry_duration={retry_for} retry_on_http_429={_flag(queue.retry_on_http_429)}"
    )
    if queue.retry_on_http_429:
        limit = format_duration(queue.max_retry_duration_on_http_429)
        retries += f" max_retry_duration_on_http_429={limit}"
    sending = (
        f"    sending: shards={queue.min_shards}..{queue.max_shards} capacity={queue.capacity}"
        f" max_memory_bytes={format_size(queue.max_memory_bytes)}"
        f" max_samples_per_send={queue.max_samples_per_send}"
        f" batch_send_deadline={format_duration(queue.batch_send_deadline)}"
        f" max_request_bytes={format_size(queue.max_request_bytes)}"
    )
    if queue.sample_age_limit:
        sending += f" sample_age_limit={format_duration(queue.sample_age_limit)}"
    return [
        "  queue_config:",
        f"    disk: max_disk_bytes={format_size(queue.max_disk_bytes)} on_full={queue.on_full}",
        sending,
        f"    retries: {retries}",
        f"    pacing: {_pacing(queue)}",
    ]


def _pacing(queue: QueueConfig) -> str:
    """``off``, or the rate and burst (and the batch cap when the burst lowers it)."""
    if not queue.paced:
        return "off"
    text = (
        f"max_samples_per_second={queue.max_samples_per_second:g}"
        f" burst_samples={queue.burst_samples}"
    )
    if queue.batch_samples < queue.max_samples_per_send:
        text += f" (batches cut at {queue.batch_samples} samples)"
    return text


def _rules(rules: tuple[RelabelConfig, ...], *, indent: str = "  ") -> list[str]:
    if not rules:
        return [f"{indent}(none)"]
    return [f"{indent}[{i}] {describe_rule(rule)}" for i, rule in enumerate(rules)]


def describe_rule(rule: RelabelConfig) -> str:
    """One line: action, source_labels, regex, target_label, replacement (what applies)."""
    action = rule.action.value
    parts = [f"action={action}"]
    if rule.source_labels:
        parts.append(f"source_labels=[{', '.join(map(label_name, rule.source_labels))}]")
        if rule.separator != ";":
            parts.append(f"separator={rule.separator!r}")
    parts.append(f"regex={_text(rule.regex.text)}")
    if rule.target_label:
        parts.append(f"target_label={_target(rule.target_label)}")
    if action in ("replace", "labelmap"):
        parts.append(f"replacement={_text(rule.replacement)}")
    if action == "hashmod":
        parts.append(f"modulus={rule.modulus}")
    return " ".join(parts)


def _text(text: str) -> str:
    """A regex or replacement as written in YAML single quotes (``'gpu\\.util'``: backslashes
    as they are); Python's quoting when that cannot show it (quotes, control characters)."""
    if "'" in text or not text.isprintable():
        return repr(text)
    return f"'{text}'"


def label_name(name: str) -> str:
    """A label name as Prometheus 3 prints one (``{"my label"="v"}``, model/labels'
    ``String``): as it is when a legacy name (``[a-zA-Z_][a-zA-Z0-9_]*``), else quoted with Go's
    ``strconv.Quote`` (``"service.name"``, ``"my label"``, ``"1st"``)."""
    return name if is_legacy_label_name(name) else go_quote(name)


def _target(text: str) -> str:
    """A ``target_label`` (template text): as it is when a legacy name with ``$`` references
    (``${1}_total``), else quoted as :func:`label_name` quotes."""
    plain = text.replace("$", "_").replace("{", "_").replace("}", "_")
    return text if is_legacy_label_name(plain) else go_quote(text)


def _flag(value: bool) -> str:
    return "true" if value else "false"
