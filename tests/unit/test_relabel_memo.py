"""The relabel engine's per-rule memory of outcomes (``RelabelConfig.memo``): a rule that has
seen a value gives the same outcome a rule that never did (a fresh copy of it, so nothing is
remembered), whatever the order of the values and past the memo's bound."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.relabel import engine as engine_module
from rwrouter.relabel import parse_relabel_configs, process
from rwrouter.relabel.rules import RelabelConfig

# id, rules: each remembers by source value (replace, hashmod) or label name (labelmap)
MEMO_RULES: list[tuple[str, list[dict[str, Any]]]] = [
    ("replace_copy", [{"source_labels": ["pod"], "target_label": "workload"}]),
    (
        "replace_regex_groups",
        [
            {
                "source_labels": ["pod"],
                "regex": "(.*)-([0-9a-z]+)",
                "target_label": "w_$2",
                "replacement": "$1",
            }
        ],
    ),
    (
        "replace_invalid_target_legacy",  # "$1" expands to a name legacy refuses: no change
        [{"source_labels": ["pod"], "regex": "(.*)", "target_label": "$1", "replacement": "x"}],
    ),
    (
        "replace_to_empty_deletes",
        [{"source_labels": ["pod"], "regex": "p1.*", "target_label": "gpu", "replacement": ""}],
    ),
    (
        "replace_two_sources",
        [{"source_labels": ["pod", "gpu"], "separator": "/", "target_label": "where"}],
    ),
    (
        "hashmod",
        [{"source_labels": ["pod"], "target_label": "shard", "modulus": 7, "action": "hashmod"}],
    ),
    ("labelmap", [{"regex": "(p.*)", "replacement": "copy_$1", "action": "labelmap"}]),
    (
        "chain",
        [
            {"source_labels": ["pod"], "regex": "(.*)-[0-9a-z]+", "target_label": "workload"},
            {"regex": "(w.*)", "replacement": "x_$1", "action": "labelmap"},
            {
                "source_labels": ["workload"],
                "target_label": "shard",
                "modulus": 3,
                "action": "hashmod",
            },
            {"regex": "gpu", "action": "labeldrop"},
        ],
    ),
]

labels_strategy = st.dictionaries(
    st.sampled_from(["__name__", "pod", "gpu", "pa", "w"]),
    st.sampled_from(["", "m", "p1-a", "p1-b", "p2", "0", "1", "ab-c-d", "é-1"]),
)


def fresh(rules: tuple[RelabelConfig, ...]) -> tuple[RelabelConfig, ...]:
    """Copies of ``rules`` with empty memos."""
    return tuple(dataclasses.replace(rule) for rule in rules)


@pytest.mark.parametrize("raw", [r for _, r in MEMO_RULES], ids=[n for n, _ in MEMO_RULES])
@settings(max_examples=150, deadline=None)
@given(sets=st.lists(labels_strategy, min_size=1, max_size=12))
def test_remembered_outcomes_are_those_of_a_fresh_rule(
    raw: list[dict[str, Any]], sets: list[dict[str, str]]
) -> None:
    scheme = "legacy" if "invalid_target" in str(raw) else "utf8"
    rules = parse_relabel_configs(raw, "t", scheme=scheme)
    for labels in sets + sets:  # every set twice: the second time from the memo
        present = {k: v for k, v in labels.items() if v}
        assert process(present, rules) == process(present, fresh(rules))


def test_the_memo_is_bounded_and_stays_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "RULE_MEMO", 8)
    rules = parse_relabel_configs([r for _, raw in MEMO_RULES[-1:] for r in raw], "t")
    rng = random.Random(3)
    for _ in range(400):
        labels = {"__name__": "m", "pod": f"job{rng.randrange(40)}-{rng.randrange(5)}"}
        assert process(labels, rules) == process(labels, fresh(rules))
    assert all(len(rule.memo) <= 8 for rule in rules)
    assert any(rule.memo for rule in rules)  # it is used


def test_equal_rules_compare_equal_whatever_they_remember() -> None:
    (a,) = parse_relabel_configs(
        [{"source_labels": ["pod"], "target_label": "w", "regex": "p(.*)"}], "t"
    )
    (b,) = parse_relabel_configs(
        [{"source_labels": ["pod"], "target_label": "w", "regex": "p(.*)"}], "t"
    )
    process({"pod": "p1"}, (a,))
    assert a.memo and not b.memo
    assert a == b and hash(a) == hash(b)


# id, rule, whether it copies its source value (applied without the regex or the memo)
COPY_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("default_replace", {"source_labels": ["pod"], "target_label": "w"}, True),
    (
        "explicit_default_regex",
        {"source_labels": ["pod"], "regex": "(.*)", "target_label": "w"},
        True,
    ),
    ("target_template", {"source_labels": ["pod"], "target_label": "w_$1"}, False),
    (
        "replacement_not_the_group",
        {"source_labels": ["pod"], "target_label": "w", "replacement": "x$1"},
        False,
    ),
    ("other_regex", {"source_labels": ["pod"], "regex": "(.+)", "target_label": "w"}, False),
    (
        "hashmod",
        {"action": "hashmod", "source_labels": ["pod"], "target_label": "w", "modulus": 2},
        False,
    ),
]


@pytest.mark.parametrize(
    ("rule", "copies"), [c[1:] for c in COPY_CASES], ids=[c[0] for c in COPY_CASES]
)
def test_copy_rules_apply_without_the_memo(rule: dict[str, Any], copies: bool) -> None:
    (parsed,) = parse_relabel_configs([rule], "t")
    assert parsed.copies_source is copies
    (by_regex,) = parse_relabel_configs([rule], "t")
    object.__setattr__(by_regex, "copies_source", False)  # the regex and memo path
    for value in ("p1", "", "a\nb"):  # the dot-all regex copies a newline too
        labels = {"pod": value, "__name__": "m"}
        assert process(labels, (parsed,)) == process(labels, (by_regex,))
    assert not parsed.memo or not copies


# id, labeldrop/labelkeep regex text, the names it matches exactly (None: a real regex)
LITERAL_CASES = [
    ("two_names", "UUID|Hostname", ("UUID", "Hostname")),
    ("one_name", "gpu", ("gpu",)),
    ("colon_and_underscore", "job:x_1", ("job:x_1",)),
    ("repeated_name_once", "a|a", ("a",)),
    ("dot_is_regex", "a.b", None),
    ("empty_regex", "", None),
    ("empty_alternative", "a||b", None),
    ("group", "(a|b)", None),
    ("non_ascii", "é", None),
    ("class", "[ab]", None),
    ("case_flag", "(?i)a", None),
    ("dash", "a-b", None),
]


@pytest.mark.parametrize(
    ("text", "names"), [c[1:] for c in LITERAL_CASES], ids=[c[0] for c in LITERAL_CASES]
)
def test_literal_names(text: str, names: tuple[str, ...] | None) -> None:
    assert engine_module.literal_names(text) == names
    if names is not None:  # RE2 agrees: exactly these names match
        (rule,) = parse_relabel_configs([{"action": "labeldrop", "regex": text}], "t")
        for name in (*names, names[0] + "x", "x" + names[0], names[0].lower() + "Z"):
            assert rule.regex.matches(name) == (name in names), name
