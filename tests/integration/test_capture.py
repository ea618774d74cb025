"""``rwrouter capture`` (the receiver, in-process on 127.0.0.1) and ``rwrouter audit --capture``:
the offline audit of a capture equals the live audit of a router that received the same
requests; refusals, a full capture file and a file of another kind."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import snappy  # type: ignore[import-untyped,unused-ignore]
from aiohttp import web

from rwrouter.audit.capture import MAGIC, MAX_BODY_BYTES, CaptureError, CaptureReader
from rwrouter.audit.live import audit_capture
from rwrouter.config import ServerConfig, parse_config
from rwrouter.protocol import Written
from rwrouter.server.capture import CaptureWriter, capture_app
from tests.integration.conftest import StartRouter, post_write
from tests.integration.test_audit import ROUTER, audit, base, by_name, fleet
from tests.support.capture import CaptureServer
from tests.support.rw2 import HEADERS_V2, encode_v2, symbolize
from tests.support.series import HEADERS, decode


@pytest.fixture
async def capture_url(tmp_path: Path) -> AsyncIterator[tuple[str, CaptureWriter]]:
    """A capture receiver on a free port of 127.0.0.1 writing ``tmp_path/traffic.rwcap``."""
    writer = CaptureWriter(tmp_path / "traffic.rwcap", max_bytes=1 << 20)
    runner = web.AppRunner(capture_app(writer, ServerConfig()), auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", writer
    await runner.cleanup()
    writer.close()


async def test_offline_audit_of_a_capture_equals_the_live_audit(
    capture_url: tuple[str, CaptureWriter],
    start_router: StartRouter,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
) -> None:
    url, writer = capture_url
    router = await start_router(ROUTER.format(url=base(fresh_capture)))
    for scrape in range(3):
        body = fleet(scrape)
        async with http.post(f"{url}/api/v1/write", data=body, headers=HEADERS) as resp:
            assert resp.status == 204
        assert (await post_write(http, router, body))[0] == 204
    live = by_name(await audit(http, router))
    writer.close()
    config = parse_config(ROUTER.format(url=base(fresh_capture)), env={})
    with open(writer.path, "rb") as stream:
        offline = audit_capture(config, stream, top=None)
    assert (offline.requests, offline.skipped, offline.reader.torn) == (3, 0, False)
    counted = by_name(offline.report)
    # Offline every destination is counted (nothing is sent); the audited ones match live.
    assert {name: counted[name] for name in live} == live
    assert counted["selfhosted"] == {
        "DCGM_FI_DEV_FB_USED": 8,
        "DCGM_FI_PROF_PIPE": 4,
        "node_cpu_seconds_total": 3,
    }
    shadow = {d["name"]: d["shadow"] for d in offline.report["destinations"]}
    assert shadow == {"workspace": False, "selfhosted": False, "every-gpu-family": True}


RW3 = "application/x-protobuf;proto=io.prometheus.write.v3.Request"
REFUSALS = [
    ("not_snappy", b"not snappy", HEADERS, 400),
    ("gzip", b"x", {**HEADERS, "Content-Encoding": "gzip"}, 415),
    ("unknown_protobuf_message", b"x", {**HEADERS, "Content-Type": RW3}, 415),
    ("rw2_not_snappy", b"x", HEADERS_V2, 400),
    (
        "rw2_ref_outside_the_symbols_table",
        bytes(snappy.compress(b"\x22\x00\x2a\x03\x0a\x01\x05")),
        HEADERS_V2,
        400,
    ),
]


@pytest.mark.parametrize(
    ("body", "headers", "status"), [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS]
)
async def test_capture_refuses_what_the_router_refuses_and_records_nothing(
    capture_url: tuple[str, CaptureWriter],
    http: aiohttp.ClientSession,
    body: bytes,
    headers: dict[str, str],
    status: int,
) -> None:
    url, writer = capture_url
    async with http.post(f"{url}/api/v1/write", data=body, headers=headers) as resp:
        assert resp.status == status
        assert (await resp.text()).count("\n") == 1
        written = Written.parse(resp.headers)
    assert written == (Written() if headers is HEADERS_V2 else None)
    assert (writer.summary.requests, writer.summary.refused) == (0, 1)


async def test_rw2_requests_are_captured_in_their_rw1_form(
    capture_url: tuple[str, CaptureWriter],
    start_router: StartRouter,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
) -> None:
    """A capture of RW 2.0 requests holds their RW1 form (the format of every capture file):
    its offline audit equals the live audit of a router sent the same series as RW 1.0."""
    url, writer = capture_url
    router = await start_router(ROUTER.format(url=base(fresh_capture)))
    sent = []
    for scrape in range(3):
        body = fleet(scrape)
        rw1, _ = decode(body)
        sent.append(rw1.SerializeToString())
        async with http.post(
            f"{url}/api/v1/write", data=encode_v2(symbolize(rw1)), headers=HEADERS_V2
        ) as resp:
            assert resp.status == 204, await resp.text()
            samples = sum(len(ts.samples) for ts in rw1.timeseries)
            assert Written.parse(resp.headers) == Written(samples=samples)
        assert (await post_write(http, router, body))[0] == 204
    writer.close()
    with open(writer.path, "rb") as stream:
        recorded = [bytes(snappy.decompress(body)) for _, body in CaptureReader(stream).records()]
    assert recorded == sent
    config = parse_config(ROUTER.format(url=base(fresh_capture)), env={})
    with open(writer.path, "rb") as stream:
        offline = audit_capture(config, stream, top=None)
    assert (offline.requests, offline.skipped) == (3, 0)
    live = by_name(await audit(http, router))
    assert {name: by_name(offline.report)[name] for name in live} == live


async def test_a_full_capture_answers_204_and_records_no_more(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    body = fleet(0)
    writer = CaptureWriter(tmp_path / "small.rwcap", max_bytes=len(body) * 2 + 100)
    runner = web.AppRunner(capture_app(writer, ServerConfig()), auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        for _ in range(4):
            url = f"http://127.0.0.1:{port}/api/v1/push"
            async with http.post(url, data=body, headers=HEADERS) as resp:
                assert resp.status == 204
    finally:
        await runner.cleanup()
        writer.close()
    assert (writer.summary.requests, writer.summary.discarded) == (2, 2)
    with open(writer.path, "rb") as stream:
        assert len(list(CaptureReader(stream).records())) == 2
    # Appending to the same file later keeps the earlier records.
    again = CaptureWriter(writer.path, max_bytes=1 << 20)
    again.write(body, 1)
    again.close()
    with open(writer.path, "rb") as stream:
        assert len(list(CaptureReader(stream).records())) == 3


def test_an_existing_file_of_another_kind_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("keep me\n")
    with pytest.raises(CaptureError, match="is not an rwrouter capture file"):
        CaptureWriter(other, max_bytes=1 << 20)
    assert other.read_text() == "keep me\n"


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rwrouter", *args], capture_output=True, text=True, timeout=timeout
    )


async def test_rwrouter_audit_capture_cli(
    capture_url: tuple[str, CaptureWriter],
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
    tmp_path: Path,
) -> None:
    url, writer = capture_url
    for scrape in range(2):
        async with http.post(f"{url}/api/v1/write", data=fleet(scrape), headers=HEADERS) as r:
            assert r.status == 204
    with open(writer.path, "ab") as stream:  # a capture cut mid-record
        stream.write(b"\x01\x02\x03")
    config = tmp_path / "rwrouter.yaml"
    config.write_text(ROUTER.format(url=base(fresh_capture)))
    result = await asyncio.to_thread(
        run_cli,
        "audit",
        "--config",
        str(config),
        "--capture",
        str(writer.path),
        "--json",
        "--top",
        "0",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"rwrouter audit: {writer.path}: 2 requests counted; read up to an incomplete or "
        "unreadable record (a capture still being written, or a damaged file)"
    )
    assert sum(by_name(json.loads(result.stdout))["selfhosted"].values()) == 15
    table = await asyncio.to_thread(
        run_cli,
        "audit",
        "--config",
        str(config),
        "--capture",
        str(writer.path),
        "--sort",
        "samples",
    )
    assert "destination every-gpu-family (shadow: counted, not sent)" in table.stdout
    missing = await asyncio.to_thread(run_cli, "audit", "--capture", str(writer.path))
    assert missing.returncode == 2 and "--capture needs --config" in missing.stderr
    not_capture = await asyncio.to_thread(
        run_cli, "audit", "--config", str(config), "--capture", str(config)
    )
    assert not_capture.returncode == 1
    assert "not an rwrouter capture file" in not_capture.stderr


@pytest.mark.parametrize("damage", ["killed_mid_write", "damaged_length"])
def test_appending_to_a_capture_with_an_unreadable_end_is_refused(
    tmp_path: Path, damage: str
) -> None:
    """Records appended behind an unreadable end could never be read, and cutting the end
    could destroy whole records behind a damaged length field: refuse, and say where the
    readable part ends (truncating there keeps it)."""
    path = tmp_path / "torn.rwcap"
    first = CaptureWriter(path, max_bytes=1 << 20)
    for ms in range(1, 5):
        first.write(fleet(ms), ms)
    first.close()
    data = path.read_bytes()
    record = (len(data) - len(MAGIC)) // 4
    readable = len(MAGIC) + 2 * record
    if damage == "killed_mid_write":  # the last record is missing its end: 3 records readable
        path.write_bytes(data[:-7])
        readable = len(MAGIC) + 3 * record
    else:  # the third record's length field says 1 GiB + 1: records 3 and 4 unreadable
        at = readable + 8
        path.write_bytes(data[:at] + (MAX_BODY_BYTES + 1).to_bytes(4, "little") + data[at + 4 :])
    before = path.read_bytes()
    with pytest.raises(CaptureError, match=f"truncate -s {readable} "):
        CaptureWriter(path, max_bytes=1 << 20)
    assert path.read_bytes() == before  # nothing destroyed
    with open(path, "r+b") as stream:  # what the message says to do
        stream.truncate(readable)
    again = CaptureWriter(path, max_bytes=1 << 20)
    again.write(fleet(9), 9)
    again.close()
    with open(path, "rb") as stream:
        reader = CaptureReader(stream)
        times = [ms for ms, _ in reader.records()]
    assert times[-1] == 9 and not reader.torn


CAPTURE_CLI_ERRORS = [
    ("listen_without_port", ["--listen", "nohost"], 2, "--listen: expected host:port"),
    ("listen_port_too_large", ["--listen", "127.0.0.1:99999"], 2, "--listen: expected host:port"),
]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [c[1:] for c in CAPTURE_CLI_ERRORS],
    ids=[c[0] for c in CAPTURE_CLI_ERRORS],
)
def test_rwrouter_capture_bad_arguments(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    output = tmp_path / "out.rwcap"
    result = run_cli("capture", "--output", str(output), *args)
    assert result.returncode == code and message in result.stderr
    assert "Traceback" not in result.stderr and not output.exists()


def test_rwrouter_capture_on_a_port_in_use_leaves_no_file(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        output = tmp_path / "out.rwcap"
        result = run_cli("capture", "--output", str(output), "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 1 and "address already in use" in result.stderr.lower()
    assert not output.exists()
