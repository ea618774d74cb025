"""Cheap reads (rwrouter.server.reads): the bounded store of answers that expire (time passed
in), single flight, the sliced JSON serialization and the audit answer's cap."""

from __future__ import annotations

import array
import asyncio
import json
from typing import Any

import pytest

from rwrouter.audit import ActiveSeries, NameCount, Snapshot, build_report
from rwrouter.audit.live import Audit
from rwrouter.config import AuditConfig, parse_config
from rwrouter.server.reads import (
    DEFAULT_AUDIT_TOP,
    JSON_SLICE,
    MAX_AUDIT_TOP,
    Answers,
    AuditAnswers,
    AuditQuery,
    Reads,
    StatusAnswers,
    audit_body,
    audit_query,
    json_bytes,
)

# id, ttl, max_entries, steps: ("put", key, taken) or ("get", key, now, expected value or None)
STORE_CASES = [
    ("fresh_until_ttl", 10.0, 4, [("put", "a", 100.0), ("get", "a", 109.9, "a@100.0")]),
    ("expired_at_ttl", 10.0, 4, [("put", "a", 100.0), ("get", "a", 110.0, None)]),
    (
        "expired_is_forgotten",
        10.0,
        4,
        [("put", "a", 100.0), ("get", "a", 111.0, None), ("get", "a", 105.0, None)],
    ),
    ("clock_backwards_is_a_miss", 10.0, 4, [("put", "a", 100.0), ("get", "a", 99.0, None)]),
    ("ttl_0_keeps_nothing", 0.0, 4, [("put", "a", 100.0), ("get", "a", 100.0, None)]),
    (
        "least_recently_used_goes_first",
        10.0,
        2,
        [
            ("put", "a", 100.0),
            ("put", "b", 100.0),
            ("get", "a", 101.0, "a@100.0"),  # a is used: b is now the least recent
            ("put", "c", 101.0),
            ("get", "b", 101.0, None),
            ("get", "a", 101.0, "a@100.0"),
            ("get", "c", 101.0, "c@101.0"),
        ],
    ),
    (
        "put_again_replaces",
        10.0,
        2,
        [("put", "a", 100.0), ("put", "a", 105.0), ("get", "a", 112.0, "a@105.0")],
    ),
]


@pytest.mark.parametrize(
    ("ttl", "max_entries", "steps"),
    [c[1:] for c in STORE_CASES],
    ids=[c[0] for c in STORE_CASES],
)
def test_answers_expire_and_stay_bounded(
    ttl: float, max_entries: int, steps: list[tuple[Any, ...]]
) -> None:
    store: Answers[str, str] = Answers(ttl=ttl, max_entries=max_entries)
    for step in steps:
        if step[0] == "put":
            _, key, taken = step
            store.put(key, f"{key}@{taken}", taken)
        else:
            _, key, now, expected = step
            got = store.get(key, now)
            assert (got[0] if got else None) == expected, step
        assert len(store) <= max_entries


@pytest.mark.parametrize(("ttl", "entries"), [(-1.0, 1), (1.0, 0)], ids=["negative_ttl", "no_room"])
def test_answers_refuse_bad_bounds(ttl: float, entries: int) -> None:
    with pytest.raises(ValueError, match="ttl must be"):
        Answers(ttl=ttl, max_entries=entries)


async def settle() -> None:
    """Let every ready task run (a few event loop turns: no time passes)."""
    for _ in range(5):
        await asyncio.sleep(0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Builder:
    """A build that waits for ``release`` and counts its calls; ``fail``: raises instead."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls = 0
        self.release = asyncio.Event()
        self.fail = False

    async def __call__(self) -> tuple[str, float]:
        self.calls += 1
        taken = self.clock()
        await self.release.wait()
        if self.fail:
            raise RuntimeError("build failed")
        return f"value {self.calls}", taken


async def test_concurrent_readers_share_one_build_then_the_kept_value() -> None:
    clock = Clock()
    reads: Reads[str, str] = Reads(ttl=10.0, clock=clock)
    build = Builder(clock)
    readers = [asyncio.ensure_future(reads.get("k", build)) for _ in range(8)]
    await settle()
    assert build.calls == 1  # the other seven wait for the first build
    build.release.set()
    assert await asyncio.gather(*readers) == [("value 1", 1000.0)] * 8
    clock.now = 1009.0
    assert await reads.get("k", build) == ("value 1", 1000.0)  # kept for the ttl
    clock.now = 1010.0
    assert await reads.get("k", build) == ("value 2", 1010.0)  # then built again
    assert (build.calls, reads.builds) == (2, 2)


async def test_other_keys_build_on_their_own() -> None:
    clock = Clock()
    reads: Reads[str, str] = Reads(ttl=10.0, clock=clock)
    build = Builder(clock)
    build.release.set()
    assert await reads.get("a", build) == ("value 1", 1000.0)
    assert await reads.get("b", build) == ("value 2", 1000.0)
    assert await reads.get("a", build) == ("value 1", 1000.0)


async def test_a_failed_build_reaches_every_waiter_and_is_not_kept() -> None:
    clock = Clock()
    reads: Reads[str, str] = Reads(ttl=10.0, clock=clock)
    build = Builder(clock)
    build.fail = True
    readers = [asyncio.ensure_future(reads.get("k", build)) for _ in range(3)]
    await settle()
    build.release.set()
    results = await asyncio.gather(*readers, return_exceptions=True)
    assert [str(r) for r in results] == ["build failed"] * 3
    build.fail = False
    assert await reads.get("k", build) == ("value 2", 1000.0)  # the next reader builds anew


async def test_a_reader_that_goes_away_leaves_the_build_to_the_others() -> None:
    clock = Clock()
    reads: Reads[str, str] = Reads(ttl=10.0, clock=clock)
    build = Builder(clock)
    first = asyncio.ensure_future(reads.get("k", build))
    second = asyncio.ensure_future(reads.get("k", build))
    await settle()
    first.cancel()
    await settle()
    build.release.set()
    assert await second == ("value 1", 1000.0)
    assert first.cancelled() and build.calls == 1


async def test_a_new_ttl_drops_the_kept_values() -> None:
    clock = Clock()
    reads: Reads[str, str] = Reads(ttl=10.0, clock=clock)
    build = Builder(clock)
    build.release.set()
    await reads.get("k", build)
    reads.set_ttl(10.0)
    assert len(reads.answers) == 1
    reads.set_ttl(0.0)
    assert len(reads.answers) == 0
    assert await reads.get("k", build) == ("value 2", 1000.0)
    assert await reads.get("k", build) == ("value 3", 1000.0)  # ttl 0: every reader builds


JSON_CASES = [
    ("empty_dict", {}),
    ("empty_list", []),
    ("scalars", [None, True, 1, 1.5, "é\u2028\x1b"]),
    ("long_list", list(range(3 * JSON_SLICE + 1))),
    ("long_dict_of_short_lists", {f"n{i}": [i, 0.5, "QQ=="] for i in range(2 * JSON_SLICE + 3)}),
    ("nested", {"a": {"b": [[1, 2]] * (JSON_SLICE + 1)}, "c": [{"x": list(range(600))}]}),
    ("list_of_dicts", [{"name": str(i), "v": i / 3} for i in range(JSON_SLICE * 2)]),
]


@pytest.mark.parametrize("value", [c[1] for c in JSON_CASES], ids=[c[0] for c in JSON_CASES])
def test_json_bytes_is_json_dumps(value: Any) -> None:
    assert json_bytes(value) == json.dumps(value, separators=(",", ":")).encode()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "infinity"])
def test_json_bytes_refuses_what_is_not_json(bad: float) -> None:
    with pytest.raises(ValueError):
        json_bytes({"metrics": [{"rate": bad}] * (JSON_SLICE + 1)})


def snapshot(names: int) -> Snapshot:
    """``names`` metric names, name i with i + 1 series and 2 * i samples/s."""
    return Snapshot({f"m{i:06d}": NameCount(i + 1, 2.0 * i) for i in range(names)}, observed=60.0)


# id, names held, top asked (0: all), names listed, capped
CAP_CASES = [
    ("under_the_cap", 50, 20, 20, False),
    ("all_of_a_few", 50, 0, 50, True),
    ("all_is_the_cap", MAX_AUDIT_TOP + 500, 0, MAX_AUDIT_TOP, True),
    ("over_the_cap", MAX_AUDIT_TOP + 500, MAX_AUDIT_TOP + 1, MAX_AUDIT_TOP, True),
    ("the_cap_itself", MAX_AUDIT_TOP + 500, MAX_AUDIT_TOP, MAX_AUDIT_TOP, False),
]


@pytest.mark.parametrize(
    ("names", "asked", "listed", "capped"),
    [c[1:] for c in CAP_CASES],
    ids=[c[0] for c in CAP_CASES],
)
async def test_the_audit_answer_is_capped_and_says_so(
    names: int, asked: int, listed: int, capped: bool
) -> None:
    config = parse_config("remote_write:\n  - {name: s, shadow: true}\n", env={})
    audit = Audit(config, now=0.0)
    snaps = {"s": snapshot(names)}

    async def report(top: int, by: str) -> dict[str, Any]:
        return build_report(snaps, audit=audit.settings, shadow={"s": True}, top=top, by=by)

    answers = AuditAnswers(clock=Clock())
    query = audit_query({"top": str(asked)})
    body, _ = await answers.answer(report=report, audit=audit, query=query)
    top = query.top
    answer = json.loads(body)
    dest = answer["destinations"][0]
    assert (answer["top"], answer["top_capped"], answer["sort"]) == (top, capped, "series")
    assert (len(dest["metrics"]), dest["metric_names"]) == (listed, names)
    assert dest["metrics"][0]["name"] == f"m{names - 1:06d}"  # the most series first


async def test_audit_answers_share_one_report_per_refresh_and_follow_a_reload() -> None:
    config = parse_config("remote_write:\n  - {name: s, shadow: true}\n", env={})
    audit = Audit(config, now=0.0)
    clock = Clock()
    asked: list[tuple[int, str]] = []

    async def report(top: int, by: str) -> dict[str, Any]:
        asked.append((top, by))
        return build_report(
            {"s": snapshot(10)}, audit=audit.settings, shadow=audit.audited, top=top, by=by
        )

    answers = AuditAnswers(clock=clock)

    async def read(top: int, by: str = "series") -> dict[str, Any]:
        query = AuditQuery(top=top, by=by)
        body, _ = await answers.answer(report=report, audit=audit, query=query)
        return dict(json.loads(body))

    many = await asyncio.gather(*(read(top) for top in (1, 2, 3, 1, 2, 3, 5, 5)))
    assert [len(a["destinations"][0]["metrics"]) for a in many] == [1, 2, 3, 1, 2, 3, 5, 5]
    by_samples = await read(3, "samples")
    assert [m["name"] for m in by_samples["destinations"][0]["metrics"]] == [
        "m000009",
        "m000008",
        "m000007",
    ]
    assert asked == [(MAX_AUDIT_TOP, "series"), (MAX_AUDIT_TOP, "samples")]  # one per order
    clock.now += AuditConfig().refresh
    await read(1)
    assert len(asked) == 3  # a new refresh period: built again
    new = parse_config(
        "audit: {refresh: 0s}\nremote_write:\n  - {name: s, shadow: true}\n"
        "  - {name: t, shadow: true}\n",
        env={},
    )
    audit.configure(new, now=1.0)  # a reload: new state, refresh 0 (every read builds)
    assert [d["name"] for d in (await read(1))["destinations"]] == ["s"]  # report()'s own
    await read(1)
    assert len(asked) == 5


async def test_status_answers_are_kept_for_a_second() -> None:
    clock = Clock()
    answers = StatusAnswers(clock=clock)
    exposed = 0

    async def expose() -> tuple[bytes, str]:
        nonlocal exposed
        exposed += 1
        return b"rwrouter_received_samples_total 5\n", "text/plain"

    first = await asyncio.gather(*(answers.answer(expose) for _ in range(4)))
    assert exposed == 1 and len({body for body, _ in first}) == 1
    status = json.loads(first[0][0])
    assert status["received_samples_total"] == 5 and status["time"] > 1.7e9
    clock.now += 1.0
    await answers.answer(expose)
    assert exposed == 2


def test_audit_body_cuts_the_listing_only() -> None:
    settings = AuditConfig()
    counts = ActiveSeries(window=60.0, max_series=10, rate_window=60.0, now=0.0)
    report = build_report(
        {"s": counts.snapshot(0.0), "t": snapshot(5)}, audit=settings, shadow={}, top=None
    )
    answer = json.loads(audit_body(report, top=2, by="series", capped=False))
    assert [len(d["metrics"]) for d in answer["destinations"]] == [0, 2]
    assert [d["metric_names"] for d in answer["destinations"]] == [0, 5]
    assert answer["window_seconds"] == report["window_seconds"]


def test_a_workers_keys_travel_in_lines_and_come_back_whole() -> None:
    from rwrouter.server.workers import keys_lines, parse_keys

    big = {
        f"m{i}": NameCount(2, 0.5, keys=array.array("I", [i, i + 1]))
        for i in range(2 * JSON_SLICE + 1)
    }
    snapshots = {
        "big": Snapshot(big, observed=30.0, capped=True),
        "empty": Snapshot({}, observed=1.0),
    }
    text = keys_lines(snapshots).decode()
    assert text.count("\n") + 1 == 3 + 1  # 3 lines of names for "big", 1 for "empty"
    assert max(len(json.loads(line)["names"]) for line in text.split("\n")) == JSON_SLICE
    assert parse_keys(text) == snapshots


# id, query, expected AuditQuery or the start of the ValueError's reason
QUERY_CASES = [
    ("defaults", {}, AuditQuery(top=DEFAULT_AUDIT_TOP, by="series", capped=False)),
    ("top_and_sort", {"top": "7", "sort": "samples"}, AuditQuery(top=7, by="samples")),
    ("top_0_is_the_cap", {"top": "0"}, AuditQuery(top=MAX_AUDIT_TOP, capped=True)),
    ("over_the_cap", {"top": "999999999"}, AuditQuery(top=MAX_AUDIT_TOP, capped=True)),
    ("the_cap", {"top": str(MAX_AUDIT_TOP)}, AuditQuery(top=MAX_AUDIT_TOP, capped=False)),
    ("negative", {"top": "-1"}, "top must be a whole number from 0 to 999999999, got '-1'"),
    ("unicode_digit", {"top": "²"}, "top must be a whole number"),
    ("ten_digits", {"top": "1" * 10}, "top must be a whole number"),
    (
        "long_value_cut",
        {"top": "x" * 5000},
        f"top must be a whole number from 0 to 999999999, got '{'x' * 20}...'",
    ),
    ("unknown_sort", {"sort": "name"}, "sort must be series or samples, got 'name'"),
    ("empty_sort", {"sort": ""}, "sort must be series or samples, got ''"),
]


@pytest.mark.parametrize(
    ("query", "expected"), [c[1:] for c in QUERY_CASES], ids=[c[0] for c in QUERY_CASES]
)
def test_audit_query(query: dict[str, str], expected: AuditQuery | str) -> None:
    if isinstance(expected, AuditQuery):
        assert audit_query(query) == expected
    else:
        with pytest.raises(ValueError) as caught:
            audit_query(query)
        assert str(caught.value).startswith(expected) and "\n" not in str(caught.value)
