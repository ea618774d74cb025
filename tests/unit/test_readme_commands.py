"""The README's set-up commands and what CI runs stay in step: the first command installs only
what the demo needs (no extra), the test command installs the ``test`` extra and runs pytest,
and ``.ci/run`` runs both exactly (the first without its demo, which runs until Ctrl-C)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = " && .venv/bin/rwrouter demo"


def _setup_commands() -> list[str]:
    """The ``sh`` blocks of the README's "Set-up" section, one command each, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", section, flags=re.S)]


def _ci_lines() -> list[str]:
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line.strip() for line in script if line.strip() and not line.startswith("#")]


def test_readme_has_a_first_command_and_a_test_command() -> None:
    commands = _setup_commands()
    assert len(commands) == 2, commands
    assert commands[0].endswith(DEMO), commands[0]
    assert commands[1].endswith(".venv/bin/python -m pytest"), commands[1]


@pytest.mark.parametrize(
    ("which", "must", "must_not"),
    [
        pytest.param(0, "pip install -e .", "[", id="first_command_installs_no_extra"),
        pytest.param(1, "pip install -q -e '.[test]'", "rwrouter demo", id="test_command_extra"),
    ],
)
def test_each_command_installs_what_it_needs(which: int, must: str, must_not: str) -> None:
    command = _setup_commands()[which]
    assert must in command, command
    assert must_not not in command, command


@pytest.mark.parametrize(
    ("which", "expected"),
    [
        pytest.param(0, lambda c: c.removesuffix(DEMO), id="first_command_without_demo"),
        pytest.param(1, lambda c: c, id="test_command_exactly"),
    ],
)
def test_ci_runs_the_readme_commands(which: int, expected: Callable[[str], str]) -> None:
    line = expected(_setup_commands()[which])
    assert line in _ci_lines(), f"{line!r} not a line of .ci/run"


def test_ci_ends_with_the_test_command() -> None:
    assert _ci_lines()[-1] == _setup_commands()[1]


def test_demo_imports_nothing_from_the_test_extra() -> None:
    """The first command installs no extra, so the demo and what it runs must not need one."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    modules = {
        re.split(r"[<>=\[ ]", req, maxsplit=1)[0].replace("-", "_").lower()
        for reqs in extras.values()
        for req in reqs
    } | {"moto", "playwright", "hypothesis", "cryptography", "helm_python", "pytest"}
    src = ROOT / "src" / "rwrouter"
    imported: set[tuple[str, str]] = set()
    for path in src.rglob("*.py"):
        for match in re.finditer(r"^\s*(?:from|import) ([a-zA-Z_]\w*)", path.read_text(), re.M):
            if match.group(1).lower() in modules:
                imported.add((str(path.relative_to(ROOT)), match.group(1)))
    assert not imported, sorted(imported)
