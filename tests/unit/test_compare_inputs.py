"""``rwrouter compare``'s inputs, refused before any query is sent: the window (finite, in
1970-9999, whole ms, aligned to the step, at most Prometheus's 11,000 steps), the stores'
URLs (no ``user:password@``, query string, fragment or other scheme), the queries file, the
flags; the exit status scheme (2 for every usage or configuration error, one line, never a
traceback; 3, never 1, for an interruption or a bug) and JSON without NaN. No socket: every
case fails before the first request."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rwrouter.cli import main
from rwrouter.cli.compare import MAX_QUERIES_BYTES
from rwrouter.compare.client import redact, secrets_of
from rwrouter.compare.report_json import json_safe
from rwrouter.compare.targets import (
    LATEST_S,
    MAX_POINTS,
    Window,
    check_base,
    parse_queries,
    seconds_text,
    store_url,
    window,
)
from rwrouter.config import parse_config
from rwrouter.errors import ConfigError

SECRET = "S3cr3tPw"
NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("kwargs", "flag", "reason"),
    [
        pytest.param({"end": float("nan")}, "--end", "a time in 1970-9999", id="end_nan"),
        pytest.param({"end": float("inf")}, "--end", "a time in 1970-9999", id="end_inf"),
        pytest.param({"end": 1e20}, "--end", "a time in 1970-9999", id="end_1e20"),
        pytest.param({"end": 1e306}, "--end", "a time in 1970-9999", id="end_1e306_overflows_ms"),
        pytest.param({"range_s": 1e307}, "--range", "a duration", id="range_1e307"),
        pytest.param({"end": -62135596800.0}, "--end", "a time in 1970-9999", id="end_year_1"),
        pytest.param({"end": LATEST_S + 1.0}, "--end", "a time in 1970-9999", id="end_year_10000"),
        pytest.param({"range_s": float("inf")}, "--range", "from 1ms", id="range_inf"),
        pytest.param({"range_s": float("nan")}, "--range", "from 1ms", id="range_nan"),
        pytest.param({"range_s": 0.0}, "--range", "from 1ms", id="range_0"),
        pytest.param({"range_s": 1e30}, "--range", "from 1ms", id="range_huge"),
        pytest.param({"step_s": 0.0004}, "--step", "from 1ms", id="step_under_1ms"),
        pytest.param({"step_s": -1.0}, "--step", "from 1ms", id="step_negative"),
        pytest.param({"step_s": float("nan")}, "--step", "from 1ms", id="step_nan"),
        pytest.param({"range_s": 2e9}, "--range", "before 1970", id="start_before_1970"),
        pytest.param(
            {"range_s": 86400.0, "step_s": 1.0}, "--step", "at most 11,000", id="too_many_steps"
        ),
    ],
)
def test_window_refuses(kwargs: dict[str, float], flag: str, reason: str) -> None:
    args: dict[str, Any] = {"now": NOW, "range_s": 3600.0, "step_s": None, "end": None}
    with pytest.raises(ConfigError, match=reason) as info:
        window(**{**args, **kwargs})
    assert info.value.path == flag


@pytest.mark.parametrize(
    ("range_s", "step_s", "refused"),
    [
        # Prometheus refuses `end.Sub(start)/step > 11000` (web/api/v1/api.go, queryRange):
        # 11,000 steps (11,001 points) are answered, one more step is not.
        pytest.param(11_000.0, 1.0, False, id="11000_steps_answered"),
        pytest.param(11_001.0, 1.0, True, id="11001_steps_refused"),
    ],
)
def test_window_takes_prometheus_own_limit(range_s: float, step_s: float, refused: bool) -> None:
    if refused:
        with pytest.raises(ConfigError, match=f"at most {MAX_POINTS:,} steps"):
            window(now=NOW, range_s=range_s, step_s=step_s, end=None)
    else:
        span = window(now=NOW, range_s=range_s, step_s=step_s, end=None)
        assert (span.end_ms - span.start_ms) // span.step_ms == MAX_POINTS


@pytest.mark.parametrize(
    ("end", "range_s", "step_s", "expected"),
    [
        pytest.param(1000.0, 300.0, 30.0, Window(690_000, 990_000, 30_000), id="aligned_end"),
        pytest.param(
            1000.0, 290.0, 30.0, Window(690_000, 990_000, 30_000), id="start_rounded_down"
        ),
        pytest.param(
            1_000_000.123, 7.0, 0.25, Window(999_993_000, 1_000_000_000, 250), id="sub_second"
        ),
        pytest.param(
            1e9,
            3_600.0,
            1_234.567,
            Window(999_995_566_299, 999_999_270_000, 1_234_567),
            id="odd_step",
        ),
    ],
)
def test_window_start_and_end_are_multiples_of_the_step(
    end: float, range_s: float, step_s: float, expected: Window
) -> None:
    span = window(now=0.0, range_s=range_s, step_s=step_s, end=end)
    assert span == expected
    assert span.start_ms % span.step_ms == 0 and span.end_ms % span.step_ms == 0
    assert span.end_ms - span.start_ms >= round(range_s * 1000)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        pytest.param(15_000, "15", id="whole"),
        pytest.param(500, "0.5", id="half"),
        pytest.param(1, "0.001", id="one_ms"),
        pytest.param(1_234_567_000, "1234567", id="seven_digits_not_g"),  # %g: 1.23457e+06
        pytest.param(1_700_000_000_123, "1700000000.123", id="a_time"),
        pytest.param(0, "0", id="zero"),
    ],
)
def test_seconds_text_is_exact(ms: int, text: str) -> None:
    assert seconds_text(ms) == text
    assert round(float(text) * 1000) == ms


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        pytest.param(f"http://u:{SECRET}@h:9090", "user:password@", id="userinfo"),
        pytest.param(f"http://{SECRET}@h:9090", "user:password@", id="token_as_user"),
        pytest.param(f"http://u:{SECRET}/x@h:9090", "user:password@", id="slash_in_password"),
        pytest.param(f"http://h:9090/?key={SECRET}", "query string", id="query_string"),
        pytest.param("http://h:9090/prom?", "query string", id="empty_query_string"),
        pytest.param(f"http://h:9090/#{SECRET}", "query string or fragment", id="fragment"),
        pytest.param("ftp://h:9090", "expected an http", id="ftp"),
        pytest.param("file:///etc/passwd", "expected an http", id="file"),
        pytest.param("h:9090", "expected an http", id="no_scheme"),
        pytest.param("http://h:99999", "not a valid URL", id="bad_port"),
        pytest.param("http://[::1", "not a valid URL", id="bad_ipv6"),
    ],
)
def test_check_base_refuses(url: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as info:
        check_base(url, "--self-hosted")
    assert info.value.path == "--self-hosted"
    assert SECRET not in str(info.value)


def test_check_base_takes_an_api_base() -> None:
    assert check_base("https://h:9090/prom/", "--workspace") == "https://h:9090/prom"


def test_a_remote_write_url_with_a_query_string_gives_no_query_base() -> None:
    config = parse_config(
        f"remote_write:\n  - {{name: p, url: 'http://h:9090/api/v1/write?key={SECRET}'}}\n",
        env={},
    )
    with pytest.raises(ConfigError, match="give --self-hosted URL") as info:
        store_url(config.remote_write[0], None, "--self-hosted")
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("text", "queries"),
    [
        pytest.param("up\vup\nup\x1cup\n", ["up\vup", "up\x1cup"], id="vertical_tab_and_fs"),
        pytest.param("up\u2028up\n", ["up\u2028up"], id="line_separator"),
        pytest.param("\ufeffup\r\n# c\r\n\r\n  sum(up)  \r\n", ["up", "sum(up)"], id="bom_crlf"),
    ],
)
def test_parse_queries_splits_at_line_feeds_only(text: str, queries: list[str]) -> None:
    assert parse_queries(text) == queries


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param({"a": float("nan")}, {"a": "NaN"}, id="nan"),
        pytest.param([float("inf"), -float("inf"), 1.5], ["+Inf", "-Inf", 1.5], id="infinities"),
        pytest.param({"q": [{"v": (float("nan"), "x")}]}, {"q": [{"v": ["NaN", "x"]}]}, id="deep"),
    ],
)
def test_json_safe(value: Any, expected: Any) -> None:
    assert json_safe(value) == expected
    json.dumps(json_safe(value), allow_nan=False)


# --------------------------------------------------------------------------------------------
# the command: every usage or configuration error exits 2 with one line, before any request


CONFIG = """
remote_write:
  - name: workspace
    url: http://127.0.0.1:9/workspaces/ws-1/api/v1/remote_write
    sigv4: {region: us-east-1, access_key: AKIDTEST, secret_key: test-secret}
  - name: self-hosted
    url: http://127.0.0.1:9/api/v1/write
"""


def _config(tmp_path: Path, text: str = CONFIG) -> str:
    path = tmp_path / "rwrouter.yaml"
    path.write_text(text)
    return str(path)


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "fifo")
    return str(tmp_path / "fifo")


def _file(content: bytes) -> Callable[[Path], str]:
    def make(tmp_path: Path) -> str:
        (tmp_path / "queries").write_bytes(content)
        return str(tmp_path / "queries")

    return make


USAGE_ERRORS = [
    pytest.param(("--end", "nan"), "--end", id="end_nan"),
    pytest.param(("--end", "inf"), "--end", id="end_inf"),
    pytest.param(("--end", "1e20"), "--end", id="end_1e20"),
    pytest.param(("--end", "1e306"), "--end", id="end_1e306"),
    pytest.param(("--end", "0001-01-01T00:00:00Z"), "--end", id="end_year_1"),
    pytest.param(("--end", "0001-01-01T00:00:00+01:00"), "--end", id="end_before_year_1"),
    pytest.param(("--end", "tomorrow"), "--end", id="end_not_a_time"),
    pytest.param(("--range", "0s"), "--range", id="range_0"),
    pytest.param(("--range", "99999999999999999999y"), "--range", id="range_huge"),
    pytest.param(("--range", "1h", "--step", "100ms"), "--step", id="too_many_steps"),
    pytest.param(("--timeout", "0s"), "--timeout", id="timeout_0"),
    pytest.param(("--timeout", "2d"), "--timeout", id="timeout_over_1d"),
    pytest.param(("--max-answer-bytes", "10"), "--max-answer-bytes", id="answer_cap_tiny"),
    pytest.param(("--max-answer-bytes", "5GiB"), "--max-answer-bytes", id="answer_cap_huge"),
    pytest.param(("--max-answer-bytes", "lots"), "--max-answer-bytes", id="answer_cap_text"),
    pytest.param(("--self-hosted", f"http://u:{SECRET}@h:9090"), "--self-hosted", id="userinfo"),
    pytest.param(("--workspace", f"http://h/ws?k={SECRET}"), "--workspace", id="query_string"),
    pytest.param(("--workspace", "ftp://h/ws"), "--workspace", id="scheme"),
]


@pytest.mark.parametrize(("args", "flag"), USAGE_ERRORS)
def test_usage_errors_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], flag: str
) -> None:
    code = main(["compare", "--config", _config(tmp_path), "--query", "up", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"rwrouter: configuration error: {flag}: ") and err.count("\n") == 1
    assert SECRET not in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(("--repeat", "0"), "--repeat", id="repeat_0"),
        pytest.param(("--repeat", "1001"), "--repeat", id="repeat_over_1000"),
        pytest.param(("--tolerance", "nan"), "--tolerance", id="tolerance_nan"),
        pytest.param(("--tolerance", "inf"), "--tolerance", id="tolerance_inf"),
    ],
)
def test_bad_numbers_are_argparse_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["compare", "--config", _config(tmp_path), "--query", "up", *args])
    assert info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.timeout(10)  # a FIFO opened for reading waits for a writer: it must not
@pytest.mark.parametrize(
    ("path_of", "reason"),
    [
        pytest.param(lambda _: "/dev/zero", "not a regular file", id="dev_zero"),
        pytest.param(_fifo, "not a regular file", id="fifo"),
        pytest.param(lambda p: str(p), "is a directory", id="directory"),
        pytest.param(
            _file(b"up\n" * (MAX_QUERIES_BYTES // 3 + 1)),
            f"is over {MAX_QUERIES_BYTES:,} bytes",
            id="too_large",
        ),
        pytest.param(_file(b"up\xff\n"), "can't decode byte 0xff", id="not_utf8"),
        pytest.param(lambda p: str(p / "none"), "No such file", id="missing"),
    ],
)
def test_a_queries_file_is_bounded(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    path_of: Callable[[Path], str],
    reason: str,
) -> None:
    code = main(["compare", "--config", _config(tmp_path), "--queries", path_of(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--queries: " in err and reason in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("sigv4", "tls", "path"),
    [
        pytest.param(
            "{region: us-east-1, profile: no-such-profile}",
            "",
            "remote_write[0].sigv4",
            id="no_aws_credentials",
        ),
        pytest.param(
            "{region: us-east-1, access_key: AKIDTEST, secret_key: test-secret}",
            "    tls_config: {ca_file: ca.pem}\n",
            "remote_write[0].tls_config.ca_file",  # refused at load, as check-config does
            id="ca_file_not_pem",
        ),
    ],
)
def test_credentials_and_tls_files_are_configuration_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    sigv4: str,
    tls: str,
    path: str,
) -> None:
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "empty").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "empty"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "empty"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    text = CONFIG.replace(
        "    sigv4: {region: us-east-1, access_key: AKIDTEST, secret_key: test-secret}\n",
        f"    sigv4: {sigv4}\n{tls}",
    )
    code = main(["compare", "--config", _config(tmp_path, text), "--query", "up"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"rwrouter: configuration error: {path}: ") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("raised", "says"),
    [
        pytest.param(KeyboardInterrupt(), "rwrouter compare: interrupted\n", id="interrupted"),
        pytest.param(RuntimeError("boom"), "internal error (a bug in rwrouter)", id="a_bug"),
    ],
)
def test_an_interruption_or_a_bug_exits_3_never_1(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    raised: BaseException,
    says: str,
) -> None:
    def run_queries(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr("rwrouter.compare.client.run_queries", run_queries)
    code = main(["compare", "--config", _config(tmp_path), "--query", "up"])
    assert code == 3
    assert says in capsys.readouterr().err


SIGV4_AUTH = (
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE12345/20261206/us-east-1/aps/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date, Signature=" + "ab12" * 16
)


@pytest.mark.parametrize(
    ("headers", "echoed", "left"),
    [
        pytest.param(
            {"Authorization": SIGV4_AUTH, "X-Amz-Date": "20261206T000000Z"},
            "no: Signature=" + "ab12" * 16 + " by AKIDEXAMPLE12345 at 20261206T000000Z",
            "no: <secret> by <secret> at 20261206T000000Z",
            id="sigv4_parts",
        ),
        pytest.param(
            {"X-Amz-Security-Token": "FwoGZXIvYXdzEBYaDH" * 8},
            "token " + "FwoGZXIvYXdzEBYaDH" * 8,
            "token <secret>",
            id="session_token",
        ),
        pytest.param(
            {"Authorization": "Basic dXNlcjpodW50ZXIy"},
            "got Basic dXNlcjpodW50ZXIy",
            "got <secret>",
            id="basic",
        ),
        pytest.param(
            {"Authorization": "Basic dXNlcjpwdw=="},
            "decoded dXNlcjpwdw and padded dXNlcjpwdw==",
            "decoded <secret> and padded <secret>",
            id="short_basic_without_its_prefix_or_padding",
        ),
        pytest.param(
            {"X-Amz-Security-Token": "IQoJb3JpZ2luX2Vj+MSJHMEUCIQD/abc=="},
            "token=IQoJb3JpZ2luX2Vj%2BMSJHMEUCIQD%2Fabc%3D%3D sent",
            "token=<secret> sent",
            id="session_token_percent_encoded",
        ),
        pytest.param(
            {"Content-Type": "application/x-www-form-urlencoded", "User-Agent": "rwrouter-compare"},
            "want application/x-www-form-urlencoded",
            "want application/x-www-form-urlencoded",
            id="plain_headers_kept",
        ),
    ],
)
def test_redact_what_a_store_echoes(headers: dict[str, str], echoed: str, left: str) -> None:
    assert redact(echoed, secrets_of(headers)) == left
