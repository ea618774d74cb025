"""Issue 17, item 3: the ``remote_write`` block a real Prometheus writes
(``/api/v1/status/config``) loads in ``rwrouter check-config`` as it is, for both
generations the project runs (the built Prometheus 3 and Debian's 2.42): every key
implemented, or accepted with a note saying what applies, and nothing refused.

Each case starts the Prometheus (a second or two), runs ``check-config`` in-process on its
dumped list, and compares the list with the checked-in fixture the unit tests read
(``tests/testdata/promdump/``); ``RWROUTER_REGENERATE_PROMDUMP=1`` rewrites the fixture
instead (after a Prometheus upgrade).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rwrouter.cli import main
from tests.support.peers import peer_binary, version_line
from tests.support.promdump import (
    EXPECTED_NOTES,
    FIXTURES,
    REGENERATE,
    dumped_remote_write,
    fixture_text,
)
from tests.support.prometheus import prometheus_binary

NOTE = "rwrouter: configuration note: "


def _binary(generation: int) -> str:
    return peer_binary("prometheus") if generation == 3 else prometheus_binary()


@pytest.mark.parametrize(
    ("generation", "described"),
    [
        pytest.param(
            3,
            ("protocol: remote write 2.0", "sample_age_limit=50m", "auth: sigv4 region=us-east-1"),
            id="prometheus-3",
        ),
        pytest.param(
            2, ("auth: sigv4 region=us-east-1", "max_samples_per_send=500"), id="prometheus-2.42"
        ),
    ],
)
def test_a_dumped_remote_write_block_loads_in_check_config(
    generation: int,
    described: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    binary = _binary(generation)
    # The sender resolves its sigv4 credentials at start; these are never used (nothing
    # is scraped, so nothing is sent).
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    workdir = tmp_path / "prometheus"
    block = dumped_remote_write(binary, generation, workdir)
    config = tmp_path / "rwrouter.yml"
    config.write_text(fixture_text(block, workdir, version=version_line(binary, "--version")))
    text = config.read_text().replace("/etc/prometheus", str(workdir))  # its secret files
    config.write_text(text)

    code = main(["check-config", str(config)])
    out, err = capsys.readouterr()

    assert code == 0, err
    noted = tuple(
        line.removeprefix(NOTE).split(": ", 1)[0]
        for line in err.splitlines()
        if line.startswith(NOTE)
    )
    assert noted == EXPECTED_NOTES[generation], err
    assert [line for line in err.splitlines() if not line.startswith(NOTE)] == []
    for name in ("workspace", "self-hosted", "mimir"):
        assert f"destination {name}:" in out
    for text_ in described:
        assert text_ in out

    fixture = FIXTURES / f"prometheus-{generation}.yml"
    fresh = fixture_text(block, workdir, version=version_line(binary, "--version"))
    if os.environ.get(REGENERATE):
        fixture.write_text(fresh)
    assert fixture.read_text() == fresh, (
        f"{fixture} differs from what {binary} writes now: rerun with {REGENERATE}=1 to "
        "regenerate it, and check the unit tests that read it"
    )
