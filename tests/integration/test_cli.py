"""The command line as a user runs it: ``rwrouter check-config`` exit codes and output, and
``rwrouter run`` without ``--config``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AWS_ENV = {"AWS_REGION": "us-east-1", "AMP_WORKSPACE_ID": "ws-123"}

CASES = [
    # id, config text, extra env, exit code, text expected on stdout or stderr
    (
        "shipped_gpu_example",
        (ROOT / "config/rwrouter.yaml").read_text(),
        AWS_ENV,
        0,
        "destination workspace:",
    ),
    (
        "missing_env_var",
        (ROOT / "config/rwrouter.yaml").read_text(),
        {},
        2,
        "remote_write[0].url: environment variable AWS_REGION is not set",
    ),
    (
        "sigv4_without_region_anywhere",
        "remote_write:\n  - url: http://a/x\n    sigv4: {}\n",
        {},
        2,
        "remote_write[0].sigv4.region: not set, nor in AWS_REGION, AWS_DEFAULT_REGION or the "
        "AWS profile's region (sigv4.profile, else AWS_PROFILE, else default)",
    ),
    (
        "sigv4_region_from_the_aws_profile",
        "remote_write:\n  - url: http://a/x\n    sigv4: {}\n",
        {"AWS_PROFILE": "writer"},
        0,
        "auth: sigv4 region=eu-central-1 (from the AWS profile 'writer') service=aps",
    ),
    (
        "sigv4_region_from_environment",
        "remote_write:\n  - url: http://a/x\n    sigv4: {}\n",
        {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-west-2"},
        0,
        "auth: sigv4 region=eu-west-1 (from AWS_REGION) service=aps",
    ),
    (
        "sigv4_region_from_the_default_region",
        "remote_write:\n  - url: http://a/x\n    sigv4: {}\n",
        {"AWS_DEFAULT_REGION": "eu-west-1", "AWS_PROFILE": "writer"},
        0,
        "auth: sigv4 region=eu-west-1 (from AWS_DEFAULT_REGION) service=aps",
    ),
    (
        "sigv4_region_in_the_file_wins",
        "remote_write:\n  - url: http://a/x\n    sigv4: {region: ap-south-1}\n",
        {"AWS_DEFAULT_REGION": "eu-west-1"},
        0,
        "auth: sigv4 region=ap-south-1 service=aps",
    ),
    (
        "typo_names_the_key_path",
        "remote_write:\n  - url: http://a/x\n    queue_config: {max_shard: 2}\n",
        {},
        2,
        "remote_write[0].queue_config.max_shard: unknown key",
    ),
    (
        "series_limit_with_tenant_rules_refused_as_run_refuses_it",
        "remote_write:\n  - url: http://a/x\n    series_limit: 10\n    on_series_limit: drop\n"
        "    write_relabel_configs:\n"
        "      - {source_labels: [__tenant__], regex: a, action: keep}\n",
        {},
        2,
        "remote_write[0].series_limit: not supported with rules that read __tenant__",
    ),
    (
        "sample_age_limit_below_the_deadline_is_a_warning_not_an_error",
        "remote_write:\n  - url: http://a/x\n    queue_config: {sample_age_limit: 1s}\n",
        {},
        0,
        "rwrouter: configuration warning: remote_write[0].queue_config.sample_age_limit: "
        "1s is not above batch_send_deadline (5s)",
    ),
]


@pytest.mark.parametrize(
    ("text", "env", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_check_config(
    tmp_path: Path, text: str, env: dict[str, str], code: int, expected: str
) -> None:
    path = tmp_path / "rwrouter.yaml"
    path.write_text(text)
    aws_config = tmp_path / "aws-config"
    aws_config.write_text("[profile writer]\nregion = eu-central-1\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    clean["AWS_CONFIG_FILE"] = str(aws_config)
    clean["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "none")
    result = subprocess.run(
        [sys.executable, "-m", "rwrouter", "check-config", str(path)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == code, result.stderr
    assert expected in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("argv", "code", "expected"),
    [
        pytest.param(
            ["--config", str(ROOT / "config/examples/copy-to-both.yaml")], 0, "", id="flag"
        ),
        pytest.param([], 2, "give the configuration file: FILE or --config FILE", id="neither"),
    ],
)
def test_check_config_takes_the_file_as_run_does(argv: list[str], code: int, expected: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rwrouter", "check-config", *argv],
        env={**os.environ, "AWS_REGION": "us-east-1", "AMP_WORKSPACE_ID": "ws-1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == code, result.stderr
    assert expected in result.stderr


def test_check_config_into_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    path = ROOT / "config/rwrouter.yaml"
    result = subprocess.run(
        f"{sys.executable} -m rwrouter check-config {path} | head -1",
        shell=True,
        env={**os.environ, **AWS_ENV},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.startswith("config:")
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr


CLOSED_PIPE = [
    # id, arguments after `rwrouter`
    ("check_config", ["check-config", str(ROOT / "config/rwrouter.yaml")]),
    (
        "relabel",
        [
            "relabel",
            "--config",
            str(ROOT / "config/rwrouter.yaml"),
            "--series",
            'DCGM_FI_DEV_GPU_UTIL{gpu="0"}',
        ],
    ),
]


@pytest.mark.parametrize("argv", [c[1] for c in CLOSED_PIPE], ids=[c[0] for c in CLOSED_PIPE])
def test_output_into_a_pipe_closed_before_it_is_written_is_quiet(argv: list[str]) -> None:
    # The reader is gone before the first write (as `| head` once it has its lines): the
    # write fails with EPIPE, which is an OSError; it must not be reported as an error.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "rwrouter", *argv],
            env={**os.environ, **AWS_ENV},
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("argv", "last_line"),
    [
        pytest.param(
            ["run"],
            "rwrouter: error: rwrouter run needs --config FILE (the demo is `rwrouter demo`)",
            id="run_without_config",
        ),
        pytest.param(
            [],
            "rwrouter: error: a command is needed (listed above): `rwrouter run --config FILE` "
            "runs the router, `rwrouter demo` the local demo",
            id="no_command",
        ),
    ],
)
def test_run_without_config_exits_2_with_a_hint(
    tmp_path: Path, argv: list[str], last_line: str
) -> None:
    """As a user (or a manifest missing its flag) runs it: nothing starts, exit status 2."""
    result = subprocess.run(
        [sys.executable, "-m", "rwrouter", *argv],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == last_line
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran


def test_run_on_a_port_in_use_says_so_in_one_line_and_closes_what_it_opened(
    tmp_path: Path,
) -> None:
    """The destinations' senders start before the listener: when the bind fails they are
    stopped too, so no "Unclosed client session" follows the one-line error (exit 1)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "c.yaml").write_text(
            f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
            "remote_write:\n"
            "  - {name: a, url: 'http://127.0.0.1:9/api/v1/write'}\n"
            "  - {name: b, url: 'http://127.0.0.1:9/api/v1/write', fallback: true}\n"
        )
        result = subprocess.run(
            [sys.executable, "-m", "rwrouter", "run", "--config", "c.yaml"],
            cwd=tmp_path,
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"rwrouter: cannot listen on 127.0.0.1:{port} (server.listen_address): "
        "address already in use"
    )
    assert "Unclosed" not in result.stderr and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if "level=error" in line] == []


def test_check_config_reports_every_mistake_one_line_each() -> None:
    bad = ROOT / "tests/testdata/config/several_mistakes.bad.yml"
    result = subprocess.run(
        [sys.executable, "-m", "rwrouter", "check-config", str(bad)],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert [line.split(": ", 3)[2] for line in lines] == [
        "server.listen_adress",
        "server.read_timout",
        "storage.fsync",
        "relabel_configs[0].regex",
        "remote_write[0].queue_config.max_shard",
        "remote_write[1].url",
    ], result.stderr
    assert all(line.startswith("rwrouter: configuration error: ") for line in lines)
