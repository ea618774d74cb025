"""``rwrouter rejected list|replay`` against a capture server on 127.0.0.1, as a user runs it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rwrouter.cli import main as rwrouter_main
from rwrouter.cli.rejected import REPLAY_RETRIES
from rwrouter.deadletter.store import DeadLetterStore, dead_letter_dir
from tests.support.capture import CaptureServer
from tests.support.series import Series, write_request

T0 = 1_700_000_000.0  # unix seconds: 2023-11-14 22:13:20 UTC


pytestmark = pytest.mark.usefixtures("restore_logging")


def main(args: list[str]) -> int:
    """``rwrouter rejected ARGS``, in process."""
    return rwrouter_main(["rejected", *args])


def write_config(tmp_path: Path, url: str, *, name: str = "self-hosted") -> Path:
    path = tmp_path / "rwrouter.yaml"
    path.write_text(f"""
storage:
  path: {tmp_path / "data"}
remote_write:
  - name: workspace
    url: http://127.0.0.1:9/unused
  - name: {name}
    url: {url}
    headers: {{X-Scope-OrgID: team-a}}
    basic_auth: {{username: router, password: s3cret}}
    queue_config: {{min_backoff: 10ms, max_backoff: 50ms}}
""")
    return path


def raw_batch(i: int, n: int = 2) -> bytes:
    series = [
        Series((("__name__", f"m{i}"), ("s", str(j))), ((1000 + j, float(j)),)) for j in range(n)
    ]
    return bytes(write_request(series).SerializeToString())


def fill(tmp_path: Path, count: int, *, name: str = "self-hosted") -> DeadLetterStore:
    """``count`` rejected batches of 2 series (one second apart from T0) for ``name``."""
    clock = [T0]
    store = DeadLetterStore(
        dead_letter_dir(str(tmp_path / "data"), name),
        max_bytes=1 << 20,
        wall_clock=lambda: clock[0],
    )
    for i in range(count):
        clock[0] = T0 + i
        store.add(
            raw=raw_batch(i),
            kind="samples",
            status=400,
            reason="4xx",
            series=2,
            samples=2,
            response=f"out of order sample {i}\nsecond line",
        )
    return store


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# replay ------------------------------------------------------------------------------------
REPLAYS = [
    # id, scripted statuses, exit code, indexes of the entries kept, requests received
    ("accepted_all_removed", [], 0, [], 3),
    ("refused_400_all_kept", [400, 400, 400], 1, [0, 1, 2], 3),
    ("one_refused_others_delivered", [204, 422, 200], 1, [1], 3),
    ("server_error_retried_then_kept", [503] * (REPLAY_RETRIES + 1), 1, [0], 3 + REPLAY_RETRIES),
    ("server_error_then_accepted", [500, 502], 0, [], 5),
]


@pytest.mark.parametrize(
    ("statuses", "code", "kept", "requests"), [c[1:] for c in REPLAYS], ids=[c[0] for c in REPLAYS]
)
def test_replay(
    tmp_path: Path,
    capture: CaptureServer,
    capsys: pytest.CaptureFixture[str],
    statuses: list[int],
    code: int,
    kept: list[int],
    requests: int,
) -> None:
    path = f"/{tmp_path.name}"
    capture.script(path, statuses)
    store = fill(tmp_path, 3)
    entries = store.entries()
    bodies = [store.body(e) for e in entries]
    config = write_config(tmp_path, capture.url(path))
    assert main(["replay", "--config", str(config), "self-hosted"]) == code
    out = capsys.readouterr().out
    assert store.entries() == [entries[i] for i in kept]
    received = capture.requests(path)
    assert len(received) == requests
    delivered = [r.body for r in received if r.status < 300]
    assert delivered == [b for i, b in enumerate(bodies) if i not in kept]  # exactly, in order
    assert {r.body for r in received} <= set(bodies)
    headers = received[0].headers
    assert headers["Content-Encoding"] == "snappy"
    assert headers["Content-Type"] == "application/x-protobuf"
    assert headers["X-Prometheus-Remote-Write-Version"] == "0.1.0"
    assert headers["X-Scope-OrgID"] == "team-a"
    assert headers["Authorization"] == "Basic cm91dGVyOnMzY3JldA=="  # router:s3cret
    assert headers["User-Agent"].startswith("rwrouter/")
    assert f"delivered {3 - len(kept)} of 3 batches" in out
    assert f"still in the store: {len(kept)}" in out
    refusal = max(statuses, default=0)  # the status answered to the kept entries
    for i in kept:
        assert f"kept      {entries[i].name}: {refusal}: scripted {refusal}" in out


METADATA_REPLAYS = [
    # id, scripted statuses, exit code, kept, requests received
    ("accepted", [], 0, False, 1),
    ("server_error_retried_then_accepted", [503, 502], 0, False, 3),
    ("refused_kept", [400], 1, True, 1),
]


@pytest.mark.parametrize(
    ("statuses", "code", "kept", "requests"),
    [c[1:] for c in METADATA_REPLAYS],
    ids=[c[0] for c in METADATA_REPLAYS],
)
def test_replay_metadata_sends_the_stored_body(
    tmp_path: Path,
    capture: CaptureServer,
    statuses: list[int],
    code: int,
    kept: bool,
    requests: int,
) -> None:
    """A rejected metadata batch goes out as it is stored (RW 1.0), retried as any request."""
    from rwrouter.wire import types_pb2

    path = f"/{tmp_path.name}"
    capture.script(path, statuses)
    store = DeadLetterStore(
        dead_letter_dir(str(tmp_path / "data"), "self-hosted"), max_bytes=1 << 20
    )
    up = types_pb2.MetricMetadata(type=types_pb2.MetricMetadata.GAUGE, metric_family_name="up")
    raw = bytes(write_request([], metadata=[up]).SerializeToString())
    store.add(raw=raw, kind="metadata", status=400, reason="4xx", series=1, samples=1, response="")
    (entry,) = store.entries()
    body = store.body(entry)
    config = write_config(tmp_path, capture.url(path))
    assert main(["replay", "--config", str(config), "self-hosted"]) == code
    received = capture.requests(path)
    assert [r.body for r in received] == [body] * requests  # the stored bytes, each attempt
    assert received[0].headers["X-Prometheus-Remote-Write-Version"] == "0.1.0"
    assert store.entries() == ([entry] if kept else [])


def test_replay_stops_when_the_destination_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = fill(tmp_path, 3)
    entries = store.entries()
    config = write_config(tmp_path, f"http://127.0.0.1:{free_port()}/api/v1/write")
    assert main(["replay", "--config", str(config), "self-hosted"]) == 1
    out = capsys.readouterr().out
    assert store.entries() == entries
    assert f"kept      {entries[0].name}: no answer: " in out
    assert "still in the store: 3" in out
    assert "destination unreachable: 2 batches not attempted (kept)" in out


def test_replay_keeps_entries_rejected_meanwhile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rwrouter run`` adding entries during a replay: they are neither sent nor removed."""
    store = fill(tmp_path, 2)
    replayed = store.entries()
    received: list[bytes] = []

    async def handle(request: web.Request) -> web.Response:
        received.append(await request.read())
        store.add(
            raw=raw_batch(9),
            kind="samples",
            status=None,
            reason="retry_budget",
            response="",
            series=2,
            samples=2,
        )
        return web.Response(status=204)

    with _Server(handle) as url:
        config = write_config(tmp_path, url)
        assert main(["replay", "--config", str(config), "self-hosted"]) == 0
    out = capsys.readouterr().out
    left = store.entries()
    assert len(received) == 2 and len(left) == 2
    assert not {e.name for e in left} & {e.name for e in replayed}
    assert "2 batches were rejected during the replay (not replayed)" in out


def test_replay_dry_run_sends_nothing(
    tmp_path: Path, capture: CaptureServer, capsys: pytest.CaptureFixture[str]
) -> None:
    path = f"/{tmp_path.name}"
    store = fill(tmp_path, 2)
    entries = store.entries()
    config = write_config(tmp_path, capture.url(path))
    assert main(["replay", "--config", str(config), "self-hosted", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: would send 2 batches to self-hosted" in out
    assert all(e.name in out for e in entries)
    assert capture.requests(path) == [] and store.entries() == entries


# list --------------------------------------------------------------------------------------
def test_list_table_as_a_user_runs_it(tmp_path: Path) -> None:
    store = fill(tmp_path, 2)
    config = write_config(tmp_path, "http://127.0.0.1:9/api/v1/write")
    result = subprocess.run(
        [sys.executable, "-m", "rwrouter", "rejected", "list", "--config", str(config)],
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("destination workspace: no rejected batches")
    directory = tmp_path / "data" / "rejected" / "self-hosted"
    assert lines[1] == (
        f"destination self-hosted: 2 rejected batches, {store.size_bytes} bytes on disk "
        f"({directory})"
    )
    assert lines[2].split() == [
        "TIME",
        "(UTC)",
        "KIND",
        "STATUS",
        "REASON",
        "SERIES",
        "SAMPLES",
        "BYTES",
        "RESPONSE",
    ]
    body_bytes = store.entries()[0].body_bytes
    assert lines[3].split() == [
        "2023-11-14",
        "22:13:20.000",
        "samples",
        "400",
        "4xx",
        "2",
        "2",
        str(body_bytes),
        "out",
        "of",
        "order",
        "sample",
        "0",
    ]
    assert lines[4].split()[:2] == ["2023-11-14", "22:13:21.000"]
    bytes_total = sum(e.body_bytes for e in store.entries())
    assert lines[5] == f"total: 2 batches, 4 series, 4 samples, {bytes_total} bytes"
    assert len(lines) == 6 and "Traceback" not in result.stderr


def test_list_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = fill(tmp_path, 2)
    config = write_config(tmp_path, "http://127.0.0.1:9/api/v1/write")
    assert main(["list", "--config", str(config), "self-hosted", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    (dest,) = listed["destinations"]
    assert dest["destination"] == "self-hosted" and dest["size_bytes"] == store.size_bytes
    first = dest["entries"][0]
    assert first["time"] == "2023-11-14T22:13:20.000Z" and first["status"] == 400
    assert first["response"] == "out of order sample 0\nsecond line"
    assert [e["name"] for e in dest["entries"]] == [e.name for e in store.entries()]
    body_bytes = sum(e.body_bytes for e in store.entries())
    assert listed["total"] == {"entries": 2, "series": 4, "samples": 4, "body_bytes": body_bytes}


def test_list_empty_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, "http://127.0.0.1:9/api/v1/write")
    assert main(["list", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "destination self-hosted: no rejected batches" in out
    assert out.splitlines()[-1] == "no rejected batches"
    assert not (tmp_path / "data").exists()  # listing creates nothing


def _time_out_of_range(path: Path) -> None:
    text = path.read_bytes()
    path.write_bytes(text.replace(b'"at_ms": ', b'"at_ms": 1000000000000000000', 1))


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(_time_out_of_range, id="at_ms_too_large"),
        pytest.param(_fifo, id="fifo_named_like_an_entry"),
    ],
)
@pytest.mark.timeout(30)
def test_list_skips_a_broken_entry_and_lists_the_others(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[Path], None],
) -> None:
    """As the docs say: a corrupt file is skipped with a warning, the others listed (an
    at_ms past year 9999 once failed the whole listing, exit 1; a FIFO hung it)."""
    store = fill(tmp_path, 3)
    broken = store.entries()[1]
    damage(store.directory / broken.name)
    config = write_config(tmp_path, "http://127.0.0.1:9/api/v1/write")
    assert main(["list", "--config", str(config), "self-hosted"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].startswith("total: 2 batches, 4 series, 4 samples")
    assert broken.name in err and "corrupt dead-letter entry skipped" in err


UNKNOWN = [
    ("list", ["list", "nope"]),
    ("list_json", ["list", "nope", "--json"]),
    ("replay", ["replay", "nope"]),
    ("replay_dry_run", ["replay", "nope", "--dry-run"]),
]


@pytest.mark.parametrize("args", [c[1] for c in UNKNOWN], ids=[c[0] for c in UNKNOWN])
def test_unknown_destination_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    config = write_config(tmp_path, "http://127.0.0.1:9/api/v1/write")
    assert main([args[0], "--config", str(config), *args[1:]]) == 2
    err = capsys.readouterr().err
    assert "unknown destination 'nope'" in err and "workspace, self-hosted" in err


def test_bad_configuration_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("remote_write: []\nstorage: {paht: x}\n")
    assert main(["list", "--config", str(config)]) == 2
    assert "configuration error: storage.paht" in capsys.readouterr().err


class _Server:
    """A one-handler aiohttp server in its own thread (the replay runs its own event loop)."""

    def __init__(self, handler: Callable[[web.Request], Coroutine[Any, Any, web.Response]]) -> None:
        self._capture = CaptureServer()
        self._capture._handle = handler  # type: ignore[method-assign,assignment]

    def __enter__(self) -> str:
        return self._capture.start().url("/api/v1/write")

    def __exit__(self, *exc_info: object) -> None:
        self._capture.stop()


# replay in the destination's protocol ------------------------------------------------------
PROTOCOL_REPLAYS = [
    # id, protobuf_message, does the destination speak RW 2.0, messages received
    (
        "rw2_destination_gets_rw2",
        "io.prometheus.write.v2.Request",
        True,
        ["io.prometheus.write.v2.Request"],
    ),
    (
        "rw2_destination_answering_415_gets_rw1",
        "io.prometheus.write.v2.Request",
        False,
        ["io.prometheus.write.v2.Request", "prometheus.WriteRequest"],
    ),
    (
        "rw1_destination_gets_rw1_without_start_timestamps",
        "prometheus.WriteRequest",
        True,
        ["prometheus.WriteRequest"],
    ),
]


@pytest.mark.parametrize(
    ("message", "speaks_rw2", "received"),
    [c[1:] for c in PROTOCOL_REPLAYS],
    ids=[c[0] for c in PROTOCOL_REPLAYS],
)
def test_replay_in_the_destinations_protocol(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    message: str,
    speaks_rw2: bool,
    received: list[str],
) -> None:
    """A stored batch (RW1 form, a start timestamp in a sample, as received by RW 2.0) goes
    out as ``rwrouter run`` would send it to that destination."""
    from rwrouter.protocol import RW2_MESSAGE, Written, message_of
    from rwrouter.wire import decompress, remote_pb2, write_v2_pb2
    from tests.support.rw2_frames import Frame, frames

    sample = write_v2_pb2.Sample(value=2.5, timestamp=5_000, start_timestamp=4_000)
    raw = frames([Frame((("__name__", "m"),), (sample.SerializeToString(),))])
    seen: list[tuple[str, bytes]] = []

    async def handle(request: web.Request) -> web.Response:
        kind = message_of(
            request.headers.get("Content-Encoding"), request.headers.get("Content-Type")
        )
        seen.append((kind, decompress(await request.read(), max_decoded_bytes=1 << 20)))
        if kind == RW2_MESSAGE:
            if not speaks_rw2:
                return web.Response(status=415)
            return web.Response(status=204, headers=Written(1, 0, 0).headers())
        return web.Response(status=204)

    store = DeadLetterStore(
        dead_letter_dir(str(tmp_path / "data"), "self-hosted"), max_bytes=1 << 20
    )
    store.add(raw=raw, kind="samples", status=400, reason="4xx", series=1, samples=1, response="")
    with _Server(handle) as url:
        config = write_config(tmp_path, url)
        setting = f"    protobuf_message: {message}\n    queue_config:"
        config.write_text(config.read_text().replace("    queue_config:", setting))
        assert main(["replay", "--config", str(config), "self-hosted"]) == 0
    assert [kind for kind, _ in seen] == received
    assert store.entries() == []
    kind, body = seen[-1]
    if kind == RW2_MESSAGE:
        request = write_v2_pb2.Request.FromString(body)
        assert list(request.symbols) == ["", "__name__", "m"]
        assert request.timeseries[0].samples[0] == sample  # the start timestamp kept
    else:
        rw1 = remote_pb2.WriteRequest.FromString(body)
        assert (
            rw1.timeseries[0].samples[0].SerializeToString()
            == write_v2_pb2.Sample(value=2.5, timestamp=5_000).SerializeToString()
        )
    assert "delivered 1 of 1 batches" in capsys.readouterr().out


RELATIVE = (
    "storage: {path: data}\nremote_write:\n  - {name: workspace, url: 'http://127.0.0.1:9/x'}\n"
)


@pytest.mark.parametrize(
    ("config_text", "cwd", "made", "expected"),
    [
        pytest.param(
            RELATIVE,
            "elsewhere",
            "",
            "destination workspace: no rejected batches (storage.path 'data' does not exist "
            "here: it is relative to the current directory, {tmp}/elsewhere, as rwrouter run "
            "resolves it; run this in rwrouter run's working directory, or make storage.path "
            "absolute)",
            id="relative_path_from_another_directory",
        ),
        pytest.param(
            RELATIVE,
            "",
            "data/queue/workspace",
            "destination workspace: no rejected batches yet (nothing refused; store "
            "{tmp}/data/rejected/workspace)",
            id="relative_path_where_run_runs_nothing_refused",
        ),
        pytest.param(
            RELATIVE,
            "",
            "data/rejected/workspace",
            "destination workspace: no rejected batches (data/rejected/workspace)",
            id="relative_path_where_run_runs_store_emptied",
        ),
        pytest.param(
            RELATIVE.replace("path: data", "path: {tmp}/gone"),
            "",
            "",
            "destination workspace: no rejected batches (storage.path {tmp}/gone does not exist)",
            id="absolute_path_missing",
        ),
        pytest.param(
            RELATIVE.replace("path: data", "path: {tmp}/data"),
            "elsewhere",
            "data/queue/workspace",
            "destination workspace: no rejected batches yet (nothing refused; store "
            "{tmp}/data/rejected/workspace)",
            id="absolute_path_nothing_refused",
        ),
    ],
)
def test_an_empty_list_says_where_it_looked(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    config_text: str,
    cwd: str,
    made: str,
    expected: str,
) -> None:
    config = tmp_path / "rwrouter.yaml"
    config.write_text(config_text.replace("{tmp}", str(tmp_path)))
    (tmp_path / "elsewhere").mkdir()
    if made:  # what rwrouter run made: its queue (nothing refused) or an emptied store
        (tmp_path / made).mkdir(parents=True)
    monkeypatch.chdir(tmp_path / cwd)
    assert main(["list", "--config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [expected.replace("{tmp}", str(tmp_path)), "no rejected batches"]
    assert main(["list", "--config", str(config), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["storage_path_exists"] is ("data" in made)
    assert listed["destinations"][0]["directory_exists"] is ("rejected" in made)
