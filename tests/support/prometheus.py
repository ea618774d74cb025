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
from typing import Any, NoReturn

import pytest

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
