"""The compiled routing miss path (``route_labels``, ``rwrouter/wire/_route.h``) gives the
cache entry the Python one (:meth:`Router._route_raw_py`) gives, on random global and
per-destination rules, fallback and shadow destinations, a label removed after the rules, and
raw label sets (unsorted, repeated names, empty values, malformed), and raises what it raises."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.config.model import EscapingScheme
from rwrouter.relabel import parse_relabel_configs
from rwrouter.routing.outcome import Route
from rwrouter.routing.router import Router
from rwrouter.wire.accelerator import compiled
from rwrouter.wire.codec import encode_labels

from .test_relabel_compiled import NAMES, VALUES, make_rules, rule_strategy

_compiled = compiled("route_labels")
pytestmark = pytest.mark.skipif(_compiled is None, reason="accelerator not built")


def both(router: Router, raw: bytes) -> None:
    """The compiled entry equals the Python one (or both raise the same error)."""
    assert _compiled is not None and router._plan is not None
    try:
        want = router._route_raw_py(raw)
    except Exception as exc:
        with pytest.raises(type(exc)):
            _compiled(raw, *router._plan, router._drop_after)
        return
    assert _compiled(raw, *router._plan, router._drop_after) == want
    assert router._route_raw(raw) == want  # what the miss path takes


def router_of(
    global_rules: Any, routes: list[tuple[Any, bool, bool]], drop: str | None = None
) -> Router:
    router = Router(
        global_rules=global_rules,
        routes=[
            Route(name=f"d{i}", rules=rules, fallback=fallback, shadow=shadow)
            for i, (rules, fallback, shadow) in enumerate(routes)
        ],
    )
    if drop is not None:
        router._drop_after = drop  # as TenantRouter's __tenant__
    return router


pairs = st.tuples(st.sampled_from([*NAMES, ""]), st.sampled_from(VALUES))
raw_strategy = st.one_of(
    st.lists(pairs, max_size=6).map(lambda p: encode_labels(tuple(p))),
    st.binary(max_size=12),  # malformed framing, invalid UTF-8
    st.sampled_from([b"\x0a\x04\x0a\x01\xff\x12\x00", b"\x0a\x02\x12\x00", b""]),
)
route_strategy = st.tuples(st.lists(rule_strategy(), max_size=4), st.booleans(), st.booleans())


@settings(max_examples=500, deadline=None)
@given(
    global_raw=st.lists(rule_strategy(), max_size=2),
    routes_raw=st.lists(route_strategy, min_size=1, max_size=3),
    drop=st.sampled_from([None, "pod", "__name__"]),
    raws=st.lists(raw_strategy, min_size=1, max_size=5),
)
def test_compiled_miss_gives_the_python_entry(
    global_raw: list[dict[str, Any]],
    routes_raw: list[tuple[list[dict[str, Any]], bool, bool]],
    drop: str | None,
    raws: list[bytes],
) -> None:
    global_rules = make_rules(global_raw) if global_raw else ()
    routes = [(make_rules(r) if r else (), fb, sh) for r, fb, sh in routes_raw]
    if global_rules is None or any(r is None for r, _, _ in routes):
        return
    router = router_of(global_rules, routes, drop)
    for raw in raws + raws:  # twice: the second time from the rules' memos
        both(router, raw)


@settings(max_examples=300, deadline=None)
@given(
    routes_raw=st.lists(route_strategy, min_size=1, max_size=3),
    raws=st.lists(raw_strategy, min_size=1, max_size=5),
)
def test_compiled_miss_on_its_own_memos(
    routes_raw: list[tuple[list[dict[str, Any]], bool, bool]], raws: list[bytes]
) -> None:
    """Two routers from the same rules, each with its own memos: the compiled miss path asks
    its rules' fallbacks itself (the Python path has not filled the memos first)."""
    pairs = [
        ((make_rules(r) if r else ()), (make_rules(r) if r else ()), fb, sh)
        for r, fb, sh in routes_raw
    ]
    if any(a is None or b is None for a, b, _, _ in pairs):
        return
    fast = router_of((), [(a, fb, sh) for a, _, fb, sh in pairs])
    slow = router_of((), [(b, fb, sh) for _, b, fb, sh in pairs])
    assert _compiled is not None and fast._plan is not None
    for raw in raws + raws:
        try:
            got = _compiled(raw, *fast._plan, fast._drop_after)
        except Exception as exc:
            with pytest.raises(type(exc)):
                slow._route_raw_py(raw)
            continue
        assert got == slow._route_raw_py(raw)


KEEP_GPU = [{"action": "keep", "source_labels": ["__name__"], "regex": "gpu_.*"}]
RENAME = [{"source_labels": ["pod"], "target_label": "workload", "regex": "(.*)-[a-z0-9]+"}]
DROP_ALL = [{"action": "drop", "source_labels": ["__name__"], "regex": ".*"}]
NO_NAME = [{"action": "labeldrop", "regex": "__name__"}]
SET_PZ_PY = [
    {"source_labels": ["pod"], "target_label": "pz", "replacement": "b"},
    {"source_labels": ["pod"], "target_label": "py", "replacement": "a"},
]
# py set again moves it after pz (a base label of the destination's builder), so the
# labelmap walks it last and x takes its value
SET_PY_MAP = [
    {"source_labels": ["pod"], "target_label": "py", "replacement": "c"},
    {"action": "labelmap", "regex": "p(y|z)", "replacement": "x"},
]
GPU = (("__name__", "gpu_util"), ("pod", "train-7f"))
CPU = (("__name__", "cpu_seconds"), ("pod", "web-1a"))

# id, global rules, routes (rules, fallback, shadow), drop, labels
CASES = [
    ("kept_unchanged", [], [(KEEP_GPU, False, False)], None, GPU),
    ("kept_changed", [], [(RENAME, False, False)], None, GPU),
    ("dropped_by_keep", [], [(KEEP_GPU, False, False)], None, CPU),
    ("fallback_takes_the_rest", [], [(KEEP_GPU, False, False), ([], True, False)], None, CPU),
    ("fallback_not_sent", [], [(KEEP_GPU, False, False), ([], True, False)], None, GPU),
    ("shadow_keeps_no_series", [], [(KEEP_GPU, False, True), ([], True, False)], None, GPU),
    ("global_drop_everywhere", DROP_ALL, [([], False, False), ([], True, False)], None, GPU),
    ("global_then_destination", RENAME, [(KEEP_GPU, False, False)], None, GPU),
    ("global_output_is_base_labels", SET_PZ_PY, [(SET_PY_MAP, False, False)], None, GPU),
    ("no_name_is_invalid", [], [(NO_NAME, False, False)], None, GPU),
    ("drop_after_the_rules", [], [([], False, False)], "pod", GPU),
    ("drop_leaves_nothing", [], [([], False, False)], "__name__", (("__name__", "x"),)),
    ("empty_set", [], [([], False, False), ([], True, False)], None, ()),
]


@pytest.mark.parametrize(
    ("global_raw", "routes_raw", "drop", "labels"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_routing_cases(
    global_raw: list[dict[str, Any]],
    routes_raw: list[tuple[list[dict[str, Any]], bool, bool]],
    drop: str | None,
    labels: tuple[tuple[str, str], ...],
) -> None:
    routes = [(parse_relabel_configs(r, "t"), fb, sh) for r, fb, sh in routes_raw]
    both(router_of(parse_relabel_configs(global_raw, "g"), routes, drop), encode_labels(labels))


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("not bytes", (), (), None), TypeError),
        ((b"", (), ((),), None), TypeError),
        ((b"", (), (((), False),), None), TypeError),
        ((b"", (), (), 1), TypeError),
        ((encode_labels(GPU), (), ((("x",), False, False),), None), TypeError),
    ],
    ids=["raw_not_bytes", "route_empty", "route_of_two", "drop_not_str", "rule_not_a_tuple"],
)
def test_bad_arguments_are_type_errors(args: tuple[Any, ...], error: type[Exception]) -> None:
    assert _compiled is not None
    with pytest.raises(error):
        _compiled(*args)


def test_escaping_routes_take_the_python_way() -> None:
    router = Router(
        global_rules=(), routes=[Route(name="a", escaping=EscapingScheme("underscores"))]
    )
    assert router._plan is None


def _field(number: int, data: bytes) -> bytes:
    """One length-delimited protobuf field (lengths < 128 here)."""
    return bytes([number << 3 | 2, len(data)]) + data


def _label(name: bytes, value: bytes, extra: bytes = b"") -> bytes:
    body = _field(1, name) + _field(2, value) + extra
    return _field(1, body)


_MANY = (*tuple((f"l{i:03d}", "v") for i in range(70)), ("__name__", "gpu_util"))
# id, raw label set: the shapes the compiled decoder takes itself and the ones it hands over
SHAPES = [
    ("more_labels_than_the_fast_decoder_holds", encode_labels(_MANY)),
    ("value_longer_than_the_cached_ones", encode_labels((("__name__", "m"), ("pod", "p" * 200)))),
    ("name_longer_than_the_cached_ones", encode_labels((("__name__", "m"), ("n" * 90, "v")))),
    ("value_field_before_name", _field(1, _field(2, b"m") + _field(1, b"__name__"))),
    ("unknown_field_in_a_label", _label(b"__name__", b"m", extra=b"\x18\x01")),
    ("repeated_value_field", _label(b"__name__", b"m", extra=_field(2, b"n"))),
    ("non_ascii_value", encode_labels((("__name__", "m"), ("pod", "é-1")))),
    # the ASCII test reads 8 bytes a step, the last 8 overlapping, fewer than 8 in parts
    ("non_ascii_last_byte_of_9", _label(b"__name__", b"m") + _label(b"pod", b"abcdefgh\xc3")),
    ("non_ascii_first_byte_of_16", _label(b"__name__", b"m") + _label(b"pod", b"\xe9" + b"a" * 15)),
    (
        "non_ascii_middle_of_17",
        _label(b"__name__", b"m") + _label(b"pod", b"a" * 8 + b"\xff" + b"a" * 8),
    ),
    ("non_ascii_byte_3_of_7", _label(b"__name__", b"m") + _label(b"pod", b"abc\x80efg")),
    ("non_ascii_name_of_6", _label(b"__name__", b"m") + _label(b"podd\xc3\xa9", b"v")),
    ("invalid_utf8_value", _label(b"__name__", b"\xff")),
    (
        "repeated_name_empty_value",
        _label(b"pod", b"") + _label(b"__name__", b"m") + _label(b"pod", b"a"),
    ),
    ("unsorted", _label(b"pod", b"a") + _label(b"__name__", b"m")),
]


@pytest.mark.parametrize("raw", [s[1] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_label_set_shapes(raw: bytes) -> None:
    rules = parse_relabel_configs([*RENAME, {"action": "labeldrop", "regex": "l00.*"}], "t")
    both(router_of((), [(rules, False, False), ((), True, False)]), raw)


def test_recent_values_are_the_values_sent() -> None:
    """Enough distinct names and values to evict each other from the decoder's tables: every
    entry is still the Python one, before and after."""
    router = router_of((), [(parse_relabel_configs(RENAME, "t"), False, False)])
    raws = [
        encode_labels((("__name__", f"m{i % 7}"), (f"n{i % 300}", f"v{i}"), ("pod", f"p-{i}")))
        for i in range(6000)
    ]
    for raw in raws + raws[::-1]:
        both(router, raw)


def test_a_labelmap_of_many_labels_gives_the_python_entry() -> None:
    """A destination whose rules set more labels than the output sort places one by one."""
    rules = parse_relabel_configs(
        [{"action": "labelmap", "regex": "l(.*)", "replacement": "m$1"}], "t"
    )
    both(router_of((), [(rules, False, False)]), encode_labels(_MANY))


# (name, value length): the shard hash's CRC-32 (ISA-L's or zlib's, whichever the extension
# linked) takes other paths for short, aligned and long inputs; each must give zlib.crc32
SHARD_HASH_CASES = [
    ("one_byte_value", 1),
    ("under_16", 7),
    ("16", 16),
    ("under_64", 45),
    ("64", 64),
    ("over_64", 65),
    ("a_label_set", 200),
    ("256", 256),
    ("long", 4099),
    ("very_long", 70_001),
]


@pytest.mark.parametrize(
    "length", [c[1] for c in SHARD_HASH_CASES], ids=[c[0] for c in SHARD_HASH_CASES]
)
def test_compiled_shard_hash_is_zlib_crc32(length: int) -> None:
    router = router_of((), [((), False, False)])
    for offset in range(4):  # the label bytes at other alignments
        raw = encode_labels((("__name__", "m" * (offset + 1)), ("v", "x" * length)))
        assert _compiled is not None and router._plan is not None
        entry = _compiled(raw, *router._plan, router._drop_after)
        assert entry[0] == 1  # kept, labels as they came: 01 + hash (u32 LE)
        assert int.from_bytes(entry[1:5], "little") == zlib.crc32(raw)
        both(router, raw)


_upper_state_dirty = compiled("upper_state_dirty")
_crc32 = compiled("crc32")


@pytest.mark.skipif(
    _upper_state_dirty is None or _upper_state_dirty() is None,
    reason="the vector registers' state cannot be read here (not x86, or no XINUSE)",
)
@pytest.mark.parametrize(
    "length", [c[1] for c in SHARD_HASH_CASES], ids=[c[0] for c in SHARD_HASH_CASES]
)
def test_crc32_leaves_the_vector_upper_state_clear(length: int) -> None:
    """ISA-L's AVX-512 CRC-32 returns with the upper halves of the vector registers in use;
    until something clears them, every switch between SSE and AVX code in the process costs a
    state transition on Intel cores (about 30 % of rwrouter's throughput). The accelerator
    clears them after each call: the shard hash (a miss) and the records' checksum."""
    assert _upper_state_dirty is not None
    router = router_of((), [((), False, False)])
    raw = encode_labels((("__name__", "m"), ("v", "x" * length)))
    assert _compiled is not None and router._plan is not None
    _compiled(raw, *router._plan, router._drop_after)  # a miss: the shard hash
    assert _upper_state_dirty() is False
    if _crc32 is not None:
        _crc32(raw)
        assert _upper_state_dirty() is False
