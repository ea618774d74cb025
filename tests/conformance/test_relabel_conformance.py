"""Relabel conformance: a real Prometheus 3 (3.16, the peers cache) is the oracle for
``rwrouter.relabel`` and for what a real rwrouter process sends; Debian's Prometheus 2.42 is
compared too, where its answers are the same.

How (``relabel_harness.py``): one ``remote_write`` queue (Prometheus) or destination (rwrouter)
per rule set, each series written once with its index as the sample value, so every delivered
label set is traced back to its series. Runs:

- Prometheus 3 and rwrouter with ``global.metric_name_validation_scheme: utf8``: every rule
  set of ``relabel_tables.py`` over every series, UTF-8 label and metric names included (RW 1.0
  carries them as they are; Prometheus 3's receiver accepts them under either scheme).
- The same with ``legacy``, without the utf8-only rule sets (both refuse those at load:
  ``test_relabel_validation_conformance.py``).
- Prometheus 2.42 (no scheme key; its names are legacy): the rule sets and series without UTF-8
  names, compared with Prometheus 3 under ``legacy``.

rwrouter's one intended difference from Prometheus: it does not send a label set left without
``__name__`` or with an empty label name (counted as reason ``invalid``), nor an empty one
(reason ``relabel``); Prometheus 3 sends both. The engine alone matches Prometheus 3 exactly.

Where Prometheus 2.42 and 3.x differ (rwrouter follows 3.x; ``test_prometheus_2_42_*``):

- regexes: 3.x compiles ``^(?s:...)$``, 2.42 ``^(?:...)$`` — in 2.42 ``.`` does not match a
  newline, so ``(.*)`` does not match a value with one;
- a replace whose replacement expands to "": 3.x deletes the *expanded* target, 2.42 the
  target as written (``${1}``: no such label);
- labelmap when two names map to one: 3.14+ sets in ``labels.Builder.Range`` order (labels no
  earlier rule set or deleted, by name, then the labels earlier rules set, in the order set),
  2.42 in name order — the last one set wins;
- a series relabeled to no labels at all: 3.x sends it (an empty label set), 2.42 does not;
- UTF-8 names: 2.42 refuses them in rules (legacy names only) and its receiver drops series
  that have them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rwrouter.relabel import Action
from tests.conformance import relabel_tables as t
from tests.conformance.relabel_harness import (
    Outcomes,
    engine_outcomes,
    prometheus_outcomes,
    rwrouter_outcomes,
    sendable,
)
from tests.support.capture import CaptureServer
from tests.support.peers import peer_binary
from tests.support.series import LabelSet, label_set

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(180)]

#: Series without UTF-8 names come first: Prometheus 2.42 is fed this prefix, so a series has
#: the same index in every run.
LEGACY_NAMED_SERIES = [
    *t.COMMON_SERIES,
    *t.VERSION_DIFF_SERIES,
    *t.LABELMAP_ORDER_SERIES,
    *t.BENCHMARK_SERIES,
]
ALL_SERIES = [*LEGACY_NAMED_SERIES, *t.UTF8_SERIES]
P242_RULE_SETS = {
    **t.COMMON_RULE_SETS,
    **t.VERSION_DIFF_RULE_SETS,
    **t.LABELMAP_ORDER_RULE_SETS,
    **t.BENCHMARK_RULE_SETS,
}
LEGACY_RULE_SETS = {**P242_RULE_SETS, **t.SCHEME_RULE_SETS}
UTF8_RULE_SETS = {**LEGACY_RULE_SETS, **t.UTF8_RULE_SETS}
RUNS = {"utf8": UTF8_RULE_SETS, "legacy": LEGACY_RULE_SETS}
CASES = [(scheme, name) for scheme, rule_sets in RUNS.items() for name in rule_sets]

RouterResults = tuple[Outcomes, dict[str, float]]


@pytest.fixture(scope="module")
def capture() -> Iterator[CaptureServer]:
    with CaptureServer() as server:
        yield server


@pytest.fixture(scope="module")
def prometheus3() -> dict[str, Outcomes]:
    """What Prometheus 3 sent, per scheme (one process per scheme, its config's scheme)."""
    binary = peer_binary("prometheus")
    with CaptureServer() as capture:
        return {
            scheme: prometheus_outcomes(
                binary, capture, rule_sets, ALL_SERIES, prefix=f"p3-{scheme}", scheme=scheme
            )
            for scheme, rule_sets in RUNS.items()
        }


@pytest.fixture(scope="module")
def prometheus_2_42(capture: CaptureServer) -> Outcomes:
    return prometheus_outcomes(
        None, capture, P242_RULE_SETS, LEGACY_NAMED_SERIES, prefix="p2", scheme=None
    )


@pytest.fixture(scope="module")
def rwrouter(
    capture: CaptureServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, RouterResults]:
    return {
        scheme: rwrouter_outcomes(
            capture,
            rule_sets,
            ALL_SERIES,
            Path(tmp_path_factory.mktemp(f"router-{scheme}")),
            prefix=f"rw-{scheme}",
            scheme=scheme,
        )
        for scheme, rule_sets in RUNS.items()
    }


def test_tables_are_broad() -> None:
    used = {
        Action(rule.get("action", "replace").lower())
        for rules in t.COMMON_RULE_SETS.values()
        for rule in rules
    }
    assert used == set(Action)
    assert len(t.COMMON_RULE_SETS) >= 30 and len(UTF8_RULE_SETS) >= 70
    assert len({label_set(labels) for labels in ALL_SERIES}) == len(ALL_SERIES)
    assert not any(not name.isidentifier() for labels in LEGACY_NAMED_SERIES for name in labels)
    assert all(any(not name.isidentifier() for name in labels) for labels in t.UTF8_SERIES)


def _expected_from_rwrouter(prometheus: dict[int, LabelSet]) -> dict[int, LabelSet]:
    return {index: labels for index, labels in prometheus.items() if sendable(labels)}


@pytest.mark.parametrize(("scheme", "rule_set"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_rwrouter_matches_prometheus3(
    scheme: str,
    rule_set: str,
    prometheus3: dict[str, Outcomes],
    rwrouter: dict[str, RouterResults],
) -> None:
    from_prometheus = prometheus3[scheme][rule_set]
    expected = _expected_from_rwrouter(from_prometheus)
    actual, invalid = rwrouter[scheme][0][rule_set], rwrouter[scheme][1][rule_set]
    assert actual == expected, _diff(actual, expected)
    # What rwrouter refuses to send, but for empty label sets (reason relabel), is exactly
    # what it counts as invalid (one sample each).
    assert invalid == sum(
        1 for labels in from_prometheus.values() if labels and not sendable(labels)
    )


@pytest.mark.parametrize("scheme", list(RUNS))
def test_engine_matches_prometheus3(scheme: str, prometheus3: dict[str, Outcomes]) -> None:
    """The engine alone, before the router's filter of what it sends: exactly Prometheus 3,
    empty and nameless label sets included."""
    engine = engine_outcomes(RUNS[scheme], ALL_SERIES, scheme=scheme)
    for name in RUNS[scheme]:
        ours = {index: labels for index, labels in engine[name].items() if labels is not None}
        theirs = prometheus3[scheme][name]
        assert ours == theirs, f"{name}: {_diff(ours, theirs)}"


def _diff(ours: Mapping[int, LabelSet], theirs: Mapping[int, LabelSet]) -> str:
    lines = [
        f"series {i}: ours {ours.get(i)}\n    oracle {theirs.get(i)}"
        for i in sorted(set(ours) | set(theirs))
        if ours.get(i) != theirs.get(i)
    ]
    return "\n".join(lines)


def test_prometheus3_really_sent(
    prometheus3: dict[str, Outcomes], rwrouter: dict[str, RouterResults]
) -> None:
    """Guards the comparisons against being vacuous: everything arrived where nothing drops,
    UTF-8 names unchanged, and some results are ones rwrouter refuses to send."""
    for scheme in RUNS:
        copied = prometheus3[scheme]["replace_default_copy"]
        assert len(copied) == len(ALL_SERIES)
        odd = ALL_SERIES.index(t.UTF8_SERIES[3])
        assert dict(copied[odd]).items() >= t.UTF8_SERIES[3].items()
        assert sum(1 for sent in prometheus3[scheme].values() if sent) >= 60
        assert sum(1 for count in rwrouter[scheme][1].values() if count) >= 1


@pytest.mark.parametrize(
    "name", [*t.SCHEME_RULE_SETS, *t.UTF8_RULE_SETS, *t.LABELMAP_ORDER_RULE_SETS]
)
def test_new_rule_sets_change_something(name: str, prometheus3: dict[str, Outcomes]) -> None:
    sent = prometheus3["utf8"][name]
    assert any(sent.get(i) != label_set(labels) for i, labels in enumerate(ALL_SERIES)), name


SCHEME_DIFFERENCES = [
    # (rule set, series labels, utf8 result, legacy result): a replace's expanded target
    (
        "utf8_expanded_target",
        t.UTF8_SERIES[2],
        {**t.UTF8_SERIES[2], "a.b": "yes"},
        t.UTF8_SERIES[2],
    ),
    (
        "utf8_expanded_target_delete",
        t.UTF8_SERIES[2],
        {k: v for k, v in t.UTF8_SERIES[2].items() if k != "a.b"},
        t.UTF8_SERIES[2],
    ),
    (
        "replace_templated_target_invalid",
        t.COMMON_SERIES[0],
        {**t.COMMON_SERIES[0], "h:1": "x"},
        t.COMMON_SERIES[0],
    ),
]


@pytest.mark.parametrize(
    ("name", "series", "utf8", "legacy"), SCHEME_DIFFERENCES, ids=[c[0] for c in SCHEME_DIFFERENCES]
)
def test_prometheus3_checks_expanded_targets_under_its_scheme(
    name: str,
    series: dict[str, str],
    utf8: dict[str, str],
    legacy: dict[str, str],
    prometheus3: dict[str, Outcomes],
) -> None:
    index = ALL_SERIES.index(series)
    assert prometheus3["utf8"][name][index] == label_set(utf8)
    assert prometheus3["legacy"][name][index] == label_set(legacy)


# Prometheus 2.42 ---------------------------------------------------------------------------
def _documented_2_42_difference(name: str, index: int, ours: LabelSet | None) -> bool:
    """Whether a 2.42 answer may differ from 3.x's for this rule set and series (module
    docstring): newline values, the VERSION_DIFF and LABELMAP_ORDER rule sets, and empty
    label sets, which 2.42 does not send."""
    has_newline = any("\n" in value for value in LEGACY_NAMED_SERIES[index].values())
    return (
        has_newline
        or ours == ()
        or name in t.VERSION_DIFF_RULE_SETS
        or name in t.LABELMAP_ORDER_RULE_SETS
    )


def test_prometheus_2_42_agrees_except_where_documented(
    prometheus_2_42: Outcomes, prometheus3: dict[str, Outcomes]
) -> None:
    differing: set[str] = set()
    for name in P242_RULE_SETS:
        theirs, ours = prometheus_2_42[name], prometheus3["legacy"][name]
        for index in range(len(LEGACY_NAMED_SERIES)):
            if theirs.get(index) != ours.get(index):
                assert _documented_2_42_difference(name, index, ours.get(index)), (
                    f"{name} series {index}: 2.42 {theirs.get(index)}, 3.x {ours.get(index)}"
                )
                differing.add(name)
    # Every documented difference shows (or the documentation is stale).
    assert differing >= set(t.VERSION_DIFF_RULE_SETS)
    assert len(differing & set(t.LABELMAP_ORDER_RULE_SETS)) >= 4
    assert {"labeldrop_everything", "replace_lazy_trim"} <= differing


def _at(outcomes: Outcomes, name: str, series: dict[str, str]) -> LabelSet | None:
    return outcomes[name].get(ALL_SERIES.index(series))


def test_prometheus_2_42_dot_does_not_match_newline(
    prometheus_2_42: Outcomes, prometheus3: dict[str, Outcomes]
) -> None:
    newline = t.VERSION_DIFF_SERIES[0]
    assert _at(prometheus_2_42, "vd_dot_matches_newline", newline) is None  # dropped
    assert _at(prometheus3["legacy"], "vd_dot_matches_newline", newline) == label_set(newline)
    copied = label_set({**newline, "copy": newline["v"]})
    assert _at(prometheus_2_42, "vd_copy_newline_value", newline) == label_set(newline)
    assert _at(prometheus3["legacy"], "vd_copy_newline_value", newline) == copied


def test_prometheus_2_42_deletes_unexpanded_target_on_empty_replacement(
    prometheus_2_42: Outcomes, prometheus3: dict[str, Outcomes]
) -> None:
    series = t.VERSION_DIFF_SERIES[1]
    name = "vd_empty_replacement_expanded_target"
    assert _at(prometheus_2_42, name, series) == label_set(series)  # keeps a_b="present"
    assert _at(prometheus3["legacy"], name, series) == label_set(
        {"__name__": "vd_target", "sel": "a_b"}
    )


def test_prometheus_2_42_labelmap_sets_in_name_order(
    prometheus_2_42: Outcomes, prometheus3: dict[str, Outcomes]
) -> None:
    """``a_x`` set by an earlier rule: 3.x walks it after the untouched ``b_x`` (x = a_x's
    value), 2.42 walked by name (x = b_x's value)."""
    series = t.LABELMAP_ORDER_SERIES[0]
    name = "lm_set_walked_after_base"
    assert dict(_at(prometheus_2_42, name, series) or ())["x"] == "2"
    assert dict(_at(prometheus3["legacy"], name, series) or ())["x"] == "set"
    assert dict(_at(prometheus3["utf8"], name, series) or ())["x"] == "set"


def test_prometheus_2_42_does_not_send_empty_label_sets(
    prometheus_2_42: Outcomes, prometheus3: dict[str, Outcomes]
) -> None:
    assert prometheus_2_42["labeldrop_everything"] == {}
    assert set(prometheus3["legacy"]["labeldrop_everything"].values()) == {()}
