"""The commands that send nothing load the configuration without the environment its URLs and
credentials name: ``rwrouter audit --config`` and ``rwrouter rejected list --config`` run with
``AWS_REGION``/``AMP_WORKSPACE_ID`` unset (config/rwrouter.yaml names both), while the
commands that send, and ``check-config``, still refuse a missing variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from rwrouter import cli
from rwrouter.audit.capture import MAGIC
from rwrouter.cli.audit import router_url
from rwrouter.config import UNSET, load_config_offline

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "rwrouter.yaml"  # uses ${AWS_REGION} and ${AMP_WORKSPACE_ID}
NAMES = ("AWS_REGION", "AMP_WORKSPACE_ID")


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # storage.path: data, relative to the working directory
    return tmp_path


def test_offline_load_names_the_unset_variables(no_aws_env: Path) -> None:
    config, unset = load_config_offline(EXAMPLE)
    assert unset == frozenset(NAMES)
    assert f"aps-workspaces.{UNSET}.amazonaws.com" in config.remote_write[0].url


@pytest.mark.parametrize(
    ("argv", "code", "stdout_has"),
    [
        pytest.param(
            ["rejected", "list", "--config", str(EXAMPLE)], 0, "no rejected", id="rejected_list"
        ),
        pytest.param(
            ["audit", "--config", str(EXAMPLE), "--capture", "capture.bin"],
            0,
            "",
            id="audit_capture",
        ),
        pytest.param(
            ["check-config", str(EXAMPLE)], 2, "", id="check_config_still_needs_the_variables"
        ),
        pytest.param(
            ["rejected", "replay", "--config", str(EXAMPLE), "workspace"],
            2,
            "",
            id="replay_sends_so_still_needs_them",
        ),
    ],
)
def test_commands_without_aws_environment(
    no_aws_env: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    stdout_has: str,
) -> None:
    (no_aws_env / "capture.bin").write_bytes(MAGIC)
    assert cli.main(argv) == code
    out, err = capsys.readouterr()
    assert stdout_has in out
    needs_env = "environment variable AWS_REGION is not set" in err
    assert needs_env == (code == 2), err


def test_audit_url_from_the_config_without_aws_environment(no_aws_env: Path) -> None:
    assert router_url(None, str(EXAMPLE)) == "http://127.0.0.1:9250"
