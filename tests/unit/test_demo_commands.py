"""The commands ``rwrouter demo`` prints call rwrouter as it was started, so that a pasted one
runs in the same shell (:func:`rwrouter.demo.binaries.rwrouter_command`): ``rwrouter`` only
when that name on PATH is the running executable; its path when the venv is not activated
(``.venv/bin/rwrouter demo``, as the README runs it); ``python -m rwrouter`` when started so."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
import yaml

from rwrouter.demo.binaries import rwrouter_command
from rwrouter.demo.configs import router_config

PYTHON = "/opt/py thon/bin/python3"  # quoted where printed


@pytest.mark.parametrize(
    ("argv0", "on_path", "expected"),
    [
        pytest.param("venv/bin/rwrouter", None, "{tmp}/venv/bin/rwrouter", id="venv_not_active"),
        pytest.param(
            "venv/bin/rwrouter",
            "other/bin/rwrouter",
            "{tmp}/venv/bin/rwrouter",
            id="another_rwrouter_on_path",
        ),
        pytest.param("venv/bin/rwrouter", "{tmp}/venv/bin/rwrouter", "rwrouter", id="venv_active"),
        pytest.param("venv/bin/rwrouter", "link/rwrouter", "rwrouter", id="on_path_as_a_link"),
        pytest.param("rwrouter", "{tmp}/venv/bin/rwrouter", "rwrouter", id="found_on_path"),
        pytest.param(
            "{tmp}/src/rwrouter/__main__.py",
            "{tmp}/venv/bin/rwrouter",
            f"{shlex.quote(PYTHON)} -m rwrouter",
            id="python_dash_m",
        ),
        pytest.param(
            "/usr/bin/pytest", "{tmp}/venv/bin/rwrouter", "rwrouter", id="embedded_with_path"
        ),
        pytest.param(
            "/usr/lib/python3/pytest/__main__.py",
            None,
            f"{shlex.quote(PYTHON)} -m rwrouter",
            id="embedded_without_path",
        ),
    ],
)
def test_printed_commands_call_rwrouter_as_it_was_started(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv0: str,
    on_path: str | None,
    expected: str,
) -> None:
    for where in ("venv/bin", "other/bin", "link"):
        (tmp_path / where).mkdir(parents=True)
    for script in ("venv/bin/rwrouter", "other/bin/rwrouter"):
        (tmp_path / script).write_text("#!/bin/sh\n")
    os.symlink(tmp_path / "venv/bin/rwrouter", tmp_path / "link/rwrouter")
    monkeypatch.chdir(tmp_path)  # a relative argv0 is relative to the working directory

    def at(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path))

    found = rwrouter_command(
        argv0=at(argv0), on_path=None if on_path is None else at(on_path), python=PYTHON
    )
    assert found == at(expected)


def test_the_demo_config_says_how_to_check_it_with_that_command() -> None:
    text = router_config(
        listen_port=1,
        workspace_url="http://127.0.0.1:2/workspaces/ws/api/v1/remote_write",
        region="us-east-1",
        access_key="AKIA",
        secret_key="s",
        self_hosted_url="http://127.0.0.1:3",
        batch_send_deadline_s=1.0,
        rwrouter="/x/.venv/bin/rwrouter",
    )
    assert "# Check it with: /x/.venv/bin/rwrouter check-config <this file>" in text.splitlines()
    assert yaml.safe_load(text)["remote_write"][0]["name"] == "workspace"
