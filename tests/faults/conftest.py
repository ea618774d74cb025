"""Fixtures of the fault tests: one self-hosted Prometheus for the package (each test uses its
own metric names), a workspace double per test, rwrouter as a real subprocess, and the figures
the README's "Guarantees" section quotes: written to ``<pytest basetemp>/fault-figures.json``
and shown in a "fault figures" section of pytest's terminal summary (not in the progress
output)."""

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


FIGURES = pytest.StashKey[dict[str, Any]]()  # test name -> its figures, for the whole run
FIGURES_PATH = pytest.StashKey[Path]()  # where they were written


def _figures(config: pytest.Config) -> dict[str, Any]:
    return config.stash.setdefault(FIGURES, {})


@pytest.fixture(scope="package")
def _figures_file(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    collected = _figures(request.config)
    yield collected
    path = tmp_path_factory.getbasetemp() / "fault-figures.json"
    path.write_text(json.dumps(collected, indent=2, sort_keys=True) + "\n")
    request.config.stash[FIGURES_PATH] = path


@pytest.fixture
def report(request: pytest.FixtureRequest, _figures_file: dict[str, Any]) -> Report:
    """``report(figures)``: keep the test's figures for ``fault-figures.json`` and the
    terminal summary (:func:`pytest_terminal_summary`)."""

    def emit(figures: dict[str, Any]) -> None:
        _figures_file[request.node.name] = figures

    return emit


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """The fault tests' figures, one line per test, after the run (the README quotes them)."""
    figures = config.stash.get(FIGURES, {})
    if not figures:
        return
    terminalreporter.section("fault figures (README, Guarantees)")
    for name, values in figures.items():
        terminalreporter.write_line(f"{name}: {json.dumps(values, sort_keys=True)}")
    if FIGURES_PATH in config.stash:
        terminalreporter.write_line(f"(also in {config.stash[FIGURES_PATH]})")
