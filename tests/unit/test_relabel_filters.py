"""Filter-only relabel rules (keep, drop, keepequal, dropequal): ``passes`` gives the same
answer as ``process``, and the remembered regex answers are RE2's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.relabel import FILTER_ACTIONS, parse_relabel_configs, passes, process
from rwrouter.relabel import rules as rules_module

FILTER_RULES = [
    ("keep_name", [{"action": "keep", "source_labels": ["__name__"], "regex": "DCGM_.*|up"}]),
    (
        "drop_two_labels",
        [{"action": "drop", "source_labels": ["job", "gpu"], "regex": "dcgm;[0-3]"}],
    ),
    ("keepequal", [{"action": "keepequal", "source_labels": ["a"], "target_label": "b"}]),
    ("dropequal", [{"action": "dropequal", "source_labels": ["a"], "target_label": "b"}]),
    (
        "keep_then_drop",
        [
            {"action": "keep", "source_labels": ["__name__"], "regex": ".+"},
            {"action": "drop", "source_labels": ["pod"], "regex": "p.*"},
        ],
    ),
]

labels_strategy = st.dictionaries(
    st.sampled_from(["__name__", "job", "gpu", "a", "b", "pod"]),
    st.sampled_from(["", "DCGM_X", "up", "dcgm", "0", "7", "p1", "x"]),
)


@pytest.mark.parametrize("raw", [r for _, r in FILTER_RULES], ids=[n for n, _ in FILTER_RULES])
@settings(max_examples=200, deadline=None)
@given(labels=labels_strategy)
def test_passes_agrees_with_process(raw: list[dict[str, Any]], labels: dict[str, str]) -> None:
    rules = parse_relabel_configs(raw, "t")
    assert all(rule.action in FILTER_ACTIONS for rule in rules)
    present = {k: v for k, v in labels.items() if v}
    assert passes(dict(present), rules) == (process(present, rules) is not None)


def test_remembered_answers_stay_right_past_the_memo_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rules_module, "MATCH_MEMO", 8)
    (rule,) = parse_relabel_configs(
        [{"action": "keep", "source_labels": ["__name__"], "regex": "m[0-9]*5"}], "t"
    )
    values = [f"m{i}" for i in range(40)] * 2
    assert [rule.regex.matches(v) for v in values] == [
        rule.regex.pattern.search(v) is not None for v in values
    ]
    assert len(rule.regex._matches) <= 8
