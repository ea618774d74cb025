"""``rwrouter compare``'s transport against hostile stores (an aiohttp server on 127.0.0.1,
its answer chosen by the first path segment): a redirect is not followed and fails the run
naming the host only, an answer nested too deep to parse or over ``--max-answer-bytes``
fails only its run (exit 3, one line, no traceback), every query is a POST with a form body
(a long query included), its times and step exact and aligned. The command runs in-process,
as ``rwrouter compare`` runs it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from aiohttp import web

from rwrouter.cli import main

pytestmark = pytest.mark.timeout(60)

SECRET = "tok-S3cr3t"
OK = {
    "status": "success",
    "data": {"resultType": "matrix", "result": [{"metric": {"job": "a"}, "values": [[60, "1"]]}]},
}


class Store:
    """A hostile store on its own loop in a thread; ``requests`` records (mode, method,
    headers, form) of every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], dict[str, list[str]]]] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        mode = request.match_info["mode"]
        form = parse_qs((await request.read()).decode(), keep_blank_values=True)
        self.requests.append((mode, request.method, dict(request.headers), form))
        if mode == "redirect":
            target = f"http://user:{SECRET}@127.0.0.2:1/ok/api/v1/query_range?token={SECRET}"
            raise web.HTTPFound(target)
        if mode == "deep":
            return web.Response(body=b"[" * 200_000, content_type="application/json")
        if mode == "big":  # chunked: no Content-Length to refuse it by
            response = web.StreamResponse()
            await response.prepare(request)
            try:
                for _ in range(64):
                    await response.write(b" " * 4096)
                await response.write_eof()
            except ConnectionResetError:  # compare hung up at its cap, as it should
                pass
            return response
        if mode == "declared":  # Content-Length over the limit: refused before reading
            return web.Response(body=b" " * 300_000, content_type="application/json")
        return web.json_response(OK)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("*", "/{mode}/api/v1/query_range", self._handle)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    def __enter__(self) -> Store:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with Store() as running:
        yield running


def compare(
    tmp_path: Path, store: Store, capsys: pytest.CaptureFixture[str], sh: str, ws: str, *args: str
) -> tuple[int, dict[str, Any], str]:
    config = tmp_path / "rwrouter.yaml"
    config.write_text(
        f"""
remote_write:
  - name: workspace
    url: {store.url}/workspaces/ws-1/api/v1/remote_write
    sigv4: {{region: us-east-1, access_key: AKIDTEST, secret_key: test-secret}}
  - name: self-hosted
    url: {store.url}/api/v1/write
"""
    )
    code = main(
        [
            "compare",
            "--config",
            str(config),
            "--self-hosted",
            f"{store.url}/{sh}",
            "--workspace",
            f"{store.url}/{ws}",
            "--end",
            "1000.5",
            "--range",
            "5m",
            "--step",
            "7s",
            "--repeat",
            "1",
            "--json",
            *args,
        ]
    )
    out, err = capsys.readouterr()
    return code, json.loads(out), err


@pytest.mark.parametrize(
    ("workspace", "args", "error"),
    [
        pytest.param(
            "redirect",
            (),
            "HTTP 302: redirected to 127.0.0.2:1 (redirects are not followed",
            id="redirect_not_followed",
        ),
        pytest.param(
            "deep",
            (),
            "HTTP 200: not a range query result: JSON nested too deep to parse",
            id="nested_200k_deep",
        ),
        pytest.param(
            "big",
            ("--max-answer-bytes", "128KiB"),
            "answer over 131,072 bytes: narrow the query or --range",
            id="answer_over_the_cap_chunked",
        ),
        pytest.param(
            "declared",
            ("--max-answer-bytes", "128KiB"),
            "answer over 131,072 bytes",
            id="answer_declared_over_the_cap",
        ),
    ],
)
def test_a_hostile_answer_fails_only_its_run(
    tmp_path: Path,
    store: Store,
    capsys: pytest.CaptureFixture[str],
    workspace: str,
    args: tuple[str, ...],
    error: str,
) -> None:
    before = len(store.requests)
    code, report, err = compare(tmp_path, store, capsys, "ok", workspace, "--query", "up", *args)
    (result,) = report["queries"]
    assert (code, report["exit_code"], result["status"]) == (3, 3, "not compared"), err
    assert result["self_hosted"]["answered"] == 1
    assert result["workspace"]["error"].startswith(error)
    assert SECRET not in json.dumps(report) and "Traceback" not in err
    # the redirect's target (127.0.0.2:1) is never asked: only one request per store
    assert sorted(m for m, *_ in store.requests[before:]) == sorted(["ok", workspace])


def test_queries_are_posted_as_forms_with_exact_aligned_times(
    tmp_path: Path, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    long_query = 'count(up{job=~"' + "|".join(f"job-{i:05d}" for i in range(2500)) + '"})'
    assert len(long_query) > 24_000  # a GET of it gets 400 (URL too long) from Prometheus
    before = len(store.requests)
    code, report, err = compare(tmp_path, store, capsys, "ok", "ok", "--query", long_query)
    assert (code, report["queries"][0]["status"]) == (0, "parity"), err
    sent = store.requests[before:]
    assert len(sent) == 2
    for _, method, headers, form in sent:
        assert method == "POST"
        assert headers["Content-Type"] == "application/x-www-form-urlencoded"
        # 1000.5 rounded down to a multiple of 7 s; start 5 m before, rounded down too
        assert form == {"query": [long_query], "start": ["693"], "end": ["994"], "step": ["7"]}
    signed = next(h for _, _, h, f in sent if "Authorization" in h)["Authorization"]
    assert "content-type" in signed.split("SignedHeaders=")[1]
