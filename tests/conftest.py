"""Suite-wide hooks and fixtures: the report header names the real peers a run uses and
their versions; ``restore_logging`` undoes what rwrouter's ``main`` does to logging."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.support.peers import report_lines


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The peers' versions (tests/support/peers.py: Prometheus 3, vmagent, Debian prometheus),
    each ``--version`` run once."""
    return report_lines()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """rwrouter's ``main`` sets up logging on the root logger (to the test's stderr): its
    handlers and level are put back after the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
