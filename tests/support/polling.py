"""Bounded polling for the end-to-end tests: wait for a condition, fail (not hang) after a
timeout, never sleep a fixed time for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.2
) -> T:
    """Call ``probe`` every ``interval`` seconds until it returns something truthy, and return
    that; fail the test after ``timeout`` seconds, naming ``what`` and the last result
    (shortened to 2,000 characters)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r:.2000})")


def poll(
    predicate: Callable[[], bool], *, timeout: float = 15.0, what: str = "", interval: float = 0.05
) -> None:
    """:func:`wait_for` a condition: until ``predicate()`` is true, checked every
    ``interval`` seconds (50 ms), for at most ``timeout`` seconds."""
    wait_for(predicate, timeout=timeout, what=what or "a condition", interval=interval)
