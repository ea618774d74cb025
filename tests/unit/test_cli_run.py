"""``rwrouter run`` needs ``--config``: without it a usage error, exit status 2 with a one-line
hint, and nothing started; the demo is ``rwrouter demo``. ``rwrouter`` alone prints the help
with the list of commands (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rwrouter import cli
from rwrouter.demo import pipeline

HINT = "rwrouter: error: rwrouter run needs --config FILE (the demo is `rwrouter demo`)"
RUN_HINT = HINT.removeprefix("rwrouter: error: ")


@pytest.fixture
def demos(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The calls of the demo (replaced: it would start Prometheus and the doubles)."""
    calls: list[dict[str, Any]] = []

    def run_demo(**kwargs: Any) -> int:
        calls.append(kwargs)
        return 0

    monkeypatch.setattr(pipeline, "run_demo", run_demo)
    return calls


NO_CONFIG_CASES = [
    ("run", ["run"]),
    ("run_after_a_global_option", ["--log-level", "warning", "run"]),
    ("run_with_workers", ["run", "--workers", "2"]),
]


@pytest.mark.parametrize(
    "argv", [c[1] for c in NO_CONFIG_CASES], ids=[c[0] for c in NO_CONFIG_CASES]
)
def test_run_without_config_is_a_usage_error(
    argv: list[str], demos: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: rwrouter ")  # argparse's shape: usage, then the error
    assert err.rstrip("\n").splitlines()[-1] == HINT
    assert demos == []  # the demo did not start in its place


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([], id="no_command"),
        pytest.param(["--log-level", "debug"], id="no_command_with_a_global_option"),
    ],
)
def test_no_command_prints_the_help_with_the_commands(
    argv: list[str], demos: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Once "rwrouter run needs --config FILE", which named one command of nine."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: rwrouter ")
    commands = err.split("positional arguments:", 1)[1].split("options:", 1)[0]
    listed = {line.split()[0] for line in commands.splitlines()[2:] if line[:5].strip()}
    assert {"run", "check-config", "demo", "rejected", "reload", "compare"} <= listed
    assert err.rstrip("\n").splitlines()[-1] == f"rwrouter: error: {cli.NO_COMMAND}"
    assert RUN_HINT not in err and demos == []


def test_the_demo_is_rwrouter_demo(demos: list[dict[str, Any]]) -> None:
    assert cli.main(["demo", "--duration", "5", "--nodes", "1"]) == 0
    assert demos == [{"nodes": 1, "duration": 5.0, "workdir": None, "prometheus": None}]


def test_run_with_config_reads_it(
    tmp_path: Path, demos: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.yaml"
    assert cli.main(["run", "--config", str(missing)]) == 2  # a configuration error
    err = capsys.readouterr().err
    assert f"rwrouter: configuration error: cannot read config file '{missing}'" in err
    assert "needs --config" not in err
    assert demos == []


def test_run_help_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--config FILE" in out and "(required)" in out and "--workers N" in out


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main([*argv, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_is_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """``rwrouter --help`` once showed only the docstring's first line: the whole text now."""
    out = _help([], capsys)
    assert cli.DESCRIPTION in out and cli.EPILOG in out
    assert "Exit codes: 0 clean stop, 1 runtime failure, 2 bad configuration or usage." in out
    assert "``" not in out and ":mod:" not in out  # no reStructuredText in a terminal


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("run", id="run"),
        pytest.param("check-config", id="check_config"),
        pytest.param("demo", id="demo"),
        pytest.param("audit", id="audit"),
        pytest.param("capture", id="capture"),
        pytest.param("reload", id="reload"),
    ],
)
def test_each_command_help_has_a_whole_description(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _help([command], capsys)
    description = out.split("\n\n")[1]
    assert not description.startswith(("options:", "positional arguments:")), out
    assert description.rstrip().endswith("."), description


@pytest.mark.parametrize(
    ("flag", "default"),
    [
        pytest.param("--nodes N", "(default: 2)", id="nodes"),
        pytest.param("--duration SECONDS", "(default: run until Ctrl-C)", id="duration"),
        pytest.param(
            "--workdir DIR", "(default: a temporary directory, removed on exit)", id="dir"
        ),
        pytest.param("--prometheus PATH", "(default: Debian's)", id="prometheus"),
    ],
)
def test_demo_help_shows_each_default(
    flag: str, default: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = " ".join(_help(["demo"], capsys).split())  # argparse wraps the help lines
    after = out.split(f"{flag} ", 1)[1]
    assert after.split(" --", 1)[0].count(default) == 1, after
