"""The sender's external labels in ``rwrouter compare`` (:mod:`rwrouter.compare.external`):
how a self-hosted series is expected in the workspace, how the workspace's answer is keyed,
and the hint's labels."""

from __future__ import annotations

import pytest

from rwrouter.compare.answer import Labels
from rwrouter.compare.external import (
    ExternalLabels,
    labels_only_in_workspace,
    parse_external_label,
)
from rwrouter.compare.parity import compare
from rwrouter.compare.report import Outcome, QueryReport, format_report, side_stats

EXT = ExternalLabels((("prometheus", "sender"), ("region", "eu")))
GPU: Labels = (("__name__", "gpu_util"), ("gpu", "0"))


def rules(labels: Labels) -> Labels | None:
    """A stand-in for the router's rules: sends gpu_util with its labels as they are, but
    not a series of region "us"."""
    if dict(labels).get("region") == "us":
        return None
    return labels if dict(labels).get("__name__") == "gpu_util" else None


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        pytest.param("prometheus=demo", ("prometheus", "demo"), id="plain"),
        pytest.param("a=b=c", ("a", "b=c"), id="first_equals_splits"),
        pytest.param("a=", ("a", ""), id="empty_value"),
        pytest.param("gpu.model=H100", ("gpu.model", "H100"), id="utf8_name"),
    ],
)
def test_parse_external_label(text: str, pair: tuple[str, str]) -> None:
    assert parse_external_label(text) == pair


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("prometheus", id="no_equals"),
        pytest.param("=x", id="empty_name"),
        pytest.param("__name__=x", id="metric_name"),
    ],
)
def test_parse_external_label_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_external_label(text)


@pytest.mark.parametrize(
    ("labels", "target"),
    [
        pytest.param(GPU, GPU, id="added_then_stripped"),
        pytest.param(
            (*GPU, ("region", "us")), None, id="a_label_of_the_series_wins_and_the_rules_see_it"
        ),
        pytest.param(
            (*GPU, ("prometheus", "other")),
            (*GPU, ("prometheus", "other")),
            id="another_value_is_kept",
        ),
        pytest.param((("__name__", "node_load1"),), None, id="not_migrated"),
        pytest.param(
            (("gpu", "0"), ("prometheus", "sender")), (("gpu", "0"),), id="no_name_only_stripped"
        ),
        pytest.param((("gpu", "0"),), (("gpu", "0"),), id="aggregation_as_it_is"),
    ],
)
def test_expected(labels: Labels, target: Labels | None) -> None:
    seen: list[Labels] = []

    def inner(labels: Labels) -> Labels | None:
        seen.append(labels)
        return rules(labels)

    assert EXT.expected(inner)(labels) == target
    if "__name__" in dict(labels):  # the rules saw the label set the sender sends
        assert dict(seen[0])["prometheus"] == dict(labels).get("prometheus", "sender")


@pytest.mark.parametrize(
    ("answer", "keys"),
    [
        pytest.param({(*GPU, ("prometheus", "sender")): {}}, [GPU], id="stripped"),
        pytest.param(
            {GPU: {}, (*GPU, ("prometheus", "sender")): {}},
            [GPU, (*GPU, ("prometheus", "sender"))],
            id="two_that_would_become_one_keep_their_labels",
        ),
        pytest.param({(*GPU, ("region", "us")): {}}, [(*GPU, ("region", "us"))], id="other_value"),
    ],
)
def test_keyed(answer: dict[Labels, dict[int, float]], keys: list[Labels]) -> None:
    assert sorted(EXT.keyed(answer)) == sorted(keys)


@pytest.mark.parametrize(
    ("in_workspace_only", "in_self_hosted_only", "hint"),
    [
        pytest.param(
            [(*GPU, ("prometheus", "s")), (("__name__", "x"), ("prometheus", "s"))],
            [GPU],
            (("prometheus", "s"),),
            id="common_to_all",
        ),
        pytest.param(
            [(*GPU, ("prometheus", "s")), (*GPU, ("prometheus", "t"))], [GPU], (), id="differs"
        ),
        pytest.param(
            [(*GPU, ("prometheus", "s"))], [(*GPU, ("prometheus", "t"))], (), id="both_have_it"
        ),
        pytest.param([(*GPU, ("prometheus", "s"))], [], (), id="nothing_missing_there"),
        pytest.param([], [GPU], (), id="nothing_missing_here"),
    ],
)
def test_labels_only_in_workspace(
    in_workspace_only: list[Labels], in_self_hosted_only: list[Labels], hint: Labels
) -> None:
    assert labels_only_in_workspace(in_workspace_only, in_self_hosted_only) == hint


@pytest.mark.parametrize(
    ("workspace_extra", "hint"),
    [
        pytest.param(
            ("prometheus", "demo sender"),
            "compare with --external-label 'prometheus=demo sender'",
            id="quoted_for_the_shell",
        ),
        pytest.param(("gpu", "1"), None, id="a_label_both_have_is_no_hint"),
        pytest.param(
            ("prometheus", "a\nrwrouter compare fake"),
            "compare with --external-label NAME=VALUE for each",
            id="a_newline_is_not_pasted",
        ),
    ],
)
def test_the_report_hints_at_the_flag(workspace_extra: tuple[str, str], hint: str | None) -> None:
    mine = {GPU: {1000: 1.0}}
    theirs = {tuple(sorted((*GPU[:1], workspace_extra))): {1000: 1.0}}
    parity = compare(mine, theirs, tolerance=0.0)
    r = QueryReport(
        query="gpu_util",
        start=0.0,
        end=60.0,
        step=15.0,
        self_hosted=side_stats([Outcome(0.1)]),
        workspace=side_stats([Outcome(0.1)]),
        parity=parity,
        urls={},
    )
    text = format_report([r], tolerance=0.0, summary="s")
    assert ("hint:" in text) == (hint is not None) and (hint is None or hint in text), text
    assert not any(line.startswith("rwrouter compare fake") for line in text.splitlines())


def test_a_self_hosted_store_that_has_the_label_too() -> None:
    """A federating self-hosted store holds the external label as the workspace does: a series
    the rules do not send is unexpected in the workspace, not missing in the self-hosted."""
    kept, dropped = (("__name__", "up"), ("job", "kept")), (("__name__", "up"), ("job", "x"))
    p = ("prometheus", "sender")
    self_hosted = {tuple(sorted((*kept, p))): {1: 1.0}, tuple(sorted((*dropped, p))): {1: 1.0}}
    workspace = dict(self_hosted)

    def rules(labels: Labels) -> Labels | None:
        return labels if ("job", "kept") in labels else None

    parity = compare(
        EXT.keyed(self_hosted), EXT.keyed(workspace), tolerance=0.0, expected=EXT.expected(rules)
    )
    assert parity.series_compared == 1 and not parity.missing_in_self_hosted
    assert parity.unexpected_in_workspace == (dropped,)
