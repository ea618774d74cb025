"""Escaping in the router (rwrouter.routing): per destination after its rules, cached like
routing, metadata family names, and collisions (within a label set and across series: the
memory of claims, its bounds, rotations, the log)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import pytest

from rwrouter.config.model import EscapingScheme
from rwrouter.reasons import DropReason
from rwrouter.relabel import parse_relabel_configs
from rwrouter.relabel.series import format_labels
from rwrouter.routing import Route, RoutedRequest, Router
from rwrouter.routing.collisions import REPORTS_PER_MINUTE, Claims, Collision, CollisionLog
from rwrouter.routing.escape import ALLOW_UTF8, DOTS, UNDERSCORES, VALUES
from rwrouter.wire import encode_labels, remote_pb2, types_pb2

Labels = Mapping[str, str]


def request(*series: Labels, metadata: Sequence[str] = ()) -> bytes:
    """A decompressed write request: each series with one sample, labels sorted."""
    req = remote_pb2.WriteRequest()
    for labels in series:
        ts = req.timeseries.add()
        for name, value in sorted(labels.items()):
            ts.labels.add(name=name, value=value)
        ts.samples.add(value=1.0, timestamp=1000)
    for family in metadata:
        req.metadata.add(type=types_pb2.MetricMetadata.GAUGE, metric_family_name=family, help="h")
    return bytes(req.SerializeToString())


def sent(out: RoutedRequest, index: int) -> list[dict[str, str]]:
    req = remote_pb2.WriteRequest()
    req.ParseFromString(out.shares[index].body)
    return [{lab.name: lab.value for lab in ts.labels} for ts in req.timeseries]


def sent_metadata(out: RoutedRequest, index: int) -> list[str]:
    req = remote_pb2.WriteRequest()
    req.ParseFromString(b"".join(out.metadata[index]))
    return [m.metric_family_name for m in req.metadata]


def router(scheme: str = UNDERSCORES, *routes: Route, **cache: Any) -> Router:
    """Destination ``ws`` (``scheme``), ``self`` (allow-utf-8), then ``routes``."""
    return Router(
        global_rules=(),
        routes=[Route("ws", escaping=EscapingScheme(scheme)), Route("self"), *routes],
        **cache,
    )


OTEL = {"__name__": "http.server.duration", "service.name": "api", "job": "x"}
ESCAPED = {
    UNDERSCORES: {"__name__": "http_server_duration", "service_name": "api", "job": "x"},
    DOTS: {"__name__": "http_dot_server_dot_duration", "service_dot_name": "api", "job": "x"},
    VALUES: {"__name__": "U__http_2e_server_2e_duration", "U__service_2e_name": "api", "job": "x"},
}


@pytest.mark.parametrize("scheme", [UNDERSCORES, DOTS, VALUES])
def test_escaping_destination_gets_escaped_names_the_other_intact(scheme: str) -> None:
    r = router(scheme)
    for _ in range(2):  # the second time from the cache
        out = r.route(request(OTEL))
        assert sent(out, 0) == [ESCAPED[EscapingScheme(scheme)]]
        assert sent(out, 1) == [OTEL]
    assert r.hits == 1 and r.misses == 1


def test_legacy_names_are_never_changed() -> None:
    legacy = {"__name__": "job:http_requests:rate5m", "pod": "p.1", "job": "a b"}
    out = router(DOTS).route(request(legacy))
    assert sent(out, 0) == sent(out, 1) == [legacy]  # values and legacy names as they are


ESCAPE_AFTER_RULES = [
    # (name, ws rules, expected at ws): rules see the names before escaping
    (
        "labeldrop_of_the_utf8_name",
        [{"action": "labeldrop", "regex": "service\\.name"}],
        {"__name__": "http_server_duration", "job": "x"},
    ),
    (
        "keep_on_the_utf8_metric_name",
        [{"action": "keep", "source_labels": ["__name__"], "regex": "http\\.server\\..*"}],
        ESCAPED[UNDERSCORES],
    ),
    (
        "replace_copies_the_unescaped_value",
        [{"source_labels": ["__name__"], "target_label": "orig"}],
        {**ESCAPED[UNDERSCORES], "orig": "http.server.duration"},
    ),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [c[1:] for c in ESCAPE_AFTER_RULES], ids=[c[0] for c in ESCAPE_AFTER_RULES]
)
def test_escaping_applies_to_the_output_of_write_relabel_configs(
    raw: list[dict[str, Any]], expected: dict[str, str]
) -> None:
    ws = Route("ws", parse_relabel_configs(raw, "t"), escaping=UNDERSCORES)
    r = Router(global_rules=(), routes=[ws])
    assert sent(r.route(request(OTEL)), 0) == [expected]


def test_metadata_family_names_follow_the_series() -> None:
    out = router().route(request(metadata=["http.server.duration", "up"]))
    assert sent_metadata(out, 0) == ["http_server_duration", "up"]
    assert sent_metadata(out, 1) == ["http.server.duration", "up"]


def test_label_collision_keeps_the_first_name_and_is_counted_once_per_label_set() -> None:
    r = router()
    series = {"__name__": "up", "a.b": "dot", "a_b": "underscore"}
    for _ in range(3):
        out = r.route(request(series), now=1.0)
        assert sent(out, 0) == [{"__name__": "up", "a_b": "dot"}]
        assert sent(out, 1) == [series]
    counts, reports, suppressed = r.take_collisions()
    assert counts == {("ws", "label"): 1} and suppressed == 0  # a miss, then cache hits
    assert reports == [Collision("ws", "label", 'up{a_b="dot"}', "a.b", "a_b")]
    assert r.take_collisions() == ({}, [], 0)


DOT = {"__name__": "a.b", "job": "x"}
UNDER = {"__name__": "a_b", "job": "x"}
DASH = {"__name__": "a-b", "job": "x"}

# (name, requests (each a list of series), winner, loser)
SERIES_COLLISIONS = [
    ("escaped_first", [[DOT], [UNDER]], DOT, UNDER),
    ("legacy_first_is_found_in_the_cache", [[UNDER], [DOT]], UNDER, DOT),
    ("one_request_first_in_order", [[DOT, UNDER]], DOT, UNDER),
    ("one_request_legacy_first", [[UNDER, DOT]], UNDER, DOT),
    ("two_escaped", [[DASH], [DOT]], DASH, DOT),
]


@pytest.mark.parametrize(
    ("requests", "winner", "loser"),
    [c[1:] for c in SERIES_COLLISIONS],
    ids=[c[0] for c in SERIES_COLLISIONS],
)
def test_series_collision_keeps_the_first_seen(
    requests: list[list[Labels]], winner: Labels, loser: Labels
) -> None:
    r = router()
    for series in requests:
        r.route(request(*series), now=1.0)
    for _ in range(2):  # cached now: the same outcome whatever the order
        out = r.route(request(loser, winner), now=2.0)
        assert sent(out, 0) == [UNDER]  # one series of these escaped labels
        assert out.dropped == {(0, DropReason.NAME_COLLISION): 1}
        assert sorted(map(str, sent(out, 1))) == sorted(map(str, [loser, winner]))
    assert r.route_series(_labels(winner))[0] == _encoded(UNDER)
    assert r.route_series(_labels(loser))[0] == DropReason.NAME_COLLISION
    counts, reports, _ = r.take_collisions()
    assert counts == {("ws", "series"): 1}  # once: the loser's miss
    [report] = reports
    assert (report.destination, report.kind) == ("ws", "series")
    assert report.escaped == 'a_b{job="x"}'
    assert (report.kept, report.dropped) == (_text(winner), _text(loser))


def _labels(labels: Labels) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _encoded(labels: Labels) -> bytes:
    return encode_labels(_labels(labels))


def _text(labels: Labels) -> str:
    return format_labels(_labels(labels))


def test_claim_lasts_while_its_series_is_active_then_the_loser_takes_over() -> None:
    r = router(cache_max_age=10.0)  # rotations every 5 s of the clock given
    r.route(request(DOT, UNDER), now=0.0)
    for now in (6.0, 12.0, 18.0):  # both active through rotations: the same winner
        out = r.route(request(UNDER, DOT), now=now)
        assert sent(out, 0) == [UNDER] and out.dropped == {(0, DropReason.NAME_COLLISION): 1}
    out = r.route(request(UNDER), now=24.0)  # DOT stopped; still cached (seen at 18)
    assert out.dropped == {(0, DropReason.NAME_COLLISION): 1}
    out = r.route(request(UNDER), now=30.0)  # DOT not seen for a period: UNDER is sent
    assert sent(out, 0) == [UNDER] and not out.dropped
    out = r.route(request(DOT, UNDER), now=31.0)  # DOT back: now the later one
    assert sent(out, 0) == [UNDER] and out.dropped == {(0, DropReason.NAME_COLLISION): 1}
    assert r.route_series(_labels(DOT))[0] == DropReason.NAME_COLLISION
    counts, _, _ = r.take_collisions()
    assert counts == {("ws", "series"): 2}  # UNDER's first miss, DOT's return


def test_after_both_were_forgotten_the_first_to_come_back_is_first() -> None:
    r = router(cache_max_age=10.0)
    r.route(request(DOT, UNDER), now=0.0)
    assert r.route_series(_labels(UNDER))[0] == DropReason.NAME_COLLISION
    r.route(request(UNDER, DOT), now=100.0)  # nothing for a whole max_age: all forgotten
    assert r.route_series(_labels(UNDER))[0] == _encoded(UNDER)
    assert r.route_series(_labels(DOT))[0] == DropReason.NAME_COLLISION


def test_legacy_first_with_rules_that_change_it_is_not_detected() -> None:
    # The memory holds only series that escaping changed; an unchanged one is found first only
    # when its labels are its own cache key (no rule changed them). Documented limitation.
    drop = parse_relabel_configs([{"action": "labeldrop", "regex": "instance"}], "t")
    r = Router(global_rules=(), routes=[Route("ws", drop, escaping=UNDERSCORES)])
    r.route(request({**UNDER, "instance": "i"}), now=0.0)
    out = r.route(request({**DOT, "instance": "i"}), now=0.0)
    assert sent(out, 0) == [UNDER] and not out.dropped  # both sent: they merge there
    out = r.route(request({**DOT, "instance": "j"}), now=0.0)  # escaped first: detected
    assert out.dropped == {}  # (the same escaped labels, the same series: not a collision)


def test_a_collision_is_not_a_reason_for_the_fallback() -> None:
    rest = Route("rest", fallback=True)
    r = Router(global_rules=(), routes=[Route("ws", escaping=UNDERSCORES), rest])
    out = r.route(request(DOT, UNDER))
    assert sent(out, 0) == [UNDER] and sent(out, 1) == []


def test_shadow_destinations_drop_collisions_without_counting_them() -> None:
    shadow = Route("preview", shadow=True, escaping=UNDERSCORES)
    r = router(ALLOW_UTF8, shadow)
    out = r.route(request(DOT, UNDER, {"__name__": "up", "a.b": "1", "a_b": "2"}))
    assert sent(out, 2) == [UNDER, {"__name__": "up", "a_b": "1"}]
    assert r.take_collisions() == ({}, [], 0)


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown metric_name_escaping_scheme 'utf8'"):
        Router(global_rules=(), routes=[Route("ws", escaping=cast(EscapingScheme, "utf8"))])


def _claims(max_claims: int, alive: set[bytes]) -> Claims:
    return Claims(routes=1, max_claims=max_claims, alive=alive.__contains__)


def _claim(claims: Claims, n: int) -> bool:
    escaped, original, key = b"e%d" % n, b"o%d" % n, b"k%d" % n
    return claims.check(
        route=0, escaped=escaped, original=original, key=key, twin=lambda route, labels: False
    ).kept


def test_claims_past_the_bound_forget_inactive_series_first_then_the_oldest() -> None:
    claims = _claims(4, {b"k0", b"k2", b"k3", b"k4"})
    assert all(_claim(claims, n) for n in range(4)) and len(claims) == 4
    assert _claim(claims, 4)  # over the bound: k1 is inactive, then the oldest (e0) goes
    assert len(claims) == 3

    def other(escaped: bytes) -> bool:
        return claims.check(
            route=0,
            escaped=escaped,
            original=b"o-other",
            key=b"k-other",
            twin=lambda route, labels: False,
        ).kept

    assert not other(b"e2") and not other(b"e4")  # still held by active series
    assert other(b"e0")  # forgotten: a collision with it is not detected


def test_a_claim_of_an_inactive_series_is_taken_over() -> None:
    alive: set[bytes] = {b"k0"}
    claims = _claims(10, alive)
    assert _claim(claims, 0)
    other = {
        "route": 0,
        "escaped": b"e0",
        "original": b"o-other",
        "key": b"k-other",
        "twin": lambda route, labels: False,
    }
    assert not claims.check(**other).kept  # type: ignore[arg-type]
    assert claims.losers == 1
    alive.clear()
    assert claims.check(**other).kept  # type: ignore[arg-type]


def test_collision_log_logs_each_distinct_collision_once_at_most_ten_a_minute() -> None:
    log = CollisionLog()

    def add(key: int, now: float) -> None:
        log.add(
            destination="ws",
            kind="series",
            key=key,
            now=now,
            describe=lambda: Collision("ws", "series", str(key), "k", "d"),
        )

    for key in range(REPORTS_PER_MINUTE + 2):
        add(key, 0.0)
    add(0, 1.0)  # seen: counted, not logged again
    counts, reports, suppressed = log.take()
    assert counts == {("ws", "series"): REPORTS_PER_MINUTE + 3}
    assert [r.escaped for r in reports] == [str(k) for k in range(REPORTS_PER_MINUTE)]
    assert suppressed == 2
    add(100, 30.0)
    assert log.take()[1:] == ([], 1)  # still the same minute
    add(101, 61.0)
    assert [r.escaped for r in log.take()[1]] == ["101"]
