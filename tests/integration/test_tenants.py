"""Tenants through a running router (in-process ``RouterServer`` with a web configuration
file, aiohttp clients, the capture server as both destinations): each credential's tenant
routes its series by a ``__tenant__`` rule, a credential with ``tenant_from_header`` takes the
sender's X-Scope-OrgID (an invalid one is a 400 and nothing is kept), another's header is
ignored, and ``__tenant__`` never reaches a destination."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from rwrouter.config import load_config
from rwrouter.server.frontdoor import DoorOptions
from rwrouter.server.runner import RouterServer
from tests.integration.conftest import eventually, metric_value, started_routers
from tests.support.capture import CaptureServer
from tests.support.series import HEADERS, Series, build_body

pytestmark = pytest.mark.timeout(60)

TOKENS = {"writer-a": "token-a-0123456789", "writer-b": "token-b-0123456789"}
TOKENS |= {"writer-h": "token-h-0123456789", "writer-n": "token-n-0123456789"}
WEB = """
bearer_tokens:
  - {name: writer-a, token_file: writer-a.token}
  - {name: writer-b, token_file: writer-b.token}
  - {name: writer-h, token_file: writer-h.token}
  - {name: writer-n, token_file: writer-n.token}
access:
  writer-a: {roles: [write], tenant: team-a}
  writer-b: {roles: [write], tenant: team-b}
  writer-h: {roles: [write], tenant_from_header: true}
  writer-n: {roles: [write]}
"""
# a: team-a's series; b: team-b's and team-h's, with the tenant copied into a label.
RULES_A = "[{source_labels: [__tenant__], regex: team-a, action: keep}]"
RULES_B = (
    "[{source_labels: [__tenant__], regex: team-b|team-h, action: keep},"
    " {source_labels: [__tenant__], target_label: tenant}]"
)
SERIES = (("__name__", "m"), ("i", "0"))
OWN = (("__name__", "m"), ("__tenant__", "team-b"), ("i", "0"))  # a label claiming a tenant

Start = Callable[[], Awaitable[RouterServer]]


@pytest.fixture
async def start(tmp_path: Path, fresh_capture: CaptureServer) -> AsyncIterator[Start]:
    for name, token in TOKENS.items():
        (tmp_path / f"{name}.token").write_text(token + "\n")
    (tmp_path / "web.yml").write_text(WEB)
    config = tmp_path / "rwrouter.yaml"
    fast = "queue_config: {batch_send_deadline: 5ms}"
    config.write_text(
        f"server: {{listen_address: '127.0.0.1:0'}}\nstorage: {{path: {tmp_path / 'q'}}}\n"
        "remote_write:\n"
        f"  - {{name: a, url: '{fresh_capture.url('/a')}', {fast},"
        f" write_relabel_configs: {RULES_A}}}\n"
        f"  - {{name: b, url: '{fresh_capture.url('/b')}', {fast},"
        f" write_relabel_configs: {RULES_B}}}\n"
    )

    door = DoorOptions(web_config_file=str(tmp_path / "web.yml"), enable_lifecycle=False)

    def make(_arg: None, _n: int) -> RouterServer:
        return RouterServer(load_config(config), config_path=str(config), door=door)

    async with started_routers(make, drain_timeout=1) as started:
        yield functools.partial(started, None)


WITH_TENANT = (("__name__", "m"), ("i", "0"), ("tenant", "team-b"))
# id, credential, X-Scope-OrgID, series sent, status, label sets at a, label sets at b
CASES = [
    ("credential_tenant_a", "writer-a", None, SERIES, 204, [SERIES], []),
    ("credential_tenant_b", "writer-b", None, SERIES, 204, [], [WITH_TENANT]),
    ("credential_tenant_wins_over_header", "writer-a", "team-b", SERIES, 204, [SERIES], []),
    ("own_label_cannot_claim_a_tenant", "writer-a", None, OWN, 204, [SERIES], []),
    (
        "header_tenant",
        "writer-h",
        "team-h",
        SERIES,
        204,
        [],
        [(("__name__", "m"), ("i", "0"), ("tenant", "team-h"))],
    ),
    ("header_tenant_a", "writer-h", "team-a", SERIES, 204, [SERIES], []),
    ("header_absent_no_tenant", "writer-h", None, SERIES, 204, [], []),
    ("header_not_allowed_ignored", "writer-n", "team-a", SERIES, 204, [], []),
    ("header_invalid", "writer-h", "../team-a", SERIES, 400, [], []),
]


def arrived(capture: CaptureServer, path: str) -> bool:
    return capture.sample_count(path) == 1


@pytest.mark.parametrize(
    ("credential", "org_id", "series", "status", "at_a", "at_b"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
async def test_tenants_route_by_credential_and_header(
    start: Start,
    http: aiohttp.ClientSession,
    fresh_capture: CaptureServer,
    credential: str,
    org_id: str | None,
    series: tuple[tuple[str, str], ...],
    status: int,
    at_a: list[tuple[tuple[str, str], ...]],
    at_b: list[tuple[tuple[str, str], ...]],
) -> None:
    router = await start()
    headers = {**HEADERS, "Authorization": f"Bearer {TOKENS[credential]}"}
    if org_id is not None:
        headers["X-Scope-OrgID"] = org_id
    body = build_body([Series(series, ((1_000, 1.0),))])
    async with http.post(router.url + "/api/v1/write", data=body, headers=headers) as resp:
        text = await resp.text()
        assert resp.status == status, text
    if status == 400:
        assert text.count("\n") == 1 and text.startswith("X-Scope-OrgID: ")
        assert metric_value(router, "rwrouter_refused_requests_total", reason="tenant") == 1
        assert metric_value(router, "rwrouter_received_samples_total") == 0  # nothing kept
        return
    for path, want in (("/a", at_a), ("/b", at_b)):
        if want:
            await eventually(functools.partial(arrived, fresh_capture, path))
        else:
            dropped = metric_value(
                router, "rwrouter_samples_dropped_total", destination=path[1:], reason="relabel"
            )
            assert dropped == 1, path
    await router.stop(drain_timeout=1)  # everything queued is sent: nothing more arrives
    assert fresh_capture.label_sets("/a") == at_a
    assert fresh_capture.label_sets("/b") == at_b


async def test_two_tenants_one_router_each_outcome_its_own(
    start: Start, http: aiohttp.ClientSession, fresh_capture: CaptureServer
) -> None:
    """The same series from two tenants, in turns (cached after the first of each): each
    tenant's series go where its rules say, every time."""
    router = await start()
    body = build_body([Series(SERIES, ((1_000, 1.0),))])
    for _ in range(3):
        for credential in ("writer-a", "writer-b"):
            headers = {**HEADERS, "Authorization": f"Bearer {TOKENS[credential]}"}
            async with http.post(router.url + "/api/v1/write", data=body, headers=headers) as r:
                assert r.status == 204, await r.text()
    await eventually(
        lambda: fresh_capture.sample_count("/a") == 3 and fresh_capture.sample_count("/b") == 3
    )
    assert set(fresh_capture.label_sets("/a")) == {SERIES}
    assert set(fresh_capture.label_sets("/b")) == {WITH_TENANT}
    hits = metric_value(router, "rwrouter_relabel_cache_lookups_total", result="hit")
    assert hits == 4  # 6 lookups, the first of each tenant a miss
