"""HA pairs (``ha_dedup``): the election rule (Cortex's HA tracker), the election table shared
by workers, the first series of a request, the application to a routed request, batch groups
in records and batches, and the workspace double's own tracker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rwrouter.config import parse_config
from rwrouter.doubles.workspace_store import Limits, WorkspaceStore
from rwrouter.metrics import Metrics
from rwrouter.pipeline.ha import ElectionTable, apply_ha, ha_state
from rwrouter.queue.records import FLAG_GROUP, check_record, decode_record, encode_share
from rwrouter.reasons import DropReason
from rwrouter.routing import build_router
from rwrouter.routing.ha import Leader, Verdict, elect, group_of, ha_labels, share_group
from rwrouter.send.batching import Chunk, Owner, ShardBuffer
from rwrouter.wire import decompress
from rwrouter.wire.first import first_series_labels, frame_labels
from rwrouter.wire.index import INDEX
from tests.support.rw2 import symbolize
from tests.support.series import Series, encode, write_request

T = 30.0  # failover_timeout, seconds


# -- the rule ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("leader", "replica", "now", "verdict", "after"),
    [
        pytest.param(None, "a", 5.0, Verdict.ELECTED, Leader("a", 5.0, 5.0), id="first-elected"),
        pytest.param(
            Leader("a", 5.0, 1.0), "a", 9.0, Verdict.LEADER, Leader("a", 9.0, 1.0), id="leader-seen"
        ),
        pytest.param(
            Leader("a", 5.0, 1.0),
            "b",
            35.0,
            Verdict.REPLICA,
            Leader("a", 5.0, 1.0),
            id="follower-dropped-at-the-timeout",
        ),
        pytest.param(
            Leader("a", 5.0, 1.0),
            "b",
            35.001,
            Verdict.ELECTED,
            Leader("b", 35.001, 35.001),
            id="failover-after-the-timeout",
        ),
        pytest.param(
            Leader("a", 9.0, 1.0),
            "a",
            8.0,
            Verdict.LEADER,
            Leader("a", 9.0, 1.0),
            id="leader-late-request-keeps-newest",
        ),
        pytest.param(
            Leader("a", 5.0, 1.0),
            "a",
            100.0,
            Verdict.LEADER,
            Leader("a", 100.0, 1.0),
            id="silent-leader-returns-before-anyone-else",
        ),
    ],
)
def test_elect(
    leader: Leader | None, replica: str, now: float, verdict: Verdict, after: Leader
) -> None:
    assert elect(leader, replica=replica, now=now, failover_timeout=T) == (verdict, after)
    assert verdict.taken == (verdict is not Verdict.REPLICA)


@pytest.mark.parametrize(
    ("labels", "pair"),
    [
        pytest.param({"cluster": "c", "__replica__": "r"}, ("c", "r"), id="both"),
        pytest.param({"cluster": "c"}, None, id="no-replica"),
        pytest.param({"__replica__": "r"}, None, id="no-cluster"),
        pytest.param({"cluster": "", "__replica__": "r"}, None, id="empty-cluster"),
        pytest.param({}, None, id="none"),
    ],
)
def test_ha_labels(labels: dict[str, str], pair: tuple[str, str] | None) -> None:
    assert ha_labels(labels, cluster_label="cluster", replica_label="__replica__") == pair


# -- the table ---------------------------------------------------------------------------------
# (replica, now, verdict): one request each, in order, for one destination and cluster.
SEQUENCES = {
    "pair-steady": [("a", 0, "elected"), ("b", 0.5, "replica"), ("a", 1, "leader")],
    "failover-and-back": [
        ("a", 0, "elected"),
        ("b", 20, "replica"),
        ("b", 30.5, "elected"),  # a silent since 0
        ("a", 31, "replica"),
        ("a", 61, "elected"),  # b silent since 30.5
    ],
    "leader-keeps-itself-alive": [("a", 0, "elected"), ("a", 29, "leader"), ("b", 58, "replica")],
}


@pytest.mark.parametrize("steps", SEQUENCES.values(), ids=list(SEQUENCES))
def test_table_sequences(steps: list[tuple[str, float, str]]) -> None:
    table = ElectionTable(slots=8)
    got = [
        table.decide(
            destination="ws", cluster="c", replica=r, now=now, failover_timeout=T
        ).verdict.value
        for r, now, _ in steps
    ]
    assert got == [verdict for _, _, verdict in steps]


def test_table_failover_names_the_previous_replica() -> None:
    table = ElectionTable(slots=8)
    table.decide(destination="ws", cluster="c", replica="prom-0", now=0, failover_timeout=T)
    decision = table.decide(
        destination="ws", cluster="c", replica="prom-1", now=40, failover_timeout=T
    )
    assert (decision.verdict, decision.previous, decision.silent) == (
        Verdict.ELECTED,
        "prom-0",
        40,
    )


def test_table_keys_are_per_destination_and_cluster() -> None:
    table = ElectionTable(slots=8)
    decide = table.decide
    assert decide(destination="ws", cluster="c1", replica="a", now=0, failover_timeout=T).verdict
    for destination, cluster in (("ws", "c2"), ("other", "c1")):
        decision = decide(
            destination=destination, cluster=cluster, replica="b", now=1, failover_timeout=T
        )
        assert decision.verdict is Verdict.ELECTED


def test_table_file_is_one_election_for_every_worker(tmp_path: Path) -> None:
    """Two tables on one file (two workers' maps) see each other's elections."""
    path = str(tmp_path / "ha")
    one, two = ElectionTable(path, slots=16), ElectionTable(path, slots=16)
    try:
        first = one.decide(destination="ws", cluster="c", replica="a", now=0, failover_timeout=T)
        second = two.decide(destination="ws", cluster="c", replica="b", now=1, failover_timeout=T)
        third = two.decide(destination="ws", cluster="c", replica="a", now=2, failover_timeout=T)
        late = one.decide(destination="ws", cluster="c", replica="b", now=31, failover_timeout=T)
        assert [d.verdict for d in (first, second, third, late)] == [
            Verdict.ELECTED,
            Verdict.REPLICA,
            Verdict.LEADER,  # a seen at 2 through the other worker: b is still dropped
            Verdict.REPLICA,
        ]
    finally:
        one.close()
        two.close()


def test_full_table_reuses_stale_slots_else_takes_without_election() -> None:
    table = ElectionTable(slots=2)
    for cluster in ("c1", "c2"):
        table.decide(destination="ws", cluster=cluster, replica="a", now=0, failover_timeout=T)
    full = table.decide(destination="ws", cluster="c3", replica="a", now=1, failover_timeout=T)
    assert (full.verdict, full.full) == (Verdict.UNLABELED, True)
    reused = table.decide(destination="ws", cluster="c3", replica="a", now=31, failover_timeout=T)
    assert (reused.verdict, reused.full) == (Verdict.ELECTED, False)


LEADERS = {
    "one": ([("ws", "c", "a", 0.0)], [("ws", "c", "a", 10.0)]),
    "failover-names-the-new-one": (
        [("ws", "c", "a", -30.0), ("ws", "c", "b", 1.0)],
        [("ws", "c", "b", 9.0)],
    ),
    "replica-dropped-changes-nothing": (
        [("ws", "c", "a", 0.0), ("ws", "c", "b", 5.0)],
        [("ws", "c", "a", 10.0)],
    ),
    "per-destination-and-cluster": (
        [("ws", "c1", "a", 0.0), ("ws", "c2", "b", 2.0), ("other", "c1", "b", 4.0)],
        [("other", "c1", "b", 6.0), ("ws", "c1", "a", 10.0), ("ws", "c2", "b", 8.0)],
    ),
    "long-names-cut-at-a-character": (
        [("d" * 70, "é" * 100, "r" * 300, 0.0)],
        [("d" * 64, "é" * 96, "r" * 193, 10.0)],
    ),
}


@pytest.mark.parametrize(("decisions", "listed"), LEADERS.values(), ids=list(LEADERS))
def test_table_leaders_lists_elected_replicas_and_silence(
    decisions: list[tuple[str, str, str, float]], listed: list[tuple[str, str, str, float]]
) -> None:
    table = ElectionTable(slots=64)
    for destination, cluster, replica, now in decisions:
        table.decide(
            destination=destination, cluster=cluster, replica=replica, now=now, failover_timeout=T
        )
    got = sorted((e.destination, e.cluster, e.replica, e.silent) for e in table.leaders(10.0))
    assert got == sorted(listed)


def test_ha_state_is_settings_and_leaders_in_unix_seconds() -> None:
    config = parse_config(
        "remote_write:\n"
        "  - {name: ws, url: http://127.0.0.1:1/w, ha_dedup: {failover_timeout: 5s}}\n"
        "  - {name: plain, url: http://127.0.0.1:1/p}\n",
        env={},
    )
    router = build_router(config)
    table = ElectionTable(slots=8)
    now = time.monotonic()
    table.decide(destination="ws", cluster="c", replica="a", now=now - 2, failover_timeout=5)
    table.decide(destination="gone", cluster="c", replica="a", now=now, failover_timeout=5)
    before = time.time()
    settings, leaders = ha_state(router.routes, table)
    assert settings == {"ws": ("cluster", "__replica__", 5.0)}
    [(destination, cluster, replica, seen)] = leaders
    assert (destination, cluster, replica) == ("ws", "c", "a")
    assert before - 2 - 0.5 < seen <= time.time() - 2


# -- the first series of a request ---------------------------------------------------------------
HA_SERIES = [
    Series((("__name__", "up"), ("cluster", "c"), ("__replica__", "r0")), ((1000, 1.0),)),
    Series((("__name__", "up"), ("cluster", "c"), ("__replica__", "r0"), ("job", "x")), ()),
]


@pytest.mark.parametrize("rw2", [False, True], ids=["rw1", "rw2"])
def test_first_series_labels(rw2: bool) -> None:
    request = write_request(HA_SERIES)
    data = (symbolize(request) if rw2 else request).SerializeToString()
    assert first_series_labels(data, rw2=rw2) == {
        "__name__": "up",
        "__replica__": "r0",
        "cluster": "c",
    }
    assert first_series_labels(b"", rw2=rw2) == {}


# -- a routed request ----------------------------------------------------------------------------
CONFIG = """
remote_write:
  - name: ws
    url: http://127.0.0.1:1/api/v1/write
    ha_dedup: {failover_timeout: 30s}
  - name: all
    url: http://127.0.0.1:2/api/v1/write
"""


def _request(replica: str) -> bytes:
    series = [
        Series(
            (("__name__", "up"), ("cluster", "c"), ("__replica__", replica), ("i", str(i))),
            ((1000, 1.0),),
        )
        for i in range(3)
    ]
    return decompress(encode(write_request(series)), max_decoded_bytes=1 << 20)


@pytest.mark.parametrize(
    ("replicas", "ws_samples", "dropped"),
    [
        pytest.param(["r0"], [3], 0, id="leader-taken"),
        pytest.param(["r0", "r1"], [3, 0], 3, id="follower-dropped"),
        pytest.param(["r0", "r1", "r0"], [3, 0, 3], 3, id="leader-again"),
    ],
)
def test_apply_ha(replicas: list[str], ws_samples: list[int], dropped: int) -> None:
    router = build_router(parse_config(CONFIG, env={}))
    table, got, drops = ElectionTable(slots=8), [], 0
    table.metrics = Metrics().send
    for t, replica in enumerate(replicas):
        routed = router.route(_request(replica))
        apply_ha(routed, _request(replica), rw2=False, routes=router.routes, table=table, now=t)
        ws, everything = routed.shares
        got.append(ws.samples)
        drops += routed.dropped.get((0, DropReason.HA_REPLICA), 0)
        assert everything.samples == 3  # a destination without ha_dedup takes both replicas
        if ws.series:  # the replica label is gone; the cluster label stays
            labels = frame_labels(ws.body[: INDEX.unpack_from(ws.index)[0]])
            assert "__replica__" not in labels and labels["cluster"] == "c"
            assert share_group(ws) == 0
        assert share_group(everything) == group_of({"cluster": "c", "__replica__": replica})
    assert (got, drops) == (ws_samples, dropped)
    changes = table.metrics.ha_leader_changes.labels("ws", "c")._value.get()
    assert changes == 1


# -- batch groups ----------------------------------------------------------------------------------
def test_group_of() -> None:
    a = group_of({"cluster": "c", "__replica__": "a"})
    b = group_of({"cluster": "c", "__replica__": "b"})
    assert a and b and a != b
    assert group_of({"cluster": "c"}) == 0


@pytest.mark.parametrize("group", [0, 1, 2**64 - 1], ids=["none", "one", "largest"])
def test_record_keeps_its_group(group: int) -> None:
    routed = build_router(parse_config(CONFIG, env={})).route(_request("r0"))
    share = encode_share(routed.shares[1], received_ms=1, max_body_bytes=1 << 20, group=group)
    (record,) = share.records
    header, rest = record[:8], record[8:]
    assert check_record(header, rest)
    decoded = decode_record(rest)
    assert decoded.group == group
    assert bool(decoded.flags & FLAG_GROUP) == bool(group)
    assert decoded.body == routed.shares[1].body


@pytest.mark.parametrize(
    ("groups", "batches"),
    [
        pytest.param([0, 0, 0], [3], id="no-groups-combine"),
        pytest.param([7, 7, 9, 9], [2, 2], id="two-replicas-never-mix"),
        pytest.param([7, 9, 7], [1, 1, 1], id="alternating"),
    ],
)
def test_batches_never_mix_groups(groups: list[int], batches: list[int]) -> None:
    buf = ShardBuffer()
    for group in groups:
        owner = Owner(series=1, samples=1, group=group)
        buf.add(Chunk(b"x", INDEX.pack(1, 1, 0), 1, 1, owner), now=0)
    taken = []
    while buf.chunks:
        batch = buf.take(max_samples=100, max_bytes=1000)
        assert len({chunk.owner.group for chunk in batch.chunks}) == 1
        taken.append(len(batch.chunks))
    assert taken == batches


# -- the workspace double's tracker --------------------------------------------------------------
def test_double_dedups_by_the_first_series() -> None:
    limits = Limits(ha_dedup=True, ha_failover_timeout_s=T)
    store = WorkspaceStore(limits=limits, now_s=0)
    answers = []
    for replica, now in (("r0", 1), ("r1", 2), ("r0", 3), ("r1", 34)):
        series = [
            Series(
                (("__name__", "up"), ("cluster", "c"), ("__replica__", replica)),
                ((int(now * 1000), 1.0),),
            )
        ]
        answers.append(store.ingest(write_request(series), now_s=now).status)
    assert answers == [200, 202, 200, 200]  # r1 taken once r0 was silent for 30 s
    (stored,) = store.series.values()
    assert dict(stored.labels) == {"__name__": "up", "cluster": "c"}
    assert sorted(stored.samples) == [1000, 3000, 34000]
