"""The status page in a real headless browser: Debian's ``chromium`` driven by playwright.

:func:`chromium` finds the browser (skips the calling test locally when it is missing, fails
it when ``CI`` is set: .ci/run installs it); :func:`page_shows` opens a page and returns what
a JavaScript function reads from it once it has something to show. Blocking: call it from an
async test through ``asyncio.to_thread``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
TIMEOUT_MS = 15_000


def chromium() -> str:
    """The path of Debian's chromium; skip (fail on CI) when it is not installed."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail("Debian's chromium is missing: .ci/run installs it")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)")


def page_shows(url: str, js: str) -> tuple[dict[str, Any], list[str]]:
    """Open ``url`` in headless chromium, wait (at most 15 s) until ``js`` (a JavaScript
    function of no arguments) returns something truthy, and return that (a JSON object) and
    the page's uncaught errors."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
            page.wait_for_function(js, timeout=TIMEOUT_MS)
            shown: dict[str, Any] = page.evaluate(js)
            return shown, errors
        finally:
            browser.close()
