"""The compiled relabel loop (``relabel_program``, ``rwrouter/wire/_relabel.h``) gives what the
pure engine (:func:`rwrouter.relabel.process`) gives, for every action, on random rules and
label sets (unsorted and with repeated names too), and raises what it raises."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.relabel import Action, parse_relabel_configs, process
from rwrouter.relabel.engine import _CODES, process_compiled, program
from rwrouter.wire.accelerator import compiled

_compiled = compiled("relabel_program")
pytestmark = pytest.mark.skipif(_compiled is None, reason="accelerator not built")


def relabel_program(labels: Any, program_: Any) -> Any:
    """The compiled loop (the tests are skipped without it)."""
    assert _compiled is not None
    return _compiled(labels, program_)


NAMES = ["__name__", "pod", "gpu", "pa", "w", "Hostname", "é"]
VALUES = ["", "m", "p1-a", "p1-b", "p2", "0", "1", "ab-c-d", "é-1", "GPU-x", "a;b"]
REGEXES = [
    "(.*)",
    "p.*",
    "(.*)-([0-9a-z]+)",
    "m|p2",
    "(p)(.*)",
    "",
    ".*1.*",
    "(é)(.*)",
    "pod|w",
    "gpu",
    "pod|pod|pa:",
]


def rule_strategy() -> st.SearchStrategy[dict[str, Any]]:
    action = st.sampled_from([a.value for a in Action])
    return st.fixed_dictionaries(
        {"action": action},
        optional={
            "source_labels": st.lists(st.sampled_from(NAMES), min_size=1, max_size=2),
            "regex": st.sampled_from(REGEXES),
            "replacement": st.sampled_from(["$1", "x_$1", "", "x", "$2-$1", "${1}z"]),
            "separator": st.sampled_from([";", "/", ""]),
            # base names too: a rule setting a base label moves it to the end (Range order),
            # which decides the value a labelmap gives when two names map to one
            "target": st.sampled_from(["t", "t_$1", "pa", "pod", "gpu", "x"]),
        },
    )


def make_rules(raw: list[dict[str, Any]]) -> Any:
    """Parsed rules, with the keys each action needs filled in (or None when Prometheus would
    refuse the combination: hypothesis then tries another)."""
    rules = []
    for rule in raw:
        rule = dict(rule)
        target = rule.pop("target", "t")
        if rule["action"] in (
            "replace",
            "hashmod",
            "lowercase",
            "uppercase",
            "keepequal",
            "dropequal",
        ):
            rule["target_label"] = target
        if rule["action"] == "hashmod":
            rule["modulus"] = 7
        if rule["action"] in ("lowercase", "uppercase", "keepequal", "dropequal"):
            rule.pop("replacement", None)
            rule.pop("regex", None)
        if rule["action"] in ("labelmap", "labeldrop", "labelkeep"):
            rule.pop("source_labels", None)
            if rule["action"] != "labelmap":
                rule.pop("replacement", None)
        rules.append(rule)
    try:
        return parse_relabel_configs(rules, "t")
    except Exception:
        return None


labels_strategy = st.lists(
    st.tuples(st.sampled_from(NAMES), st.sampled_from([v for v in VALUES if v])), max_size=6
)


@settings(max_examples=600, deadline=None)
@given(
    raw=st.lists(rule_strategy(), min_size=1, max_size=5),
    sets=st.lists(labels_strategy, max_size=4),
)
def test_compiled_loop_gives_the_pure_engine_result(
    raw: list[dict[str, Any]], sets: list[list[tuple[str, str]]]
) -> None:
    rules = make_rules(raw)
    if rules is None:
        return
    for pairs in sets + sets:  # twice: the second time from the memos
        labels = tuple(pairs)
        try:
            want: Any = process(labels, rules)
        except Exception as exc:  # the same error either way
            with pytest.raises(type(exc)):
                relabel_program(labels, program(rules))
            continue
        assert relabel_program(labels, program(rules)) == want
        assert process_compiled(tuple(sorted(dict(labels).items())), rules) == process(
            tuple(sorted(dict(labels).items())), rules
        )


def test_codes_are_those_of_relabel_h() -> None:
    # enum of rwrouter/wire/_relabel.h, in Action's order
    assert [_CODES[a] for a in Action] == list(range(11))
    assert list(Action)[:3] == [Action.REPLACE, Action.KEEP, Action.DROP]


@pytest.mark.parametrize(
    ("labels", "program_", "error"),
    [
        ("not a tuple", (), TypeError),
        ((("a",),), (), TypeError),
        ((("a", 1),), (), TypeError),
        ((), ((0,),), TypeError),
    ],
    ids=["labels_not_a_tuple", "pair_of_one", "value_not_str", "rule_too_short"],
)
def test_bad_arguments_are_type_errors(labels: Any, program_: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        relabel_program(labels, program_)


# id, rules, labels: cases where the order of the working set (Builder.Range) decides
ORDER_CASES = [
    (
        "set_base_label_moves_it_last",  # pod then pa (moved): x gets pa's new value
        [
            {"source_labels": ["pa"], "target_label": "pa", "replacement": "new"},
            {"action": "labelmap", "regex": "(p.*)", "replacement": "x"},
        ],
        (("pa", "1"), ("pod", "2")),
    ),
    (
        "set_again_keeps_its_place",  # y set, then z, then y again: y stays before z
        [
            {"source_labels": ["pa"], "target_label": "py", "replacement": "a"},
            {"source_labels": ["pa"], "target_label": "pz", "replacement": "b"},
            {"source_labels": ["pa"], "target_label": "py", "replacement": "c"},
            {"action": "labelmap", "regex": "p(y|z)", "replacement": "x"},
        ],
        (("pa", "1"),),
    ),
    (
        "deleted_then_set_goes_last",
        [
            {"source_labels": ["pa"], "target_label": "py", "replacement": "a"},
            {"source_labels": ["pa"], "target_label": "pz", "replacement": "b"},
            {"action": "labeldrop", "regex": "py"},
            {"source_labels": ["pa"], "target_label": "py", "replacement": "c"},
            {"action": "labelmap", "regex": "p(y|z)", "replacement": "x"},
        ],
        (("pa", "1"),),
    ),
    (
        "repeated_name_keeps_the_last_sorted",
        [{"action": "labelmap", "regex": "a", "replacement": "b"}],
        (("a", "2"), ("a", "1"), ("c", "3")),
    ),
]


@pytest.mark.parametrize(
    ("raw", "labels"), [c[1:] for c in ORDER_CASES], ids=[c[0] for c in ORDER_CASES]
)
def test_range_order_as_the_pure_engine(raw: list[dict[str, Any]], labels: Any) -> None:
    rules = parse_relabel_configs(raw, "t")
    assert relabel_program(labels, program(rules)) == process(labels, rules)


_WIDE = tuple((f"l{i:03d}", f"v{i % 7}") for i in range(80))
# id, label set, rules: sets past the insertion sorts' bound (RL_INSERTION_MAX), which qsort
LARGE_CASES = [
    ("many_unsorted", tuple(reversed(_WIDE)), []),
    ("many_repeated", (*_WIDE, *_WIDE[:40]), []),
    (
        "labelmap_sets_every_label",
        _WIDE,
        [{"action": "labelmap", "regex": "l(.*)", "replacement": "m$1"}],
    ),
    (
        "labelmap_then_drop_half",
        tuple(reversed(_WIDE)),
        [
            {"action": "labelmap", "regex": "l0(.*)", "replacement": "k$1"},
            {"action": "labeldrop", "regex": "l0[0-3].*"},
        ],
    ),
]


@pytest.mark.parametrize(
    ("labels", "raw"), [c[1:] for c in LARGE_CASES], ids=[c[0] for c in LARGE_CASES]
)
def test_large_label_sets_as_the_pure_engine(labels: Any, raw: list[dict[str, Any]]) -> None:
    rules = parse_relabel_configs(raw, "t")
    assert relabel_program(labels, program(rules)) == process(labels, rules)


@settings(max_examples=600, deadline=None)
@given(
    raw=st.lists(rule_strategy(), min_size=1, max_size=5),
    sets=st.lists(labels_strategy, max_size=4),
)
def test_compiled_loop_on_its_own_memos(
    raw: list[dict[str, Any]], sets: list[list[tuple[str, str]]]
) -> None:
    """The same rules parsed twice (each with its own memos): the compiled loop computes every
    outcome itself (its fallbacks), the pure engine its own; the results agree, first from
    the fallbacks and then from what they remembered."""
    compiled_rules, pure_rules = make_rules(raw), make_rules(raw)
    if compiled_rules is None or pure_rules is None:
        return
    for pairs in sets + sets:
        labels = tuple(pairs)
        try:
            got: Any = relabel_program(labels, program(compiled_rules))
        except Exception as exc:  # the same error either way
            with pytest.raises(type(exc)):
                process(labels, pure_rules)
            continue
        assert got == process(labels, pure_rules)


# id, regex, replacement, source value, what target "t" gets (None: not set) — the compiled
# loop's fallback for a fixed target and a replacement of one group, on fresh memos
FALLBACK_CASES = [
    ("first_group", "(p)(.*)", "$1", "p1-a", "p"),
    ("second_group", "(.*)-([0-9a-z]+)", "$2", "ab-c-d", "d"),
    ("group_before_a_dash", "(.*)-[0-9a-z]+", "$1", "train-job-7f9c2", "train-job"),
    ("whole_match", "(p)(.*)", "$0", "p1-a", "p1-a"),
    ("group_that_took_no_part", "(x)?(.*)", "$1", "abc", None),  # "" deletes the target
    ("no_match", "(p)(.*)", "$1", "m", None),
    ("non_ascii_value", "(é)(.*)", "$2", "é-1", "-1"),
    ("braced_group", "(p)(.*)", "${2}", "p1-a", "1-a"),
]


@pytest.mark.parametrize(
    ("regex", "replacement", "value", "want"),
    [c[1:] for c in FALLBACK_CASES],
    ids=[c[0] for c in FALLBACK_CASES],
)
def test_replace_fallback_outcomes(regex: str, replacement: str, value: str, want: Any) -> None:
    raw = [
        {"source_labels": ["pod"], "target_label": "t", "regex": regex, "replacement": replacement}
    ]
    compiled_rules, pure_rules = parse_relabel_configs(raw, "t"), parse_relabel_configs(raw, "t")
    labels = (("pod", value),)
    expected = tuple(sorted({"pod": value, **({"t": want} if want is not None else {})}.items()))
    for _ in range(2):  # computed, then remembered
        assert relabel_program(labels, program(compiled_rules)) == expected
        assert process(labels, pure_rules) == expected
