"""The metadata book of an RW 2.0 destination (rwrouter.send.metabook): the latest entry per
family, bounded, and the lookup by a series' metric name (Prometheus
``scrape.isSeriesPartOfFamily`` suffix rules, plus OpenMetrics ``_created``)."""

from __future__ import annotations

import pytest

from rwrouter.config.model import EscapingScheme
from rwrouter.routing.escape import DOTS, SCHEMES, VALUES, escape_metric_name
from rwrouter.send.metabook import MetadataBook, parse_entry
from rwrouter.wire import frame_metadata, types_pb2

MM = types_pb2.MetricMetadata


def entry(family: str, kind: int = MM.GAUGE, help_text: str = "", unit: str = "") -> bytes:
    payload = MM(type=kind, metric_family_name=family, help=help_text, unit=unit)  # type: ignore[arg-type]
    return frame_metadata(payload.SerializeToString())


FAMILIES = [
    entry("rpc_seconds", MM.HISTOGRAM, "RPC latency.", "seconds"),
    entry("queue_wait", MM.GAUGEHISTOGRAM, "Wait."),
    entry("http_requests", MM.COUNTER, "Requests."),
    entry("errors_total", MM.COUNTER, "Errors."),
    entry("gc_pause", MM.SUMMARY, "GC."),
    entry("build", MM.INFO, "Build."),
    entry("temperature", MM.GAUGE, "Temperature.", "celsius"),
    entry("temperature_count", MM.GAUGE, "A gauge that looks like a count."),
]

# (id, series metric name, family found or None)
LOOKUPS = [
    ("exact", "temperature", "temperature"),
    ("exact_counter_with_total", "errors_total", "errors_total"),
    ("histogram_bucket", "rpc_seconds_bucket", "rpc_seconds"),
    ("histogram_sum", "rpc_seconds_sum", "rpc_seconds"),
    ("histogram_count", "rpc_seconds_count", "rpc_seconds"),
    ("histogram_created", "rpc_seconds_created", "rpc_seconds"),
    ("native_histogram_exact", "rpc_seconds", "rpc_seconds"),
    ("gaugehistogram_bucket", "queue_wait_bucket", "queue_wait"),
    ("gaugehistogram_gsum", "queue_wait_gsum", "queue_wait"),
    ("gaugehistogram_gcount", "queue_wait_gcount", "queue_wait"),
    ("gaugehistogram_not_sum", "queue_wait_sum", None),
    ("counter_total", "http_requests_total", "http_requests"),
    ("counter_created", "http_requests_created", "http_requests"),
    ("counter_not_bucket", "http_requests_bucket", None),
    ("summary_sum", "gc_pause_sum", "gc_pause"),
    ("summary_count", "gc_pause_count", "gc_pause"),
    ("summary_quantiles_exact", "gc_pause", "gc_pause"),
    ("summary_not_bucket", "gc_pause_bucket", None),
    ("info", "build_info", "build"),
    ("gauge_takes_no_suffix", "temperature_total", None),
    ("exact_before_suffix", "temperature_count", "temperature_count"),
    ("unknown", "nothing_here", None),
    ("suffix_alone", "_total", None),
    ("utf8_name", "http.server.duration", None),
]


@pytest.mark.parametrize(("name", "family"), [c[1:] for c in LOOKUPS], ids=[c[0] for c in LOOKUPS])
def test_lookup(name: str, family: str | None) -> None:
    book = MetadataBook()
    book.update(FAMILIES)
    expected = None
    for framed in FAMILIES:
        found, meta = parse_entry(framed)
        if found == (family or "").encode():
            expected = meta
    assert book.resolve(name.encode()) == expected
    assert book.memo[name.encode()] == expected  # the encoder asks the memo first


def test_entry_parsed_as_type_help_unit() -> None:
    assert parse_entry(entry("x", MM.COUNTER, "Help é.", "bytes")) == (
        b"x",
        (1, "Help é.".encode(), b"bytes"),
    )
    unknown_type = frame_metadata(b"\x08\x63\x12\x01x")  # type 99: not one RW 2.0 knows
    assert parse_entry(unknown_type) == (b"x", (0, b"", b""))


def test_latest_entry_wins_and_clears_the_memo() -> None:
    book = MetadataBook()
    book.update([entry("x", MM.GAUGE, "old")])
    assert book.resolve(b"x") == (2, b"old", b"")
    book.update([entry("x", MM.COUNTER, "new")])
    assert book.memo == {}
    assert book.resolve(b"x") == (1, b"new", b"")
    assert len(book) == 1
    assert book.nbytes == len(entry("x", MM.COUNTER, "new"))


def test_same_entry_again_keeps_the_memo() -> None:
    book = MetadataBook()
    book.update([entry("x")])
    book.resolve(b"x_total")
    book.update([entry("x")])  # Prometheus sends every family again each minute
    assert b"x_total" in book.memo


def test_new_family_clears_a_cached_miss() -> None:
    book = MetadataBook()
    assert book.resolve(b"late_total") is None
    book.update([entry("late", MM.COUNTER)])
    assert b"late_total" not in book.memo
    assert book.resolve(b"late_total") == (1, b"", b"")


def test_bound_in_entries_evicts_the_least_recently_updated() -> None:
    book = MetadataBook(max_entries=2)
    assert book.update([entry("a"), entry("b")]) == 0
    book.update([entry("a")])  # refreshed: b is now the oldest
    assert book.update([entry("c")]) == 1
    assert [parse_entry(e)[0] for e in book.entries()] == [b"a", b"c"]


def test_bound_in_bytes() -> None:
    big = entry("big", help_text="h" * 100)
    book = MetadataBook(max_bytes=len(big) + 2)  # "a" (7 bytes) and big do not fit together
    book.update([entry("a")])
    assert book.update([big]) == 1
    assert book.entries() == [big]
    assert book.update([entry("huge", help_text="h" * 200)]) == 2  # alone over the bound
    assert len(book) == 0 and book.nbytes == 0


@pytest.mark.parametrize(
    "framed",
    [b"", b"\x0a\x00", b"\x1a\x05\x08", frame_metadata(b"\x08\x01")],
    ids=["empty", "not_metadata", "cut", "no_family"],
)
def test_unusable_entries_are_skipped(framed: bytes) -> None:
    book = MetadataBook()
    assert book.update([framed, entry("ok")]) == 0
    assert [parse_entry(e)[0] for e in book.entries()] == [b"ok"]


# -- names escaped for the destination (metric_name_escaping_scheme) ---------------------------

# (id, family as received, its type, a series of that family as received). The book holds the
# family escaped as the router escapes metadata (escape_metric_name of the family), the
# encoder looks the escaped series name up: under dots and values every "_" doubles, so a
# suffix "_total" arrives as "__total" ("a.b_total" -> "U__a_2e_b__total", family "U__a_2e_b").
ESCAPED_FAMILIES = [
    ("counter_total", "a.b", MM.COUNTER, "a.b_total"),
    ("histogram_bucket", "h.x", MM.HISTOGRAM, "h.x_bucket"),
    ("summary_count", "s.y", MM.SUMMARY, "s.y_count"),
    ("gaugehistogram_gsum", "g.z", MM.GAUGEHISTOGRAM, "g.z_gsum"),
    ("family_ending_in_escape", "a.", MM.COUNTER, "a._total"),
    ("legacy_family", "rpc_seconds", MM.HISTOGRAM, "rpc_seconds_bucket"),
    ("exact_name", "k.v", MM.GAUGE, "k.v"),
]
ESCAPED_CASES = [(scheme, *case[1:]) for scheme in SCHEMES for case in ESCAPED_FAMILIES]
ESCAPED_IDS = [f"{scheme}-{case[0]}" for scheme in SCHEMES for case in ESCAPED_FAMILIES]


@pytest.mark.parametrize(("scheme", "family", "kind", "series"), ESCAPED_CASES, ids=ESCAPED_IDS)
def test_lookup_of_escaped_names(scheme: str, family: str, kind: int, series: str) -> None:
    """A series finds its family's metadata whatever the destination's escaping scheme."""
    book = MetadataBook(escaping=EscapingScheme(scheme))
    framed = entry(escape_metric_name(family, scheme), kind, "Help.")
    book.update([framed])
    assert book.resolve(escape_metric_name(series, scheme).encode()) == parse_entry(framed)[1]


@pytest.mark.parametrize("scheme", [DOTS, VALUES])
def test_doubled_suffix_only_after_the_exact_family(scheme: str) -> None:
    """A legacy name with a double underscore keeps its own family first (``x__total`` of the
    counter ``x_``, left as it is by every scheme), and a doubled suffix needs the type."""
    book = MetadataBook(escaping=EscapingScheme(scheme))
    book.update(
        [
            entry("x_", MM.COUNTER, "x_"),
            entry("x", MM.COUNTER, "x"),
            entry(escape_metric_name("g.y", scheme), MM.GAUGE, "gauge"),
        ]
    )
    assert book.resolve(b"x__total") == (MM.COUNTER, b"x_", b"")
    assert book.resolve(escape_metric_name("g.y_total", scheme).encode()) is None


def test_an_entry_seen_before_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote write 2.0 sender repeats every series' metadata in every request: the book
    recognises an entry it holds by its bytes; a changed one, or one evicted, is parsed."""
    from rwrouter.send import metabook

    parsed: list[bytes] = []

    def counting(framed: bytes) -> tuple[bytes, tuple[int, bytes, bytes]]:
        parsed.append(framed)
        return parse_entry(framed)

    monkeypatch.setattr(metabook, "parse_entry", counting)
    book = MetadataBook(max_entries=2)
    a, b, c = entry("a"), entry("b"), entry("c")
    for _ in range(3):
        book.update([a, b])
    assert parsed == [a, b]
    changed = entry("a", help_text="new")
    book.update([changed, c])  # a replaced, then b (least recently updated) evicted by c
    assert parsed == [a, b, changed, c]
    assert book.update([a]) == 0 and parsed[-1] == a  # the old a is no longer held: parsed
    assert [parse_entry(e)[0] for e in book.entries()] == [b"c", b"a"]
    assert book.resolve(b"a") == (MM.GAUGE, b"", b"")
