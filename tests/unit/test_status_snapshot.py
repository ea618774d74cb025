"""status_snapshot: the status page's figures read from an exposition (one process's, or the
merged one of --workers, whose per-worker values are combined)."""

from __future__ import annotations

import json

import pytest

from rwrouter.metrics import Metrics, merge_expositions, status_snapshot


def _worker(sent: float, disk: float, age: float, expiry: float | None, drops: float) -> str:
    m = Metrics()
    m.send.sent_samples.labels("ws").inc(sent)
    m.queue.disk_bytes.labels("ws").set(disk)
    m.queue.oldest_age.labels("ws").set(age)
    m.send.dropped_samples.labels("ws", "queue_full").inc(drops)
    m.send.retries.labels("ws", "503").inc(1)
    if expiry is not None:
        m.process.credentials_expiry.sources["ws"] = lambda: expiry
    return m.exposition()[0].decode()


CASES = [
    # id, workers' (sent, disk bytes, oldest age, credential expiry, drops), expected figures
    (
        "one_process",
        [(5, 100, 3.0, 2000.0, 1)],
        {
            "sent_samples_total": 5.0,
            "queue_disk_bytes": 100.0,
            "oldest_unsent_age_seconds": 3.0,
            "credentials_expiry_timestamp_seconds": 2000.0,
            "dropped_samples_total": {"queue_full": 1.0},
            "retries_total": {"503": 1.0},
        },
    ),
    (
        "two_workers_sum_max_min",
        [(5, 100, 3.0, 2000.0, 1), (7, 50, 9.0, 1000.0, 2)],
        {
            "sent_samples_total": 12.0,
            "queue_disk_bytes": 150.0,
            "oldest_unsent_age_seconds": 9.0,
            "credentials_expiry_timestamp_seconds": 1000.0,
            "dropped_samples_total": {"queue_full": 3.0},
            "retries_total": {"503": 2.0},
        },
    ),
    (
        "no_credential_expiry",
        [(0, 0, 0.0, None, 0)],
        {"sent_samples_total": 0.0, "credentials_expiry_timestamp_seconds": None},
    ),
]


@pytest.mark.parametrize(("workers", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_status_snapshot_combines_workers(
    workers: list[tuple[float, float, float, float | None, float]], expected: dict[str, object]
) -> None:
    texts = [_worker(*w) for w in workers]
    if len(texts) == 1:
        text = texts[0]
    else:
        text = merge_expositions(
            {str(i): t for i, t in enumerate(texts)}, workers=len(texts)
        ).decode()
    snapshot = status_snapshot(text)
    assert snapshot["workers"] == len(workers)
    destinations = snapshot["destinations"]
    assert isinstance(destinations, dict)
    ws = destinations["ws"]
    for key, value in expected.items():
        assert ws[key] == value, key
    assert ws["sent_requests_total"] == 0.0 and ws["shards"] is None  # counter 0, gauge unknown


def test_status_snapshot_refuses_text_that_is_not_an_exposition() -> None:
    with pytest.raises(ValueError):
        status_snapshot("this is { not an exposition")


def test_status_snapshot_treats_nan_as_absent_so_the_json_is_valid() -> None:
    """A worker with no lookups yet exposes its hit ratio as NaN (not valid JSON)."""
    busy, idle = Metrics(), Metrics()
    busy.cache.hit_ratio.set(0.5)
    idle.cache.hit_ratio.set(float("nan"))
    text = merge_expositions(
        {"0": busy.exposition()[0].decode(), "1": idle.exposition()[0].decode()}, workers=2
    ).decode()
    snapshot = status_snapshot(text)
    assert snapshot["relabel_cache_hit_ratio"] == 0.5
    json.dumps(snapshot, allow_nan=False)  # raises on NaN
    alone = status_snapshot("rwrouter_relabel_cache_hit_ratio NaN\n")
    assert alone["relabel_cache_hit_ratio"] is None


def test_status_snapshot_top_names_are_the_mean_share_over_workers() -> None:
    one, two = Metrics(), Metrics()
    one.audit.name_shares.source = lambda: {"ws": [("a", 0.75), ("b", 0.25)]}
    two.audit.name_shares.source = lambda: {"ws": [("a", 0.25), ("c", 0.75)]}
    text = merge_expositions(
        {"0": one.exposition()[0].decode(), "1": two.exposition()[0].decode()}, workers=2
    ).decode()
    destinations = status_snapshot(text)["destinations"]
    assert isinstance(destinations, dict)
    assert destinations["ws"]["top_names"] == [("a", 0.5), ("c", 0.375), ("b", 0.125)]


def _ha_worker(leaders: list[tuple[str, str, str, float]], elections: dict[str, int]) -> str:
    m = Metrics()
    settings = {"ws": ("cluster", "__replica__", 30.0)}
    m.send.ha.source = lambda: (settings, leaders)
    for cluster, count in elections.items():
        m.send.ha_leader_changes.labels("ws", cluster).inc(count)
    return m.exposition()[0].decode()


HA_CASES = [
    pytest.param(
        [([("ws", "c1", "a", 1000.0)], {"c1": 1})],
        [{"cluster": "c1", "replica": "a", "last_seen": 1000.0, "elections_total": 1.0}],
        id="one_process",
    ),
    pytest.param(
        [
            ([("ws", "c1", "a", 1000.0), ("ws", "c2", "x", 990.0)], {"c1": 1}),
            ([("ws", "c1", "b", 1003.0), ("ws", "c2", "x", 990.5)], {"c1": 1, "c2": 1}),
        ],
        [
            {"cluster": "c1", "replica": "b", "last_seen": 1003.0, "elections_total": 2.0},
            {"cluster": "c2", "replica": "x", "last_seen": 990.5, "elections_total": 1.0},
        ],
        id="workers_latest_leader_elections_summed",
    ),
    pytest.param(
        [([], {"gone": 3})],
        [{"cluster": "gone", "replica": None, "last_seen": None, "elections_total": 3.0}],
        id="cluster_no_longer_in_the_table",
    ),
]


@pytest.mark.parametrize(("workers", "clusters"), HA_CASES)
def test_status_snapshot_ha_dedup(
    workers: list[tuple[list[tuple[str, str, str, float]], dict[str, int]]],
    clusters: list[dict[str, object]],
) -> None:
    parts = {str(i): _ha_worker(*w) for i, w in enumerate(workers)}
    text = merge_expositions(parts, workers=len(parts)).decode()
    destinations = status_snapshot(text)["destinations"]
    assert isinstance(destinations, dict)
    assert destinations["ws"]["ha_dedup"] == {
        "cluster_label": "cluster",
        "replica_label": "__replica__",
        "failover_timeout": 30.0,
        "clusters": clusters,
    }
    json.dumps(destinations, allow_nan=False)


def test_status_snapshot_without_ha_dedup_has_none() -> None:
    m = Metrics()
    m.send.sent_samples.labels("ws").inc(1)
    destinations = status_snapshot(m.exposition()[0].decode())["destinations"]
    assert isinstance(destinations, dict)
    assert destinations["ws"]["ha_dedup"] is None


def test_kept_out_by_rules_is_not_a_loss_and_unsent_is_not_disk_use() -> None:
    """``relabel`` and ``filtered`` drops are routing decisions: /-/status lists them as kept
    out, apart from the losses; what is unsent comes from its own gauges, not from the disk
    use (which counts whole segment files, sent records included)."""
    m = Metrics()
    for reason, n in (("relabel", 40), ("filtered", 2), ("queue_full", 3), ("4xx", 1)):
        m.send.dropped_samples.labels("ws", reason).inc(n)
    m.queue.disk_bytes.labels("ws").set(4096)
    m.queue.unsent_samples.labels("ws").set(0)
    m.queue.blocks.labels("ws").set(0)
    snapshot = status_snapshot(m.exposition()[0].decode())
    destinations = snapshot["destinations"]
    assert isinstance(destinations, dict)
    ws = destinations["ws"]
    assert ws["kept_out_samples_total"] == {"relabel": 40.0, "filtered": 2.0}
    assert ws["dropped_samples_total"] == {"queue_full": 3.0, "4xx": 1.0}
    assert (ws["unsent_samples"], ws["unsent_records"], ws["queue_disk_bytes"]) == (0, 0, 4096)
