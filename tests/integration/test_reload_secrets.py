"""A failed reload never prints a secret (issue 14, item 6): neither the answer of ``POST
/-/reload`` (which the sender of the request reads) nor the reload log line, for every kind of
secret of tests/support/secret_configs.py; both still name the key path."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from rwrouter.logs import LogfmtFormatter
from tests.integration.conftest import Start, metric_value
from tests.support.capture import CaptureServer
from tests.support.secret_configs import BAD_SECRETS, SecretCase

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("case", BAD_SECRETS, ids=[c.id for c in BAD_SECRETS])
async def test_failed_reload_answer_and_log_hide_the_secret(
    start_from_file: Start,
    fresh_capture: CaptureServer,
    http: aiohttp.ClientSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    case: SecretCase,
) -> None:
    config = tmp_path / "rwrouter.yaml"
    config.write_text(
        f"server: {{listen_address: '127.0.0.1:0'}}\nstorage: {{path: '{tmp_path / 'data'}'}}\n"
        f"remote_write:\n  - name: d\n    url: {fresh_capture.url('/d')}\n"
    )
    router = await start_from_file(config)
    config.write_text(f"server: {{listen_address: '127.0.0.1:0'}}\n{case.yaml}")
    with caplog.at_level(logging.ERROR, logger="rwrouter"):
        async with http.post(router.url + "/-/reload") as resp:
            status, text = resp.status, await resp.text()
    assert status == 500
    assert text.startswith(f"failed to reload config: {case.where}") and text.count("\n") == 1
    assert case.secret not in text
    (record,) = [r for r in caplog.records if "reload failed" in r.getMessage()]
    line = LogfmtFormatter().format(record)
    assert case.where is not None and case.where in line
    assert case.secret not in line
    assert metric_value(router, "rwrouter_config_last_reload_successful") == 0
