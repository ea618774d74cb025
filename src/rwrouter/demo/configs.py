"""Configuration files the demo writes: the sender Prometheus's ``prometheus.yml``, the
self-hosted Prometheus's (no scraping: it only receives remote write) and ``rwrouter.yaml``.

All are YAML text built from plain values, so what the demo runs is what the user can read in
its work directory.
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml  # type: ignore[import-untyped,unused-ignore]

from rwrouter.doubles.workspace_store import Limits

#: Series the managed workspace keeps (shared/reference/workload.md "Routing").
ALLOWLIST = "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_MEM_COPY_UTIL|DCGM_FI_PROF_.*"
SCRAPE_JOB = "gpu-node"
#: The demo's shadow destination: every DCGM family, counted by the audit, never sent.
SHADOW_DESTINATION = "workspace-all-dcgm"
#: ``job`` set per exporter kind by metric relabeling (workload.md's jobs), by name prefix.
JOB_BY_PREFIX = (
    ("DCGM_.*", "dcgm-exporter"),
    ("node_.*", "node-exporter"),
    ("container_.*", "kubelet"),
)
#: The sender's ``global.external_labels``: its remote write adds them, its own TSDB
#: lacks them (``rwrouter compare --external-label``).
SENDER_EXTERNAL_LABELS = (("prometheus", "demo-sender"),)
#: The workspace double's limits: it forgets a series' points older than its newest minus
#: 15 minutes (its backend Prometheus keeps them), so a long demo's memory stays bounded.
WORKSPACE_LIMITS = Limits(keep_points_s=900.0)


def _duration(seconds: float) -> str:
    """Prometheus duration text (``5s``, ``1500ms``)."""
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


RW2_MESSAGE = "io.prometheus.write.v2.Request"  # remote write 2.0 (rwrouter.protocol)


def sender_config(
    *,
    targets: Sequence[str],
    scrape_interval_s: float,
    router_url: str,
    remote_write_2: bool = False,
) -> str:
    """The sender: scrapes every exporter node, remote-writes everything to rwrouter, in
    remote write 2.0 with ``remote_write_2`` (a Prometheus >= 3.8). (``cluster`` comes from
    the exporters' own labels.)"""
    relabel = [
        {"source_labels": ["__name__"], "regex": regex, "target_label": "job", "replacement": job}
        for regex, job in JOB_BY_PREFIX
    ]
    deadline = min(2.0, scrape_interval_s)
    config = {
        "global": {
            "scrape_interval": _duration(scrape_interval_s),
            "scrape_timeout": _duration(min(10.0, scrape_interval_s)),
            "evaluation_interval": _duration(scrape_interval_s),
            "external_labels": dict(SENDER_EXTERNAL_LABELS),
        },
        "scrape_configs": [
            {
                "job_name": SCRAPE_JOB,
                "static_configs": [{"targets": list(targets)}],
                "metric_relabel_configs": relabel,
            }
        ],
        "remote_write": [
            {
                "name": "rwrouter",
                "url": f"{router_url}/api/v1/write",
                **({"protobuf_message": RW2_MESSAGE} if remote_write_2 else {}),
                "queue_config": {
                    "batch_send_deadline": _duration(deadline),
                    "max_backoff": "1s",
                },
            }
        ],
    }
    return _dump(config, "sender Prometheus: scrapes the exporter nodes, writes to rwrouter")


def self_hosted_config() -> str:
    """The self-hosted store: no scrape targets; data arrives by remote write only."""
    config = {"global": {"external_labels": {"prometheus": "demo-self-hosted"}}}
    return _dump(config, "self-hosted Prometheus: receives rwrouter's fallback destination")


def router_config(
    *,
    listen_port: int,
    workspace_url: str,
    region: str,
    access_key: str,
    secret_key: str,
    self_hosted_url: str,
    batch_send_deadline_s: float,
    remote_write_2: bool = False,
    rwrouter: str = "rwrouter",
    storage_path: str | None = None,
) -> str:
    """rwrouter's config: the allowlisted DCGM series to the workspace, the rest to the
    self-hosted Prometheus (``fallback: true``; in remote write 2.0 with ``remote_write_2``, a
    Prometheus 3 store). The audit counts what the workspace gets (``audit: true``) and what
    it would get with every DCGM family (a ``shadow`` destination: counted, never sent):
    ``rwrouter audit``, ``GET /-/audit``, the status page. ``rwrouter``: how its "Check it
    with" comment calls rwrouter (:func:`~rwrouter.demo.binaries.rwrouter_command`).
    ``storage_path``: its ``storage.path`` (the demo gives an absolute one, so that
    ``rwrouter rejected list --config`` reads this router's store from any directory)."""
    queue = {"batch_send_deadline": _duration(batch_send_deadline_s), "max_backoff": "2s"}
    config = {
        "server": {"listen_address": f"127.0.0.1:{listen_port}", "shutdown_timeout": "5s"},
        **({"storage": {"path": storage_path}} if storage_path else {}),
        "remote_write": [
            {
                "name": "workspace",
                "url": workspace_url,
                "sigv4": {"region": region, "access_key": access_key, "secret_key": secret_key},
                "write_relabel_configs": [
                    {"source_labels": ["__name__"], "regex": ALLOWLIST, "action": "keep"}
                ],
                "queue_config": {**queue, "retry_on_http_429": True},
                "audit": True,
            },
            {
                "name": SHADOW_DESTINATION,
                "shadow": True,
                "write_relabel_configs": [
                    {"source_labels": ["__name__"], "regex": "DCGM_.*", "action": "keep"}
                ],
            },
            {
                "name": "self-hosted",
                "url": f"{self_hosted_url}/api/v1/write",
                **({"protobuf_message": RW2_MESSAGE} if remote_write_2 else {}),
                "fallback": True,
                "queue_config": queue,
            },
        ],
    }
    return _dump(
        config,
        "rwrouter demo config: critical GPU series -> the workspace double (SigV4), the rest ->"
        f" the self-hosted Prometheus.\n# Check it with: {rwrouter} check-config <this file>",
    )


def _dump(config: object, title: str) -> str:
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    return f"# {title}\n# Written by `rwrouter demo`.\n{body}"
