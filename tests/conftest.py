"""Suite-wide hooks: the report header names the real peers a run uses and their versions."""

from __future__ import annotations

import pytest

from tests.support.peers import report_lines


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The peers' versions (tests/support/peers.py: Prometheus 3, vmagent, Debian prometheus),
    each ``--version`` run once."""
    return report_lines()
