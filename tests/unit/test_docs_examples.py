"""Examples in the docs are what the commands print: ``rwrouter check-config``'s summary of the
shipped GPU example and its one-line-per-mistake errors (docs/configuration.md,
"rwrouter check-config"), and the README's list of ``config/examples/``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rwrouter import cli

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"


def _transcripts() -> dict[str, list[str]]:
    """The check-config example block: command line -> the lines printed after it."""
    section = DOC.read_text().split("## `rwrouter check-config`", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\n(\$ .*?)```", section, flags=re.S)
    assert block is not None
    found: dict[str, list[str]] = {}
    for part in block.group(1).split("\n\n$ "):
        command, *lines = part.removeprefix("$ ").rstrip("\n").split("\n")
        found[command] = lines
    return found


@pytest.mark.parametrize(
    ("command", "env", "argv", "stream"),
    [
        pytest.param(
            "AWS_REGION=eu-west-1 AMP_WORKSPACE_ID=ws-1234 rwrouter check-config "
            "config/rwrouter.yaml",
            {"AWS_REGION": "eu-west-1", "AMP_WORKSPACE_ID": "ws-1234"},
            ["check-config", "config/rwrouter.yaml"],
            "out",
            id="gpu_example_summary",
        ),
        pytest.param(
            "rwrouter check-config config/examples/sidecar-irsa.yaml",
            {},
            ["check-config", "config/examples/sidecar-irsa.yaml"],
            "err",
            id="missing_variable",
        ),
        pytest.param(
            "rwrouter check-config tests/testdata/config/several_mistakes.bad.yml",
            {},
            ["check-config", "tests/testdata/config/several_mistakes.bad.yml"],
            "err",
            id="every_mistake",
        ),
    ],
)
def test_check_config_example_is_what_it_prints(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    env: dict[str, str],
    argv: list[str],
    stream: str,
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AMP_WORKSPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(ROOT)
    cli.main(argv)
    out, err = capsys.readouterr()
    assert _transcripts()[command] == (out if stream == "out" else err).rstrip("\n").split("\n")


def test_readme_lists_every_example_config() -> None:
    readme = (ROOT / "README.md").read_text()
    for path in sorted((ROOT / "config" / "examples").glob("*.yaml")):
        assert f"`config/examples/{path.name}`" in readme, path.name
