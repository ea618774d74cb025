"""``rwrouter compare``'s client against a store that answers 200 with what is not a range
query result: each answer fails that run (an Outcome with a one-line error, no series), never
the command. An aiohttp server on 127.0.0.1 serves the hostile bodies, as raw text."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from rwrouter.auth.schemes import HeaderAuth, NoAuth
from rwrouter.compare.client import Store, query_form, run_once, run_query
from rwrouter.compare.parity import Matrix
from rwrouter.compare.targets import Window

pytestmark = pytest.mark.timeout(20)


def matrix(result: str) -> str:
    return '{"status":"success","data":{"resultType":"matrix","result":[' + result + "]}}"


HISTOGRAM = '{"count": "1", "sum": "1", "buckets": [[null, "0", "1", "1"]]}'

BODIES = {
    "infinity_timestamp": matrix('{"metric": {}, "values": [[Infinity, "1"]]}'),
    "huge_timestamp": matrix('{"metric": {}, "values": [[1e308, "1"]]}'),
    "null_boundary_rule": matrix('{"metric": {}, "histograms": [[1, ' + HISTOGRAM + "]]}"),
    "duplicate_timestamp": matrix('{"metric": {}, "values": [[1, "1"], [1, "5"]]}'),
    "deep_nesting": "[" * 200_000 + "]" * 200_000,
    "ok": matrix('{"metric": {"__name__": "up"}, "values": [[1, "1"]]}'),
    "surrogate_label": matrix(r'{"metric": {"__name__": "up", "job": "\ud800x"}, "values": []}'),
    "surrogate_error": r'{"status": "error", "errorType": "x", "error": "\ud800 boom"}',
}


@pytest.fixture
async def hostile() -> AsyncIterator[str]:
    calls: dict[str, int] = {}

    async def answer(request: web.Request) -> web.Response:
        mode = request.match_info["mode"]
        if mode == "echo_json":  # an error that quotes the request's credentials
            error = f"bad credentials: {request.headers.get('Authorization')}"
            return web.json_response({"status": "error", "error": error}, status=400)
        if mode == "echo_cut":  # quoted where the one-line reason is cut (120 characters)
            error = "y" * 90 + f" header {request.headers.get('Authorization')}"
            return web.json_response({"status": "error", "error": error}, status=400)
        if mode == "echo_text":
            text = "".join(f"{k}: {v}\n" for k, v in request.headers.items())
            return web.Response(text=text, status=502)
        if mode == "fails_first":  # 500 to the first request, then an answer
            calls[mode] = calls.get(mode, 0) + 1
            if calls[mode] == 1:
                return web.Response(text="down", status=500)
            mode = "ok"
        body = BODIES[mode]
        return web.Response(text=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/{mode}/api/v1/query_range", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        pytest.param("infinity_timestamp", "a timestamp of values is not finite", id="infinity"),
        pytest.param("huge_timestamp", "a timestamp of values is out of range", id="1e308"),
        pytest.param("null_boundary_rule", "boundary rule is not 0-3: None", id="null_rule"),
        pytest.param("duplicate_timestamp", "two points of one series at the same", id="dup_ts"),
        pytest.param("deep_nesting", "JSON nested too deep", id="deep_nesting"),
        pytest.param("surrogate_label", "is not valid UTF-8", id="lone_surrogate_label"),
        pytest.param("surrogate_error", "x: \\ud800 boom", id="lone_surrogate_error_text"),
    ],
)
async def test_a_malformed_answer_fails_its_run(hostile: str, mode: str, reason: str) -> None:
    store = Store("workspace", f"{hostile}/{mode}", NoAuth(), ssl=None, proxy=None)
    body = query_form("up", Window(0, 60_000, 15_000))
    async with aiohttp.ClientSession() as session:
        outcome, series = await run_once(session, store, body, timeout=10.0)
    assert series is None and outcome.seconds is None and not outcome.timed_out
    assert outcome.error is not None and outcome.error.startswith("HTTP 200: ")
    assert reason in outcome.error and "\n" not in outcome.error


BEARER = "s3cr3t-token-value-0123456789"


@pytest.mark.parametrize(
    ("mode", "status"),
    [
        pytest.param("echo_json", 400, id="json_error_quotes_the_header"),
        pytest.param("echo_text", 502, id="text_echoes_every_header"),
        pytest.param("echo_cut", 400, id="secret_across_the_cut"),
    ],
)
async def test_a_store_that_echoes_credentials_gets_them_redacted(
    hostile: str, mode: str, status: int
) -> None:
    auth = HeaderAuth(scheme="Bearer", secret=BEARER, secret_file=None)
    store = Store("self-hosted", f"{hostile}/{mode}", auth, ssl=None, proxy=None)
    body = query_form("up", Window(0, 60_000, 15_000))
    async with aiohttp.ClientSession() as session:
        outcome, series = await run_once(session, store, body, timeout=10.0)
    assert series is None and outcome.error is not None
    assert outcome.error.startswith(f"HTTP {status}: ") and "<secret>" in outcome.error
    assert BEARER[:6] not in outcome.error, outcome.error


async def test_the_first_answers_are_judged_once_as_soon_as_both_are_in(hostile: str) -> None:
    stores = (
        Store("self-hosted", f"{hostile}/fails_first", NoAuth(), ssl=None, proxy=None),
        Store("workspace", f"{hostile}/ok", NoAuth(), ssl=None, proxy=None),
    )
    judged: list[tuple[int, int]] = []

    def judge(self_hosted: Matrix, workspace: Matrix) -> str:
        judged.append((len(self_hosted), len(workspace)))
        return "judged"

    async with aiohttp.ClientSession() as session:
        outcomes, verdict = await run_query(
            session, stores, "up", Window(0, 60_000, 15_000), judge, repeat=3, timeout=10.0
        )
    assert verdict == "judged" and judged == [(1, 1)]
    assert [o.error is None for o in outcomes["self-hosted"]] == [False, True, True]
    assert len(outcomes["workspace"]) == 3
