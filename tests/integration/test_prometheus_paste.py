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
import yaml

from rwrouter.cli import main
from rwrouter.config import parse_config
from rwrouter.config.promkeys import PROMETHEUS_ONLY
from rwrouter.errors import ConfigError
from tests.support.peers import peer_binary, version_line
from tests.support.promdump import (
    EXPECTED_NOTES,
    FIXTURES,
    REGENERATE,
    dumped_remote_write,
    dumped_whole_config,
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


def test_every_prometheus_key_of_a_whole_dump_is_named_a_prometheus_setting(
    tmp_path: Path,
) -> None:
    """A whole ``prometheus.yml``, as a real Prometheus 3 dumps it, pasted into rwrouter's
    file: each top-level, ``global`` and ``storage`` key rwrouter does not read is refused
    as "a Prometheus setting" (never "unknown key"), and PROMETHEUS_ONLY lists each one the
    dump has; the rest (``remote_write``, ``global.metric_name_validation_scheme``) loads."""
    dumped = dumped_whole_config(peer_binary("prometheus"), tmp_path / "prometheus")
    with pytest.raises(ConfigError) as info:
        parse_config(yaml.safe_dump(dumped, sort_keys=False), env={})
    errors = getattr(info.value, "errors", (info.value,))
    reasons = {e.path: e.reason for e in errors}
    assert reasons.pop("global.external_labels").startswith("not supported by rwrouter (add")
    assert all(r.startswith("a Prometheus setting") for r in reasons.values()), reasons
    expected = {key for key in dumped if key not in ("global", "storage", "remote_write")}
    expected |= {f"global.{k}" for k in dumped["global"]} - {
        "global.metric_name_validation_scheme",
        "global.external_labels",
    }
    expected |= {f"storage.{k}" for k in dumped["storage"]}
    assert set(reasons) == expected
    listed = {*PROMETHEUS_ONLY["top"]}
    listed |= {f"global.{k}" for k in PROMETHEUS_ONLY["global"]}
    listed |= {f"storage.{k}" for k in PROMETHEUS_ONLY["storage"]}
    assert expected <= listed
