"""Test wrapper of :mod:`rwrouter.doubles.prometheus` (a real Prometheus as a test peer).

Re-exports the package's runner. When the ``prometheus`` binary is missing the calling test is
skipped locally, but fails when the ``CI`` environment variable is set: CI must never silently
skip the real-peer suites::

    @pytest.fixture(scope="session")
    def prometheus() -> Iterator[PrometheusProcess]:
        with PrometheusProcess.start(CONFIG) as prom:
            yield prom
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import pytest
import yaml

from rwrouter.doubles import prometheus as _runner
from rwrouter.doubles.prometheus import (
    MetricSample,
    PrometheusNotFoundError,
    free_port,
)

__all__ = [
    "MetricSample",
    "PrometheusNotFoundError",
    "PrometheusProcess",
    "free_port",
    "missing_prometheus",
    "prometheus_binary",
    "sender_yaml",
]


def missing_prometheus(exc: PrometheusNotFoundError) -> NoReturn:
    """Skip the calling test, or fail it when ``CI`` is set."""
    if os.environ.get("CI"):
        pytest.fail(f"{exc} (CI is set: real-peer suites must not be skipped)", pytrace=False)
    pytest.skip(str(exc))


def prometheus_binary() -> str:
    """Path of the ``prometheus`` binary; skip (fail on CI) when it is not installed."""
    try:
        return _runner.prometheus_binary()
    except PrometheusNotFoundError as exc:
        missing_prometheus(exc)


class PrometheusProcess(_runner.PrometheusProcess):
    """:class:`rwrouter.doubles.prometheus.PrometheusProcess`, skipping (failing on CI) when
    the binary is missing."""

    @classmethod
    def start(cls, config_text: str, **options: Any) -> PrometheusProcess:
        """:meth:`rwrouter.doubles.prometheus.PrometheusProcess.start`, same options."""
        try:
            prom = super().start(config_text, **options)
        except PrometheusNotFoundError as exc:
            missing_prometheus(exc)
        assert isinstance(prom, PrometheusProcess)
        return prom


def sender_yaml(
    *,
    job: str,
    targets: Sequence[str],
    write_url: str,
    queue: Mapping[str, object],
    external_labels: Mapping[str, str] | None = None,
) -> str:
    """The configuration of a sender Prometheus: scrape ``targets`` as job ``job`` every
    second (timeout 1 s), with ``external_labels`` (if any), and remote-write what it scrapes
    to ``write_url`` with ``queue`` as its ``queue_config``."""
    scrape: dict[str, object] = {"scrape_interval": "1s", "scrape_timeout": "1s"}
    if external_labels:
        scrape["external_labels"] = dict(external_labels)
    config = {
        "global": scrape,
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
        "remote_write": [{"url": write_url, "queue_config": dict(queue)}],
    }
    return yaml.safe_dump(config, sort_keys=False)
