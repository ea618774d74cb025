"""A destination's ``tenant_header`` (X-Scope-OrgID per request from the tenant), piece by piece:
the config key, the tenant stored in queue records, batches that never mix tenants, the header
on every attempt, metadata batched per tenant, and the tenant kept by the dead-letter store."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rwrouter.auth.schemes import NoAuth
from rwrouter.config import describe_config, parse_config
from rwrouter.deadletter.entry import MAGIC
from rwrouter.deadletter.store import DeadLetterStore
from rwrouter.errors import ConfigError, DecodeError
from rwrouter.metrics import Metrics
from rwrouter.queue.records import (
    FLAG_TENANT,
    HEADER,
    META_SIZE,
    check_record,
    decode_record,
    encode_share,
)
from rwrouter.reasons import DropReason
from rwrouter.send.attempts import Attempts
from rwrouter.send.batching import Chunk, Owner, ShardBuffer
from rwrouter.send.delivery import Deliverer
from rwrouter.send.metadata import MetadataQueue
from rwrouter.send.refusals import Item, Kind, Refusal
from rwrouter.wire import compress
from tests.support.frames import pack_frames
from tests.unit.test_delivery import FAST, WALL, Clock, FakeTransport, item, script

META = struct.Struct("<BBHqIII")

# ---------------------------------------------------------------------------------------------
# the config key

BASE = "remote_write:\n  - url: http://mimir:9009/api/v1/push\n"
SIGV4 = "    sigv4: {region: us-east-1}\n"
# id, extra destination keys, tenant_header or the error
CONFIG_CASES = [
    ("absent", "", None),
    ("x_scope_orgid", "    tenant_header: X-Scope-OrgID\n", "X-Scope-OrgID"),
    ("thanos", "    tenant_header: THANOS-TENANT\n", "THANOS-TENANT"),
    (
        "with_a_default_in_headers",
        "    tenant_header: X-Scope-OrgID\n    headers: {X-Scope-OrgID: anonymous}\n",
        "X-Scope-OrgID",
    ),
    ("not_a_token", "    tenant_header: 'X Scope'\n", "remote_write[0].tenant_header: expected a"),
    ("not_a_string", "    tenant_header: 7\n", "remote_write[0].tenant_header: expected a string"),
    ("reserved", "    tenant_header: Content-Type\n", "remote_write[0].tenant_header: reserved"),
    ("authorization", "    tenant_header: authorization\n", "tenant_header: reserved"),
    ("amz", "    tenant_header: X-Amz-Date\n", "tenant_header: reserved"),
    ("sigv4", "    tenant_header: X-Scope-OrgID\n" + SIGV4, "must not be set on a sigv4"),
]


@pytest.mark.parametrize(
    ("extra", "want"), [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES]
)
def test_tenant_header_key(extra: str, want: str | None) -> None:
    text = BASE + extra
    if want is None or not want.startswith(("remote_write", "tenant_header", "must")):
        assert parse_config(text, env={}).remote_write[0].tenant_header == want
        return
    with pytest.raises(ConfigError) as exc:
        parse_config(text, env={})
    assert want in str(exc.value)


def test_check_config_shows_the_tenant_header_and_max_tenants() -> None:
    text = "relabel_cache: {max_tenants: 4}\n" + BASE + "    tenant_header: X-Scope-OrgID\n"
    shown = describe_config(parse_config(text, env={}))
    assert "  tenant_header: X-Scope-OrgID (each request's tenant)\n" in shown
    assert " max_tenants=4\n" in shown


# ---------------------------------------------------------------------------------------------
# records: the tenant stored beside the index


def share_of(tenant: str | None, *, limit: int = 1000) -> list[bytes]:
    frames = [b"\x0a\x01a" * 5, b"\x0a\x01b" * 5, b"\x0a\x01c" * 5]
    share = encode_share(
        pack_frames(frames, [b"a", b"b", b"c"], [1, 2, 3]),
        received_ms=7,
        max_body_bytes=limit,
        tenant=tenant,
    )
    return share.records


@pytest.mark.parametrize("lazy", [False, True], ids=["decompressed", "lazy"])
@pytest.mark.parametrize("limit", [1000, 15], ids=["one_record", "one_record_per_frame"])
@pytest.mark.parametrize("tenant", [None, "team-a", "x" * 150], ids=["none", "short", "longest"])
def test_records_keep_their_tenant(tenant: str | None, limit: int, lazy: bool) -> None:
    records = share_of(tenant, limit=limit)
    assert len(records) == (1 if limit == 1000 else 3)
    for record in records:
        header, rest = record[: HEADER.size], record[HEADER.size :]
        assert check_record(header, rest)
        flags = META.unpack_from(rest)[2]
        assert bool(flags & FLAG_TENANT) == (tenant is not None)
        decoded = decode_record(rest, decompress_body=not lazy)
        assert decoded.tenant == tenant
        assert decoded.frames[0].startswith(b"\x0a\x01")


def test_a_record_without_tenant_is_laid_out_as_before_tenants() -> None:
    (record,) = share_of(None)
    rest = record[HEADER.size :]
    assert META.unpack_from(rest)[2] == 0
    assert rest[META_SIZE + 3 * 12 :] == compress(
        b"\x0a\x01a" * 5 + b"\x0a\x01b" * 5 + b"\x0a\x01c" * 5
    )


def _with_tenant_field(field: bytes) -> bytes:
    """A record of one 3-byte frame whose tenant field is ``field`` (FLAG_TENANT set)."""
    index = struct.pack("<III", 3, 1, 0)
    return META.pack(1, 0, FLAG_TENANT, 7, 1, 1, 3) + field + index + compress(b"\x0a\x01z")


# id, tenant field, the error
BAD_TENANT_CASES = [
    ("empty", b"\x00", "tenant is missing"),
    ("missing", b"", "tenant is missing"),
    ("not_ascii", b"\x02\xc3\xa9", "not ASCII"),
    ("runs_past_the_end", b"\xff" + b"a" * 10, "runs past its end"),
]


@pytest.mark.parametrize(
    ("field", "error"), [c[1:] for c in BAD_TENANT_CASES], ids=[c[0] for c in BAD_TENANT_CASES]
)
def test_a_damaged_tenant_field_is_a_decode_error(field: bytes, error: str) -> None:
    # no field at all: the record ends with its fixed part
    rest = _with_tenant_field(field) if field else META.pack(1, 0, FLAG_TENANT, 7, 1, 1, 3)
    with pytest.raises(DecodeError, match=error):
        decode_record(rest)


@pytest.mark.parametrize("tenant", ["é", "x" * 256, ""], ids=["not_ascii", "too_long", "empty"])
def test_a_tenant_that_cannot_be_stored_is_refused(tenant: str) -> None:
    with pytest.raises(ValueError):
        share_of(tenant)


# ---------------------------------------------------------------------------------------------
# batches never mix tenants


def chunk(tenant: str | None, samples: int = 1, *, recovered: bool = False) -> Chunk:
    owner = Owner(series=1, samples=samples, tenant=tenant, recovered=recovered)
    return Chunk(b"\x0a\x01x", struct.pack("<III", 3, samples, 0), samples, 1, owner)


# id, waiting chunks (tenant, recovered), the batches cut (their tenants, chunks each)
TAKE_CASES = [
    ("one_tenant", [("a", False)] * 3, [("a", 3)]),
    (
        "two_tenants_in_turn",
        [("a", False), ("b", False), ("a", False)],
        [("a", 1), ("b", 1), ("a", 1)],
    ),
    ("runs_of_a_tenant", [("a", False), ("a", False), ("b", False)], [("a", 2), ("b", 1)]),
    (
        "tenant_and_none",
        [(None, False), ("a", False), (None, False)],
        [(None, 1), ("a", 1), (None, 1)],
    ),
    ("recovered_apart_too", [("a", True), ("a", False)], [("a", 1), ("a", 1)]),
]


@pytest.mark.parametrize(
    ("waiting", "batches"), [c[1:] for c in TAKE_CASES], ids=[c[0] for c in TAKE_CASES]
)
def test_take_never_mixes_tenants(
    waiting: list[tuple[str | None, bool]], batches: list[tuple[str | None, int]]
) -> None:
    buf = ShardBuffer()
    for tenant, recovered in waiting:
        buf.add(chunk(tenant, recovered=recovered), now=0.0)
    cut = []
    while buf.chunks:
        batch = buf.take(max_samples=100, max_bytes=1 << 20)
        assert len({c.owner.tenant for c in batch.chunks}) == 1
        cut.append((batch.tenant, len(batch.chunks)))
    assert cut == batches


# ---------------------------------------------------------------------------------------------
# the header on every attempt


def deliverer(
    *, headers: dict[str, str], tenant_header: str | None, reply: int = 200
) -> tuple[Deliverer, FakeTransport, list[str | None]]:
    clock = Clock()
    transport = FakeTransport(script(reply, reply, reply), clock, {})
    rejected: list[str | None] = []

    def hook(_items: list[Item], _kind: Kind, _refusal: Refusal, tenant: str | None) -> None:
        rejected.append(tenant)

    attempts = Attempts(
        name="mimir",
        transport=transport,
        auth=NoAuth(),
        policy=FAST,
        headers=headers,
        tenant_header=tenant_header,
        metrics=Metrics(CollectorRegistry()).send,
        clock=clock,
        wall_clock=lambda: WALL,
        rand=lambda: 0.0,
        sleep=clock.sleep,
    )
    d = Deliverer(attempts=attempts, on_rejected=hook)
    return d, transport, rejected


def org_ids(headers: dict[str, str]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers.items() if k.lower() in ("x-scope-orgid", "thanos-tenant")]


# id, configured headers, tenant_header, the batch's tenant, the tenant headers sent
HEADER_CASES = [
    ("tenant_sent", {}, "X-Scope-OrgID", "team-a", [("X-Scope-OrgID", "team-a")]),
    ("no_tenant_nothing_sent", {}, "X-Scope-OrgID", None, []),
    (
        "no_tenant_the_default",
        {"X-Scope-OrgID": "anonymous"},
        "X-Scope-OrgID",
        None,
        [("X-Scope-OrgID", "anonymous")],
    ),
    (
        "the_tenant_replaces_the_default_in_any_case",
        {"x-scope-orgid": "anonymous"},
        "X-Scope-OrgID",
        "team-b",
        [("X-Scope-OrgID", "team-b")],
    ),
    ("another_header_name", {}, "THANOS-TENANT", "team-a", [("THANOS-TENANT", "team-a")]),
    (
        "without_tenant_header_the_tenant_is_not_sent",
        {"X-Scope-OrgID": "fixed"},
        None,
        "team-a",
        [("X-Scope-OrgID", "fixed")],
    ),
]


@pytest.mark.parametrize(
    ("headers", "tenant_header", "tenant", "sent"),
    [c[1:] for c in HEADER_CASES],
    ids=[c[0] for c in HEADER_CASES],
)
async def test_every_attempt_carries_the_batch_tenant(
    headers: dict[str, str],
    tenant_header: str | None,
    tenant: str | None,
    sent: list[tuple[str, str]],
) -> None:
    d, transport, _ = deliverer(headers=headers, tenant_header=tenant_header, reply=503)
    await d.deliver([item(1)], Kind.SAMPLES, tenant=tenant)  # 3 retried attempts, then a 200
    assert len(transport.headers) == 4
    for attempt in transport.headers:
        assert org_ids(attempt) == sent
        assert attempt["Content-Type"] == "application/x-protobuf"  # the protocol's own kept


async def test_a_refused_part_goes_to_the_hook_with_its_tenant() -> None:
    d, _, rejected = deliverer(headers={}, tenant_header="X-Scope-OrgID", reply=400)
    raw = b"".join(frame for frame, _ in [item(1), item(2)])
    await d.deliver_raw(raw, 5, lambda: [item(1), item(2)], tenant="team-a")
    assert rejected == ["team-a", "team-a"]  # split in halves, each refused


# ---------------------------------------------------------------------------------------------
# metadata batched per tenant


class Recorder:
    def __init__(self) -> None:
        self.batches: list[tuple[str | None, list[bytes]]] = []

    async def deliver(
        self, items: list[tuple[bytes, int]], kind: Kind, *, tenant: str | None = None
    ) -> int:
        self.batches.append((tenant, [entry for entry, _ in items]))
        return len(items)


async def test_metadata_batches_hold_one_tenant_each() -> None:
    queue = MetadataQueue(
        name="mimir", batch_size=2, max_bytes=1 << 20, metrics=Metrics(CollectorRegistry()).send
    )
    m = [bytes([0x1A, 1, n]) for n in range(4)]
    queue.add([m[0], m[1], m[2]], "a")
    queue.add([m[0]], "b")  # the same entry for another tenant is queued for it
    queue.add([m[0]], "a")  # the same entry for the same tenant is not (within resend_after)
    queue.add([m[3]], None)
    queue.close()
    recorder = Recorder()
    await queue.run(recorder)  # type: ignore[arg-type]
    assert recorder.batches == [("a", [m[0], m[1]]), ("a", [m[2]]), ("b", [m[0]]), (None, [m[3]])]


# ---------------------------------------------------------------------------------------------
# the dead-letter store keeps the tenant


def test_dead_letters_keep_their_tenant(tmp_path: Path) -> None:
    store = DeadLetterStore(tmp_path / "mimir", max_bytes=1 << 20)
    for tenant in ("team-a", None):
        store.add(
            raw=b"\x0a\x01x",
            kind=Kind.SAMPLES,
            status=400,
            reason=DropReason.CLIENT_ERROR,
            response="bad",
            series=1,
            samples=1,
            tenant=tenant,
        )
    assert [e.tenant for e in store.entries()] == ["team-a", None]
    files = sorted(p.read_bytes() for p in (tmp_path / "mimir").iterdir())
    headers = [json.loads(f[len(MAGIC) : f.index(b"\n", len(MAGIC))]) for f in files]
    assert sorted("tenant" in h for h in headers) == [False, True]  # absent without one


def test_a_dead_letter_of_before_tenants_reads_without_one(tmp_path: Path) -> None:
    body = compress(b"\x0a\x01x")
    header = {
        "at_ms": 1,
        "status": 400,
        "reason": "4xx",
        "response": "",
        "series": 1,
        "samples": 1,
        "kind": "samples",
        "body_bytes": len(body),
        "crc32": zlib.crc32(body),
    }
    (tmp_path / "0000000000001-000000-00000000.rej").write_bytes(
        MAGIC + json.dumps(header).encode() + b"\n" + body
    )
    (entry,) = DeadLetterStore(tmp_path, max_bytes=1 << 20).entries()
    assert entry.tenant is None and entry.series == 1
