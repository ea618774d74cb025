"""``rwrouter reload --url`` and ``rwrouter audit --url`` follow no redirect: they send the
credential of ``--http.config.file`` (the admin's, for a reload), which must reach the router
and nothing else. A local server answers 3xx towards a second one that records what it gets:
nothing must reach it, and the command says where it was sent, exit 1. Both servers on
127.0.0.1; the command runs in process, in a thread."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from rwrouter.cli import main

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("restore_logging")]

CLIENT_CONFIG = "basic_auth: {username: admin, password: s3cret-pw}\n"


@contextlib.asynccontextmanager
async def _serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def elsewhere() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A server that records the headers of every request it gets and answers 200 (what a
    reload or an audit would take for success)."""
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"destinations": {}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    async with _serve(app) as url:
        yield url, seen


CASES = [
    pytest.param("reload", 302, id="reload_302"),
    pytest.param("reload", 307, id="reload_307"),
    pytest.param("reload", 308, id="reload_308"),
    pytest.param("audit", 302, id="audit_302"),
    pytest.param("audit", 301, id="audit_301"),
]


@pytest.mark.parametrize(("command", "status"), CASES)
async def test_a_redirect_is_not_followed_and_the_credential_stays(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    elsewhere: tuple[str, list[dict[str, str]]],
    command: str,
    status: int,
) -> None:
    target, seen = elsewhere
    hits: list[str] = []

    async def redirect(request: web.Request) -> web.Response:
        hits.append(request.headers.get("Authorization", ""))
        return web.Response(status=status, headers={"Location": f"{target}{request.path_qs}"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    (tmp_path / "client.yml").write_text(CLIENT_CONFIG)
    async with _serve(app) as router:
        args = [command, "--url", router, "--http.config.file", str(tmp_path / "client.yml")]
        code = await asyncio.to_thread(main, args)
    out, err = capsys.readouterr()
    assert hits and hits[0].startswith("Basic ")  # the router itself got the credential
    assert seen == []  # nothing reached the other server
    assert code == 1, out + err
    port = target.rsplit(":", 1)[1]
    assert err.strip().endswith(f"redirected to 127.0.0.1:{port} (not followed)"), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
