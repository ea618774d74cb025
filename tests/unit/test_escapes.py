"""Outside data never reaches a terminal raw (issue 14, item 6): a destination's answer quotes
the sender's label values, and ESC, BEL, NUL, DEL, the C1 controls, bidi overrides and lone
surrogates in it are written as escapes in log lines (rwrouter.logs) and in ``rwrouter
rejected list`` (whose text output is what a user reads in a terminal)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import pytest

from rwrouter.auth.schemes import NoAuth
from rwrouter.cli import main
from rwrouter.deadletter.store import DeadLetterStore, dead_letter_dir
from rwrouter.logs import LogfmtFormatter, escape, kv, q
from rwrouter.metrics import Metrics
from rwrouter.send.attempts import Attempts
from rwrouter.send.delivery import Deliverer
from rwrouter.send.refusals import Kind
from rwrouter.send.retry import RetryPolicy
from rwrouter.send.transport import Answer
from tests.support.clients import FakeClient

# id, the raw character, how it is written
CONTROLS = [
    ("esc", "\x1b", "\\x1b"),
    ("bel", "\x07", "\\x07"),
    ("nul", "\x00", "\\x00"),
    ("del", "\x7f", "\\x7f"),
    ("c1_csi", "\x9b", "\\x9b"),
    ("c1_nel", "\x85", "\\x85"),
    ("backspace", "\x08", "\\x08"),
    ("bidi_override", "\u202e", "\\u202e"),
    ("bidi_isolate", "\u2066", "\\u2066"),
    ("lone_surrogate", "\ud800", "\\ud800"),
    ("newline", "\n", "\\n"),
    ("carriage_return", "\r", "\\r"),
    ("tab", "\t", "\\t"),
]
IDS = [c[0] for c in CONTROLS]
RAW = [c[1] for c in CONTROLS]


def _answer(char: str) -> str:
    """A Prometheus-like 400 body quoting a sender's label value holding ``char``."""
    return f'out of bounds: series {{job="a{char}]0;pwned{char}b"}}'


def _raw_controls(text: str) -> list[str]:
    return [c for c in RAW if c in text]


@pytest.mark.parametrize(("char", "written"), [c[1:] for c in CONTROLS], ids=IDS)
def test_q_and_escape_write_the_character_as_an_escape(char: str, written: str) -> None:
    assert escape(f"a{char}b") == f"a{written}b"
    assert q(f"a{char}b") == f'"a{written}b"'


def test_escape_keeps_printable_text_as_it_is() -> None:
    text = 'job="gpu" \\d+ ünïcødé 日本 🙂'
    assert escape(text) == text


@pytest.mark.parametrize(("char", "written"), [c[1:] for c in CONTROLS], ids=IDS)
async def test_a_destination_answer_is_logged_escaped(
    char: str, written: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A 400 from the destination is logged (the refused part) through LogfmtFormatter."""

    def refuse(_body: bytes, _headers: Mapping[str, str]) -> Answer:
        return Answer(400, {}, _answer(char).encode("utf-8", "surrogatepass"))

    attempts = Attempts(
        name="d",
        transport=FakeClient(refuse),
        auth=NoAuth(),
        policy=RetryPolicy(),
        metrics=Metrics().send,
    )
    deliverer = Deliverer(attempts=attempts)
    with caplog.at_level(logging.ERROR, logger="rwrouter.sending"):
        assert await deliverer.deliver([(b"frame", 1)], Kind.SAMPLES) == 0
    (record,) = [r for r in caplog.records if "refused by destination" in r.getMessage()]
    line = LogfmtFormatter().format(record)
    assert "\n" not in line
    assert _raw_controls(line) == []
    assert "pwned" in line


def test_a_library_message_in_key_value_form_is_escaped_too() -> None:
    record = logging.LogRecord("aiohttp", logging.ERROR, __file__, 1, "a=b\x1b[2J\x07", None, None)
    line = LogfmtFormatter().format(record)
    assert line.endswith("a=b\\x1b[2J\\x07")


def test_kv_of_a_field_with_every_control_is_one_clean_line() -> None:
    line = str(kv(body="".join(RAW), msg="x"))
    assert _raw_controls(line) == []


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize(("char", "written"), [c[1:] for c in CONTROLS], ids=IDS)
def test_rejected_list_prints_the_answer_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], char: str, written: str
) -> None:
    config = tmp_path / "rwrouter.yaml"
    config.write_text(
        f"storage: {{path: {tmp_path / 'data'}}}\n"
        "remote_write:\n  - name: self-hosted\n    url: http://127.0.0.1:9/write\n"
    )
    store = DeadLetterStore(
        dead_letter_dir(str(tmp_path / "data"), "self-hosted"), max_bytes=1 << 20
    )
    answer = _answer(char)
    store.add(
        raw=b"", kind="samples", status=400, reason="4xx", series=1, samples=1, response=answer
    )
    assert main(["rejected", "list", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert _raw_controls(out.replace("\n", "")) == []  # the layout's own newlines aside
    if char == "\n":  # the listing shows the answer's first line only
        assert 'series {job="a\n' in out
        return
    shown = "?" if char == "\ud800" else written  # the store keeps valid UTF-8 only
    assert f"a{shown}]0;pwned{shown}b" in out
