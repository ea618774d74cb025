"""The relabel engine, action by action (Prometheus relabel semantics, model/relabel/relabel.go)."""

from __future__ import annotations

from typing import Any

import pytest

from rwrouter.relabel import parse_relabel_configs, process

Case = tuple[str, list[dict[str, Any]], dict[str, str], dict[str, str] | None]

BASE = {"__name__": "m", "a": "foo", "b": "bar", "c": "baz"}

CASES: list[Case] = [
    # replace
    (
        "replace_default_copies",
        [{"source_labels": ["a"], "target_label": "d"}],
        BASE,
        {**BASE, "d": "foo"},
    ),
    (
        "replace_group",
        [{"source_labels": ["a"], "regex": "f(.*)", "target_label": "d", "replacement": "x${1}y"}],
        BASE,
        {**BASE, "d": "xooy"},
    ),
    (
        "replace_no_match_no_change",
        [{"source_labels": ["a"], "regex": "nope", "target_label": "d"}],
        BASE,
        BASE,
    ),
    (
        "replace_multi_source_separator",
        [
            {
                "source_labels": ["a", "b"],
                "separator": "/",
                "regex": "(.*)/(.*)",
                "target_label": "d",
                "replacement": "$2-$1",
            }
        ],
        BASE,
        {**BASE, "d": "bar-foo"},
    ),
    (
        "replace_missing_source_is_empty",
        [{"source_labels": ["zz", "a"], "regex": ";(.*)", "target_label": "d"}],
        BASE,
        {**BASE, "d": "foo"},
    ),
    (
        "replace_fast_path_constant",
        [{"target_label": "env", "replacement": "prod"}],
        BASE,
        {**BASE, "env": "prod"},
    ),
    (
        "replace_fast_path_deletes_target",
        [{"source_labels": ["zz"], "target_label": "a"}],
        BASE,
        {"__name__": "m", "b": "bar", "c": "baz"},
    ),
    (
        "replace_empty_replacement_deletes",
        [{"source_labels": ["a"], "target_label": "b", "replacement": ""}],
        BASE,
        {"__name__": "m", "a": "foo", "c": "baz"},
    ),
    (
        "replace_expanded_target",
        [
            {
                "source_labels": ["a"],
                "regex": "(f)(.*)",
                "target_label": "${1}_$2",
                "replacement": "v",
            }
        ],
        BASE,
        {**BASE, "f_oo": "v"},
    ),
    (
        "replace_expanded_target_empty_no_change",
        [{"source_labels": ["zz"], "regex": "(.*)", "target_label": "${1}", "replacement": "v"}],
        {"__name__": "m", "c": "1x"},
        {"__name__": "m", "c": "1x"},
    ),
    (
        "replace_expanded_empty_deletes_expanded_target",
        [{"source_labels": ["a"], "regex": "(.*)", "target_label": "${1}", "replacement": "$2"}],
        {"__name__": "m", "a": "b", "b": "x"},
        {"__name__": "m", "a": "b"},
    ),
    (
        "replace_sets_name",
        [
            {
                "source_labels": ["__name__"],
                "regex": "m",
                "target_label": "__name__",
                "replacement": "renamed",
            }
        ],
        BASE,
        {**BASE, "__name__": "renamed"},
    ),
    # keep / drop
    ("keep_match", [{"action": "keep", "source_labels": ["a"], "regex": "fo+"}], BASE, BASE),
    ("keep_no_match", [{"action": "keep", "source_labels": ["a"], "regex": "fo"}], BASE, None),
    ("drop_match", [{"action": "drop", "source_labels": ["__name__"], "regex": "m"}], BASE, None),
    ("drop_no_match", [{"action": "drop", "source_labels": ["a"], "regex": "x"}], BASE, BASE),
    (
        "drop_missing_label_matches_empty",
        [{"action": "drop", "source_labels": ["zz"], "regex": ""}],
        BASE,
        None,
    ),
    # keepequal / dropequal
    (
        "keepequal_equal",
        [{"action": "keepequal", "source_labels": ["a"], "target_label": "d"}],
        {**BASE, "d": "foo"},
        {**BASE, "d": "foo"},
    ),
    (
        "keepequal_differs",
        [{"action": "keepequal", "source_labels": ["a"], "target_label": "b"}],
        BASE,
        None,
    ),
    (
        "keepequal_both_missing",
        [{"action": "keepequal", "source_labels": ["x"], "target_label": "y"}],
        BASE,
        BASE,
    ),
    (
        "dropequal_equal",
        [{"action": "dropequal", "source_labels": ["a"], "target_label": "d"}],
        {**BASE, "d": "foo"},
        None,
    ),
    (
        "dropequal_differs",
        [{"action": "dropequal", "source_labels": ["a"], "target_label": "b"}],
        BASE,
        BASE,
    ),
    # hashmod
    (
        "hashmod_prometheus_value",
        [{"action": "hashmod", "source_labels": ["c"], "modulus": 1000, "target_label": "d"}],
        BASE,
        {**BASE, "d": "976"},
    ),
    (
        "hashmod_newline_value",
        [{"action": "hashmod", "source_labels": ["a"], "modulus": 1000, "target_label": "b"}],
        {"a": "foo\nbar"},
        {"a": "foo\nbar", "b": "734"},
    ),
    (
        "hashmod_empty_value",
        [{"action": "hashmod", "source_labels": ["zz"], "modulus": 10, "target_label": "d"}],
        BASE,
        {**BASE, "d": "8"},
    ),
    # labelmap
    (
        "labelmap_groups",
        [{"action": "labelmap", "regex": "(b.*)", "replacement": "bar_${1}"}],
        {"a": "foo", "b1": "bar", "b2": "baz"},
        {"a": "foo", "b1": "bar", "b2": "baz", "bar_b1": "bar", "bar_b2": "baz"},
    ),
    (
        "labelmap_strip_prefix",
        [{"action": "labelmap", "regex": "__meta_(.+)"}],
        {"__meta_x": "1", "__name__": "m"},
        {"__meta_x": "1", "__name__": "m", "x": "1"},
    ),
    (
        "labelmap_sees_labels_before_rule",
        [{"action": "labelmap", "regex": "(.*)", "replacement": "x${1}"}],
        {"a": "1"},
        {"a": "1", "xa": "1"},
    ),
    (
        "labelmap_to_existing_label_walked_later",
        [{"action": "labelmap", "regex": "(a)", "replacement": "b"}],
        {"a": "1", "b": "2"},
        {"a": "1", "b": "1"},
    ),
    (
        "labelmap_empty_name_result",
        [{"action": "labelmap", "regex": "x(.*)"}],
        {"__name__": "m", "x": "1"},
        {"": "1", "__name__": "m", "x": "1"},
    ),
    # labeldrop / labelkeep
    ("labeldrop", [{"action": "labeldrop", "regex": "b|c"}], BASE, {"__name__": "m", "a": "foo"}),
    (
        "labeldrop_name",
        [{"action": "labeldrop", "regex": "__name__"}],
        BASE,
        {"a": "foo", "b": "bar", "c": "baz"},
    ),
    ("labeldrop_default_regex_empties", [{"action": "labeldrop"}], BASE, {}),
    (
        "labelkeep",
        [{"action": "labelkeep", "regex": "__name__|a"}],
        BASE,
        {"__name__": "m", "a": "foo"},
    ),
    (
        "labelkeep_spec_case",
        [{"action": "labelkeep", "regex": "job|instance"}],
        {"__name__": "up", "instance": "h:1", "job": "a", "pod": "p"},
        {"instance": "h:1", "job": "a"},
    ),
    # lowercase / uppercase
    (
        "lowercase",
        [{"action": "lowercase", "source_labels": ["a", "b"], "target_label": "d"}],
        {"a": "FoO", "b": "ÄÖ"},
        {"a": "FoO", "b": "ÄÖ", "d": "foo;äö"},
    ),
    (
        "uppercase",
        [{"action": "uppercase", "source_labels": ["a"], "target_label": "a"}],
        {"a": "straße"},
        {"a": "STRAßE"},
    ),
    (
        "lowercase_empty_deletes",
        [{"action": "lowercase", "source_labels": ["zz"], "target_label": "a"}],
        BASE,
        {"__name__": "m", "b": "bar", "c": "baz"},
    ),
    # spec cases
    (
        "tags_substring_regex_no_match",
        [{"source_labels": ["tags"], "regex": ",app:(.*),", "target_label": "app"}],
        {"__name__": "m", "tags": ",env:stage,app:web,"},
        {"__name__": "m", "tags": ",env:stage,app:web,"},
    ),
    (
        "tags_prefixed_regex_matches",
        [{"source_labels": ["tags"], "regex": ".*,app:(.*),", "target_label": "app2"}],
        {"__name__": "m", "tags": ",env:stage,app:web,"},
        {"__name__": "m", "app2": "web", "tags": ",env:stage,app:web,"},
    ),
    (
        "missing_source_deletes_target",
        [{"source_labels": ["pod"], "target_label": "pod_name"}],
        {"__name__": "m", "pod_name": "d", "test": "c"},
        {"__name__": "m", "test": "c"},
    ),
    # chains and leftovers
    (
        "tmp_labels_kept",
        [{"source_labels": ["a"], "target_label": "__tmp_x"}],
        BASE,
        {**BASE, "__tmp_x": "foo"},
    ),
    (
        "chain_sees_previous_output",
        [
            {"source_labels": ["a"], "target_label": "__tmp_a"},
            {
                "source_labels": ["__tmp_a"],
                "regex": "(.)(.*)",
                "target_label": "first",
                "replacement": "$1",
            },
            {"action": "labeldrop", "regex": "__tmp.*"},
        ],
        BASE,
        {**BASE, "first": "f"},
    ),
    (
        "chain_drop_stops",
        [
            {"action": "drop", "source_labels": ["a"], "regex": "foo"},
            {"target_label": "x", "replacement": "y"},
        ],
        BASE,
        None,
    ),
    ("no_rules_sorts", [], {"z": "1", "a": "2"}, {"a": "2", "z": "1"}),
]


# labelmap, two names mapped to one target: the winner is the label Prometheus 3.14+'s
# labels.Builder.Range walks last — the base labels no earlier rule set or deleted, by name,
# then the labels earlier rules set, in the order first set (Prometheus 2.42 walked by name).
TO_X = {"action": "labelmap", "regex": "(.)_x", "replacement": "x"}
LABELMAP_ORDER_CASES: list[Case] = [
    ("base_only_by_name", [TO_X], {"a_x": "1", "b_x": "2"}, {"a_x": "1", "b_x": "2", "x": "2"}),
    (
        "set_label_walked_after_base",
        [{"target_label": "a_x", "replacement": "set"}, TO_X],
        {"b_x": "base"},
        {"a_x": "set", "b_x": "base", "x": "set"},
    ),
    (
        "changed_base_label_moves_last",
        [{"target_label": "a_x", "replacement": "new"}, TO_X],
        {"a_x": "1", "b_x": "2"},
        {"a_x": "new", "b_x": "2", "x": "new"},
    ),
    (
        "same_value_set_still_moves_last",
        [{"target_label": "a_x", "replacement": "1"}, TO_X],
        {"a_x": "1", "b_x": "2"},
        {"a_x": "1", "b_x": "2", "x": "1"},
    ),
    (
        "set_order_not_name_order",
        [
            {"target_label": "z_x", "replacement": "z"},
            {"target_label": "a_x", "replacement": "a"},
            TO_X,
        ],
        {"__name__": "m"},
        {"__name__": "m", "a_x": "a", "z_x": "z", "x": "a"},
    ),
    (
        "set_again_keeps_first_position",
        [
            {"target_label": "z_x", "replacement": "1"},
            {"target_label": "a_x", "replacement": "2"},
            {"target_label": "z_x", "replacement": "3"},
            TO_X,
        ],
        {"__name__": "m"},
        {"__name__": "m", "a_x": "2", "z_x": "3", "x": "2"},
    ),
    (
        "deleted_then_set_goes_last",
        [
            {"target_label": "z_x", "replacement": "1"},
            {"target_label": "a_x", "replacement": "2"},
            {"action": "labeldrop", "regex": "z_x"},
            {"target_label": "z_x", "replacement": "3"},
            TO_X,
        ],
        {"__name__": "m"},
        {"__name__": "m", "a_x": "2", "z_x": "3", "x": "3"},
    ),
    (
        "deleted_base_label_set_again_goes_last",
        [
            {"action": "labeldrop", "regex": "a_x"},
            {"target_label": "a_x", "replacement": "again"},
            TO_X,
        ],
        {"a_x": "1", "b_x": "2"},
        {"a_x": "again", "b_x": "2", "x": "again"},
    ),
    (
        "labelmap_results_in_walk_order",
        [{"action": "labelmap", "regex": "(.)_y", "replacement": "${1}_x"}, TO_X],
        {"b_y": "b", "a_y": "a"},
        {"a_y": "a", "b_y": "b", "a_x": "a", "b_x": "b", "x": "b"},
    ),
    (
        "labelmap_target_already_set_updated_in_place",
        [
            {"target_label": "x", "replacement": "0"},
            {"target_label": "b_x", "replacement": "b"},
            {"action": "labelmap", "regex": "(.)_x", "replacement": "x"},
        ],
        {"a_x": "a"},
        {"a_x": "a", "b_x": "b", "x": "b"},
    ),
    (
        "lowercase_hashmod_count_as_set",
        [
            {"action": "lowercase", "source_labels": ["b_x"], "target_label": "b_x"},
            {"action": "hashmod", "source_labels": ["b_x"], "modulus": 1, "target_label": "a_x"},
            TO_X,
        ],
        {"b_x": "B", "c_x": "c"},
        {"a_x": "0", "b_x": "b", "c_x": "c", "x": "0"},
    ),
]


@pytest.mark.parametrize(
    ("rules", "labels", "expected"),
    [c[1:] for c in CASES + LABELMAP_ORDER_CASES],
    ids=[c[0] for c in CASES + LABELMAP_ORDER_CASES],
)
def test_process(
    rules: list[dict[str, Any]], labels: dict[str, str], expected: dict[str, str] | None
) -> None:
    result = process(labels, parse_relabel_configs(rules, "rules"))
    if expected is None:
        assert result is None
    else:
        assert result == tuple(sorted(expected.items()))


MATCH_CASES = [
    # (id, regex, value, matches)
    ("substring_does_not_match", "GPU_UTIL", "X_GPU_UTIL_Y", False),
    ("exact_matches", "GPU_UTIL", "GPU_UTIL", True),
    ("alternation_stays_anchored_left", "a|b", "ab", False),
    ("alternation_stays_anchored_right", "a|b", "xb", False),
    ("alternation_whole_value", "a|b", "b", True),
    ("lazy_group_reaches_end", "(.*?)x", "axbx", True),
    ("dot_matches_newline", "a.b", "a\nb", True),
    ("dot_star_spans_lines", ".*", "line1\nline2", True),
    ("case_insensitive_flag", "(?i)gpu", "GPU", True),
    ("empty_regex_only_empty", "", "", True),
    ("empty_regex_not_value", "", "x", False),
    ("unicode_class", r"\p{Greek}+", "αβγ", True),
]


@pytest.mark.parametrize(
    ("regex", "value", "matches"), [c[1:] for c in MATCH_CASES], ids=[c[0] for c in MATCH_CASES]
)
def test_keep_regex_is_anchored_and_dotall(regex: str, value: str, matches: bool) -> None:
    rules = parse_relabel_configs([{"action": "keep", "source_labels": ["v"], "regex": regex}], "r")
    assert (process({"v": value}, rules) is not None) is matches


def test_lazy_group_captures_up_to_anchored_end() -> None:
    rules = parse_relabel_configs(
        [{"source_labels": ["v"], "regex": "(.*?)x(.*)", "target_label": "g"}], "r"
    )
    assert dict(process({"v": "axbx"}, rules) or ())["g"] == "a"
    rules = parse_relabel_configs(
        [{"source_labels": ["v"], "regex": "(.*?)x", "target_label": "g"}], "r"
    )
    assert dict(process({"v": "axbx"}, rules) or ())["g"] == "axb"


def test_process_does_not_modify_input_and_accepts_pairs() -> None:
    labels = {"a": "1"}
    rules = parse_relabel_configs([{"target_label": "a", "replacement": "2"}], "r")
    assert process(labels, rules) == (("a", "2"),)
    assert labels == {"a": "1"}
    assert process([("b", "1"), ("a", "0")], ()) == (("a", "0"), ("b", "1"))
