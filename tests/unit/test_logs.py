"""Log lines are logfmt whatever their values hold (rwrouter.logs): every field goes through
``kv`` and so through ``q``."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from rwrouter.logs import LogfmtFormatter, Throttle, kv, q

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "rwrouter"
LEVELS = {"debug", "info", "warning", "error", "exception", "critical", "log"}


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"destination": "B", "msg": "resharding"}, "destination=B msg=resharding"),
        ({"destination": "self hosted"}, 'destination="self hosted"'),
        ({"msg": 'a "quoted" word'}, 'msg="a \\"quoted\\" word"'),
        ({"body": "line1\nline2\r\t"}, 'body="line1\\nline2\\r\\t"'),
        ({"url": "https://h/p?apikey=x&y=1"}, 'url="https://h/p?apikey=x&y=1"'),
        ({"samples": 12, "ok": True, "none": None}, "samples=12 ok=True none=None"),
        ({"empty": ""}, 'empty=""'),
        ({"raw": b"\xff\x00"}, 'raw="\ufffd\\x00"'),
    ],
    ids=[
        "bare",
        "space",
        "quotes",
        "newlines_tabs",
        "url_query",
        "numbers_bools_none",
        "empty",
        "bytes",
    ],
)
def test_kv_quotes_every_value(fields: dict[str, object], line: str) -> None:
    assert str(kv(**fields)) == line


def test_a_record_is_one_line() -> None:
    record = logging.LogRecord(
        "rwrouter", logging.WARNING, __file__, 1, kv(destination="a\nb", msg="x"), None, None
    )
    out = LogfmtFormatter().format(record)
    assert "\n" not in out
    assert out.endswith('logger=rwrouter destination="a\\nb" msg=x')


def test_q_matches_kv() -> None:
    assert str(kv(a="x y")) == "a=" + q("x y")


def _log_calls() -> list[tuple[str, ast.Call]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in LEVELS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in {"log", "logger", "logging"}
            ):
                found.append((f"{path.relative_to(PACKAGE)}:{node.lineno}", node))
    return found


def test_every_log_call_passes_its_fields_through_kv() -> None:
    calls = _log_calls()
    assert len(calls) > 40  # the scan sees the package
    offenders = [
        where
        for where, call in calls
        if len(call.args) != 1
        or not isinstance(call.args[0], ast.Call)
        or not isinstance(call.args[0].func, ast.Name)
        or call.args[0].func.id != "kv"
        or call.args[0].args
    ]
    assert not offenders, "log calls not through kv(...):\n" + "\n".join(offenders)


THROTTLE = [
    # id, (key, now) events in order, what admit answers for each (None: not logged)
    ("first_is_logged", [("a", 0.0)], [0]),
    ("again_within_the_minute", [("a", 0.0), ("a", 59.9)], [0, None]),
    (
        "after_the_minute_with_the_count",
        [("a", 0.0), ("a", 1.0), ("a", 2.0), ("a", 60.0)],
        [0, None, None, 2],
    ),
    ("keys_apart", [("a", 0.0), ("b", 1.0), ("a", 2.0)], [0, 0, None]),
    # keys=2: "a" is forgotten when "c" comes, so it is logged again at once
    ("oldest_key_forgotten", [("a", 0.0), ("b", 1.0), ("c", 2.0), ("a", 3.0)], [0, 0, 0, 0]),
]


@pytest.mark.parametrize(
    ("events", "answers"), [c[1:] for c in THROTTLE], ids=[c[0] for c in THROTTLE]
)
def test_throttle_logs_once_per_key_and_minute(
    events: list[tuple[str, float]], answers: list[int | None]
) -> None:
    throttle = Throttle(every=60.0, keys=2)
    assert [throttle.admit(key, now=now) for key, now in events] == answers
    assert len(throttle) <= 2
