"""What a real Prometheus writes as its own ``remote_write`` block (``GET
/api/v1/status/config``), for the tests of pasting it into rwrouter's configuration.

:func:`sender_config` is a ``prometheus.yml`` whose ``remote_write`` uses many keys (sigv4
with a region, queue_config, metadata_config, write_relabel_configs, basic_auth and
authorization from files, tls_config, proxy_url; ``protobuf_message``, ``round_robin_dns``,
``sample_age_limit`` and ``sigv4.service_name`` for Prometheus 3 only: 2.42 refuses them).
:func:`dumped_remote_write` starts a Prometheus with it and returns the dumped list
(:func:`dumped_whole_config`: the whole dump of a ``prometheus.yml`` with every section);
:func:`fixture_text` is that list as the checked-in fixture
``tests/testdata/promdump/prometheus-<generation>.yml`` holds it (the work directory written
as ``/etc/prometheus``). ``RWROUTER_REGENERATE_PROMDUMP=1`` makes the integration test
(``tests/integration/test_prometheus_paste.py``) rewrite the fixtures.

Nothing is sent: the Prometheus scrapes nothing, and every URL is on 127.0.0.1.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.support.prometheus import PrometheusProcess

__all__ = [
    "EXPECTED_NOTES",
    "FIXTURES",
    "REGENERATE",
    "WHOLE_CONFIG",
    "dumped_remote_write",
    "dumped_whole_config",
    "fixture_text",
    "sender_config",
]

FIXTURES = Path(__file__).resolve().parents[1] / "testdata" / "promdump"
REGENERATE = "RWROUTER_REGENERATE_PROMDUMP"
#: How a fixture writes the Prometheus's work directory (where its secret files are).
FIXTURE_DIR = "/etc/prometheus"
#: Files the sender's credentials come from (relative: Prometheus dumps them absolute).
SECRET_FILES = {"password": "s3cret\n", "token": "t0ken\n"}


def sender_config(generation: int) -> dict[str, Any]:
    """The ``prometheus.yml`` of a Prometheus ``generation`` (2 or 3) with three
    destinations: a sigv4 workspace, a self-hosted store over TLS with basic_auth, a Mimir
    with a bearer token behind a proxy."""
    three = generation >= 3
    workspace: dict[str, Any] = {
        "name": "workspace",
        "url": "http://127.0.0.1:9/workspaces/ws-0123/api/v1/remote_write",
        "remote_timeout": "20s",
        "headers": {"X-Team": "gpu"},
        "sigv4": {"region": "us-east-1", **({"service_name": "aps"} if three else {})},
        "queue_config": {
            "capacity": 5000,
            "max_shards": 10,
            "min_shards": 2,
            "max_samples_per_send": 1000,
            "batch_send_deadline": "2s",
            "min_backoff": "50ms",
            "max_backoff": "10s",
            "retry_on_http_429": True,
            **({"sample_age_limit": "50m"} if three else {}),
        },
        "metadata_config": {"send": True, "send_interval": "2m", "max_samples_per_send": 500},
        "write_relabel_configs": [
            {
                "source_labels": ["__name__"],
                "regex": "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_.*",
                "action": "keep",
            },
            {"regex": "pod_uid", "action": "labeldrop"},
            {"source_labels": ["Hostname"], "target_label": "node"},
            {
                "source_labels": ["gpu"],
                "modulus": 4,
                "target_label": "__tmp_shard",
                "action": "hashmod",
            },
            {"regex": "label_(.+)", "action": "labelmap"},
        ],
    }
    self_hosted: dict[str, Any] = {
        "name": "self-hosted",
        "url": "https://127.0.0.1:9/api/v1/write",
        "basic_auth": {"username": "rwrouter", "password_file": "password"},
        "tls_config": {
            "insecure_skip_verify": True,
            "server_name": "prometheus.internal",
            "min_version": "TLS12",
        },
        "send_exemplars": True,
        "send_native_histograms": True,
        "enable_http2": True,
        **(
            {"protobuf_message": "io.prometheus.write.v2.Request", "round_robin_dns": True}
            if three
            else {}
        ),
    }
    mimir = {
        "name": "mimir",
        "url": "http://127.0.0.1:9/api/v1/push",
        "authorization": {"credentials_file": "token"},
        "proxy_url": "http://127.0.0.1:9",
        "follow_redirects": False,
        "metadata_config": {"send": False},
    }
    return {"global": {"scrape_interval": "15s"}, "remote_write": [workspace, self_hosted, mimir]}


def dumped_remote_write(binary: str, generation: int, workdir: Path) -> list[dict[str, Any]]:
    """Start ``binary`` (a Prometheus ``generation``) in ``workdir`` with
    :func:`sender_config` and return the ``remote_write`` list of its
    ``/api/v1/status/config``. The caller's environment needs AWS credentials (a sigv4
    destination's credentials are resolved at start)."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in SECRET_FILES.items():
        (workdir / name).write_text(text)
    config = yaml.safe_dump(sender_config(generation), sort_keys=False)
    with PrometheusProcess.start(config, workdir=workdir, binary=binary) as prom:
        url = f"{prom.url}/api/v1/status/config"
        with urllib.request.urlopen(url, timeout=10) as answer:
            dumped = yaml.safe_load(json.load(answer)["data"]["yaml"])
    block: list[dict[str, Any]] = dumped["remote_write"]
    return block


#: A ``prometheus.yml`` with every top-level section Prometheus 3 has (besides
#: ``remote_write``), each set so that its dump writes it, and global keys besides the
#: scrape interval: what a user pastes whole into rwrouter's file.
WHOLE_CONFIG: dict[str, Any] = {
    "global": {
        "scrape_interval": "15s",
        "evaluation_interval": "30s",
        "external_labels": {"cluster": "gpu"},
        "query_log_file": "query.log",
    },
    "runtime": {"gogc": 75},
    "rule_files": ["rules.yml"],
    "scrape_configs": [{"job_name": "none", "static_configs": [{"targets": ["127.0.0.1:9"]}]}],
    "alerting": {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:9"]}]}]},
    "storage": {
        "tsdb": {"out_of_order_time_window": "10m"},
        "exemplars": {"max_exemplars": 1000},
    },
    "tracing": {"endpoint": "127.0.0.1:9", "insecure": True},
    "otlp": {"promote_resource_attributes": ["service.name"]},
    "remote_read": [{"url": "http://127.0.0.1:9/api/v1/read"}],
    "remote_write": [{"name": "self-hosted", "url": "http://127.0.0.1:9/api/v1/write"}],
}


def dumped_whole_config(binary: str, workdir: Path) -> dict[str, Any]:
    """Start ``binary`` (a Prometheus 3) in ``workdir`` with :data:`WHOLE_CONFIG` and return
    its whole ``/api/v1/status/config``, parsed."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "rules.yml").write_text("groups: []\n")
    config = yaml.safe_dump(WHOLE_CONFIG, sort_keys=False)
    with PrometheusProcess.start(config, workdir=workdir, binary=binary) as prom:
        url = f"{prom.url}/api/v1/status/config"
        with urllib.request.urlopen(url, timeout=10) as answer:
            dumped: dict[str, Any] = yaml.safe_load(json.load(answer)["data"]["yaml"])
    return dumped


def fixture_text(block: list[dict[str, Any]], workdir: Path, *, version: str) -> str:
    """``block`` as an rwrouter configuration file (``remote_write:`` and the list, in the
    order Prometheus wrote it), with ``workdir`` written as :data:`FIXTURE_DIR`, under a
    comment naming ``version`` (the first line of ``prometheus --version``)."""
    text = yaml.safe_dump({"remote_write": block}, sort_keys=False)
    header = (
        f"# The remote_write list of /api/v1/status/config of {version}\n"
        "# (tests/support/promdump.py). Regenerate: RWROUTER_REGENERATE_PROMDUMP=1 "
        "pytest tests/integration/test_prometheus_paste.py\n"
    )
    return header + text.replace(str(workdir), FIXTURE_DIR)


#: The keys ``check-config`` notes in each generation's dump, in the order of the file:
#: what applies there differs from what the Prometheus did (``follow_redirects: true``,
#: ``enable_http2: true``, ``send_exemplars``/``send_native_histograms`` left out as false;
#: 2.42 writes ``tls_config.min_version`` as Go's number).
EXPECTED_NOTES = {
    3: (
        "remote_write[0].follow_redirects",
        "remote_write[0].send_exemplars",
        "remote_write[0].send_native_histograms",
        "remote_write[1].follow_redirects",
        "remote_write[1].enable_http2",
        "remote_write[2].send_exemplars",
        "remote_write[2].send_native_histograms",
    ),
    2: (
        "remote_write[0].follow_redirects",
        "remote_write[0].enable_http2",
        "remote_write[0].send_exemplars",
        "remote_write[0].send_native_histograms",
        "remote_write[1].follow_redirects",
        "remote_write[1].enable_http2",
        "remote_write[1].tls_config.min_version",
        "remote_write[2].enable_http2",
        "remote_write[2].send_exemplars",
        "remote_write[2].send_native_histograms",
    ),
}
