"""rwrouter.server.frontdoor without a socket: the role of every endpoint make_app serves, the
refusal log's rate (an injected clock), the bcrypt outcome caches and their bounds, the bearer
token comparison."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import bcrypt
import pytest

from rwrouter.config.values import Secret
from rwrouter.config.web import BearerToken, Role, WebConfig
from rwrouter.reasons import AuthReason
from rwrouter.server import frontdoor
from rwrouter.server.app import WRITE_PATHS
from rwrouter.server.frontdoor import (
    LOG_EVERY,
    Checks,
    DoorOptions,
    FailureLog,
    Refused,
    _bearer,
    required_role,
)

APP = Path(frontdoor.__file__).with_name("app.py")


def served_paths() -> set[str]:
    """Every path make_app adds a route for (``app.router.add_<method>(path, ...)``)."""
    paths = set()
    for node in ast.walk(ast.parse(APP.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.startswith("add_")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            paths.add(node.args[0].value)
    return paths | set(WRITE_PATHS)  # those are added in a loop


ROLES = [
    ("write", "/api/v1/write", Role.WRITE),
    ("push", "/api/v1/push", Role.WRITE),
    ("metrics", "/metrics", Role.READ),
    ("status", "/-/status", Role.READ),
    ("index", "/", Role.READ),
    ("audit", "/-/audit", Role.READ),
    ("reload", "/-/reload", Role.ADMIN),
    ("healthy", "/-/healthy", None),
    ("ready", "/-/ready", None),
    ("unknown_path", "/api/v1/query", Role.READ),
]


@pytest.mark.parametrize(("path", "role"), [c[1:] for c in ROLES], ids=[c[0] for c in ROLES])
def test_the_role_of_each_endpoint(path: str, role: Role | None) -> None:
    assert required_role(path) is role


def test_every_served_path_has_its_role_written_down() -> None:
    served = served_paths()
    assert "/-/audit" in served and "/api/v1/write" in served  # the scan sees the routes
    undecided = served - set(frontdoor.ENDPOINT_ROLES) - frontdoor.OPEN_PATHS
    assert not undecided, f"add these to ENDPOINT_ROLES or OPEN_PATHS: {sorted(undecided)}"


def test_door_options_as_worker_arguments() -> None:
    assert DoorOptions().args() == ()
    options = DoorOptions(web_config_file="/etc/web.yml", enable_lifecycle=True)
    assert options.args() == ("--web.config.file", "/etc/web.yml", "--web.enable-lifecycle")


def test_one_log_line_per_client_and_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    failures = FailureLog(clock=lambda: now[0])
    refusal = Refused(AuthReason.WRONG, 401, "wrong credentials")
    caplog.set_level(logging.WARNING, logger="rwrouter.frontdoor")
    for _ in range(5):
        failures.refused("10.0.0.1", refusal, "/metrics")
    failures.refused("10.0.0.2", refusal, "/metrics")  # another client: its own line
    now[0] += LOG_EVERY - 0.1
    failures.refused("10.0.0.1", refusal, "/metrics")
    now[0] += 0.1
    failures.refused("10.0.0.1", refusal, "/metrics")  # a minute after its last line
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split("remote=")[1].split()[0] for line in lines] == [
        "10.0.0.1",
        "10.0.0.2",
        "10.0.0.1",
    ]
    assert "unlogged=0" in lines[0] and "unlogged=5" in lines[2]
    assert "reason=wrong" in lines[0] and "status=401" in lines[0]


def test_the_log_remembers_a_bounded_number_of_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frontdoor, "LOGGED_CLIENTS", 3)
    failures = FailureLog(clock=lambda: 0.0)
    refusal = Refused(AuthReason.MISSING, 401, "authentication required")
    for i in range(10):
        failures.refused(f"10.0.0.{i}", refusal, "/")
    assert len(failures._throttle) == 3


HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(4))


async def test_bcrypt_outcomes_are_remembered_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checks = Checks()
    assert await checks.check("alice", HASH, b"pw")
    assert await checks.check("alice", HASH, b"pw")
    assert not await checks.check("alice", HASH, b"nope")
    assert not await checks.check("alice", HASH, b"nope")
    assert not await checks.check("alice", HASH, b"x" * 73)  # over bcrypt's 72 bytes: refused
    assert checks.computed == 3
    monkeypatch.setattr(frontdoor, "CACHED_CHECKS", 2)
    for i in range(4):
        await checks.check("alice", HASH, f"wrong-{i}".encode())
    assert len(checks._outcomes[False]) == 2 and len(checks._outcomes[True]) == 1
    assert all(b"pw" not in key and b"wrong" not in key for key in checks._outcomes[False])


def test_bearer_tokens_by_name() -> None:
    config = WebConfig(
        bearer_tokens=(
            BearerToken(name="a", token_file="/a", token=Secret("token-a")),
            BearerToken(name="b", token_file="/b", token=Secret("token-b")),
        )
    )
    assert _bearer("token-b", config) == "b"
    assert _bearer("token-a", config) == "a"
    assert _bearer("token-", config) is None
    assert _bearer("token-a\udcff", config) is None  # a header aiohttp decoded as latin-1
