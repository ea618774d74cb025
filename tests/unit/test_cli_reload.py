"""``rwrouter reload --pid PID`` takes a process ID >= 1 only: kill(2) sends a signal for 0 to
the caller's process group and for -1 to every process the user may signal, so ``--pid -1``
once hung up every such process and exited 0. A bad value is a usage error (exit 2) and no
signal is sent (``os.kill`` is replaced here: a regression must not signal the test run)."""

from __future__ import annotations

import os
import signal

import pytest

from rwrouter import cli

BAD_PIDS = [
    pytest.param("-1", id="minus_one_every_process"),
    pytest.param("0", id="zero_the_process_group"),
    pytest.param("-4321", id="negative_a_process_group"),
    pytest.param("2147483648", id="beyond_pid_t"),
    pytest.param("1.5", id="not_a_whole_number"),
    pytest.param("one", id="not_a_number"),
]


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    return sent


@pytest.mark.parametrize("pid", BAD_PIDS)
def test_a_pid_below_1_is_a_usage_error_and_nothing_is_signalled(
    pid: str, kills: list[tuple[int, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["reload", "--pid", pid])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"rwrouter reload: error: argument --pid: expected a process ID >= 1, got {pid!r}"
    )
    assert kills == []


@pytest.mark.parametrize(
    "pid", [pytest.param(1, id="pid_1_in_the_image"), pytest.param(4321, id="any")]
)
def test_a_pid_of_1_or_more_is_sent_sighup(
    pid: int, kills: list[tuple[int, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["reload", "--pid", str(pid)]) == 0
    assert kills == [(pid, signal.SIGHUP)]
    assert f"SIGHUP sent to process {pid}" in capsys.readouterr().out
