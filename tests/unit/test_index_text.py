"""The plain-text answer of ``GET /`` (:func:`rwrouter.server.index.index_text`): the status
page's words per destination (unsent, disk used with its unit, memory with its unit), and
``POST /-/reload`` listed only when it is served."""

from __future__ import annotations

import pytest

from rwrouter.server.index import index_text

IDLE = {
    "unsent_samples": 0.0,
    "unsent_records": 0.0,
    "queue_disk_bytes": 78549.0,
    "queue_disk_capacity_bytes": 1073741824.0,
    "queue_memory_bytes": 0.0,
}
BUSY = {**IDLE, "unsent_samples": 12345.0, "unsent_records": 7.0, "queue_memory_bytes": 2048.0}
UNKNOWN = {k: None for k in IDLE}


@pytest.mark.parametrize(
    ("figures", "lines"),
    [
        pytest.param(
            IDLE,
            [
                "    unsent (queued, not sent yet): nothing: all sent",
                "    disk used / max_disk_bytes: 76.7 KiB / 1.0 GiB (segment files: sent "
                "records stay on disk until their whole segment is sent)",
                "    queue in memory: 0 B",
            ],
            id="all_sent",
        ),
        pytest.param(
            BUSY,
            [
                "    unsent (queued, not sent yet): 12,345 samples in 7 records",
                "    queue in memory: 2.0 KiB",
            ],
            id="unsent",
        ),
        pytest.param(
            {**BUSY, "unsent_samples": 470.0, "unsent_records": 1.0},
            ["    unsent (queued, not sent yet): 470 samples in 1 record"],
            id="one_record",
        ),
        pytest.param(
            UNKNOWN,
            [
                "    unsent (queued, not sent yet): -",
                "    disk used / max_disk_bytes: - / - (segment files: sent records stay on "
                "disk until their whole segment is sent)",
                "    queue in memory: -",
            ],
            id="not_exposed_yet",
        ),
    ],
)
def test_each_destination_in_the_status_page_s_words(
    figures: dict[str, float | None], lines: list[str]
) -> None:
    text = index_text({"destinations": {"workspace": figures}}, lifecycle=False)
    assert "  workspace:" in text.splitlines()
    for line in lines:
        assert line in text.splitlines()
    assert "disk queue" not in text and " bytes," not in text


@pytest.mark.parametrize(
    ("lifecycle", "listed"),
    [pytest.param(True, True, id="enabled"), pytest.param(False, False, id="not_enabled")],
)
def test_reload_is_listed_only_when_served(lifecycle: bool, listed: bool) -> None:
    text = index_text({"destinations": {}}, lifecycle=lifecycle)
    assert ("POST /-/reload (--web.enable-lifecycle)" in text.splitlines()) == listed
    assert "GET /-/status (JSON; / in a browser: the status page)" in text.splitlines()
