"""Fixtures of the fault tests: one self-hosted Prometheus for the package (each test uses its
own metric names), a workspace double per test, rwrouter as a real subprocess, and the figures
the README's "Guarantees" section quotes (printed as ``FAULT-FIGURES {json}`` lines and written
to ``<pytest basetemp>/fault-figures.json``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rwrouter.doubles.workspace_runner import run_in_thread
from tests.faults.harness import (
    DeliveryTap,
    OutageWorkspace,
    Report,
    Routers,
    SelfHosted,
    Workspace,
)
from tests.support.prometheus import PrometheusProcess

SELF_HOSTED_CONFIG = "global:\n  scrape_interval: 15s\n"  # no targets: remote write only


@pytest.fixture(scope="package")
def self_hosted() -> Iterator[SelfHosted]:
    with PrometheusProcess.start(SELF_HOSTED_CONFIG) as prom, DeliveryTap(prom.url) as tap:
        yield SelfHosted(prom, tap)


@pytest.fixture
def workspace() -> Iterator[Workspace]:
    double = OutageWorkspace()
    with run_in_thread(double) as runner, DeliveryTap(double.base_url) as tap:
        yield Workspace(double, runner, tap)


@pytest.fixture
def routers(tmp_path: Path) -> Iterator[Routers]:
    made = Routers(tmp_path)
    yield made
    for router in made.started:
        router.kill()


@pytest.fixture(scope="package")
def _figures_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    collected: dict[str, Any] = {}
    yield collected
    path = tmp_path_factory.getbasetemp() / "fault-figures.json"
    path.write_text(json.dumps(collected, indent=2, sort_keys=True) + "\n")


@pytest.fixture
def report(
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    _figures_file: dict[str, Any],
) -> Report:
    """``report(figures)``: print ``FAULT-FIGURES {json}`` (uncaptured) and keep it for the
    package's ``fault-figures.json``."""

    def emit(figures: dict[str, Any]) -> None:
        line = json.dumps({"test": request.node.name, **figures}, sort_keys=True)
        _figures_file[request.node.name] = figures
        with capsys.disabled():
            print(f"\nFAULT-FIGURES {line}", flush=True)

    return emit
