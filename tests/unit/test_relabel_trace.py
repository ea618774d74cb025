"""relabel.trace: the engine rule by rule (the relabel debugger) ends where process() ends."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.relabel import Action, RelabelConfig, parse_relabel_configs, process, trace
from tests.unit.test_relabel_engine import CASES

Labels = tuple[tuple[str, str], ...]


def _final(rules: list[RelabelConfig], labels: dict[str, str]) -> Labels | None:
    """What trace says the rules leave: None when the last step dropped."""
    steps = trace(rules, labels)
    if not steps:
        return tuple(sorted(labels.items()))
    return steps[-1].labels if steps[-1].kept else None


@pytest.mark.parametrize(("rules", "labels"), [c[1:3] for c in CASES], ids=[c[0] for c in CASES])
def test_trace_ends_with_process_result(
    rules: list[dict[str, Any]], labels: dict[str, str]
) -> None:
    compiled = list(parse_relabel_configs(rules, "rules"))
    assert _final(compiled, labels) == process(labels, compiled)


def test_engine_cases_cover_all_actions() -> None:
    used = {rule.get("action", "replace") for _, rules, _, _ in CASES for rule in rules}
    assert used == {a.value for a in Action}


STEP_CASES = [
    (
        "keep_then_labeldrop",
        [
            {"action": "keep", "source_labels": ["__name__"], "regex": "m"},
            {"action": "labeldrop", "regex": "a"},
        ],
        {"__name__": "m", "a": "1", "b": "2"},
        [(0, {"__name__": "m", "a": "1", "b": "2"}, True), (1, {"__name__": "m", "b": "2"}, True)],
    ),
    (
        "drop_stops_at_the_rule",
        [
            {"target_label": "x", "replacement": "y"},
            {"action": "drop", "source_labels": ["x"], "regex": "y"},
            {"target_label": "z", "replacement": "w"},
        ],
        {"__name__": "m"},
        [(0, {"__name__": "m", "x": "y"}, True), (1, {"__name__": "m", "x": "y"}, False)],
    ),
    ("no_rules_no_steps", [], {"__name__": "m"}, []),
]


@pytest.mark.parametrize(
    ("rules", "labels", "expected"), [c[1:] for c in STEP_CASES], ids=[c[0] for c in STEP_CASES]
)
def test_trace_steps(
    rules: list[dict[str, Any]],
    labels: dict[str, str],
    expected: list[tuple[int, dict[str, str], bool]],
) -> None:
    compiled = parse_relabel_configs(rules, "rules")
    steps = trace(compiled, labels)
    assert [(s.index, dict(s.labels), s.kept) for s in steps] == expected
    assert [s.rule for s in steps] == list(compiled[: len(steps)])
    assert labels == dict(labels)  # input untouched


# A pool of rules across the 11 actions; hypothesis chains them on random label sets.
POOL = parse_relabel_configs(
    [
        {"source_labels": ["a"], "regex": "(.)(.*)", "target_label": "b", "replacement": "$2$1"},
        {"source_labels": ["a", "b"], "target_label": "${1}", "regex": "([a-z]+);.*"},
        {"target_label": "c", "replacement": ""},
        {"action": "keep", "source_labels": ["a"], "regex": ".*x.*|"},
        {"action": "drop", "source_labels": ["b"], "regex": "y.*"},
        {"action": "keepequal", "source_labels": ["a"], "target_label": "c"},
        {"action": "dropequal", "source_labels": ["a"], "target_label": "b"},
        {
            "action": "hashmod",
            "source_labels": ["__name__", "a"],
            "modulus": 7,
            "target_label": "h",
        },
        {"action": "labelmap", "regex": "([ab])", "replacement": "m_$1"},
        {"action": "labeldrop", "regex": "m_.*|h"},
        {"action": "labelkeep", "regex": "__name__|a|b|c|h"},
        {"action": "lowercase", "source_labels": ["a"], "target_label": "a"},
        {"action": "uppercase", "source_labels": ["b"], "target_label": "c"},
    ],
    "pool",
)

_names = st.sampled_from(["__name__", "a", "b", "c", "m_a", "h"])
_values = st.text(alphabet="xyzXY;é\n", max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    rules=st.lists(st.sampled_from(POOL), max_size=6),
    labels=st.dictionaries(_names, _values.filter(bool), max_size=5),
)
def test_trace_equals_process_on_random_chains(
    rules: list[RelabelConfig], labels: dict[str, str]
) -> None:
    assert _final(rules, labels) == process(labels, rules)
