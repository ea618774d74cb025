"""The loss reasons (``rwrouter.reasons.SAMPLE_LOSS_REASONS``) are what the operator-facing
files say they are, so that they cannot drift from the code: the example alert
``RwrouterSamplesDropped`` (deploy/prometheus/alerts.yaml) matches exactly them, the
dashboard's "lost" panel shows exactly them and its "kept out" panel the rest, and the
runbook explains each drop reason left out of the alert."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rwrouter.reasons import SAMPLE_DROP_REASONS, SAMPLE_LOSS_REASONS

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "rwrouter.json"
RUNBOOK = ROOT / "docs" / "runbook.md"

LOSSES = {r.value for r in SAMPLE_LOSS_REASONS}
NOT_LOSSES = {r.value for r in SAMPLE_DROP_REASONS} - LOSSES
_DROPPED = re.compile(r"rwrouter_samples_dropped_total\{([^}]*)\}")


def reason_matchers(expr: str) -> list[tuple[str, set[str]]]:
    """(operator, alternatives) of each ``reason`` matcher of the
    ``rwrouter_samples_dropped_total`` selectors in ``expr`` (``("", set())``: a selector
    without one)."""
    found = []
    for selector in _DROPPED.findall(expr):
        match = re.search(r'\breason\s*(=~|!~|=|!=)\s*"([^"]*)"', selector)
        found.append(("", set()) if match is None else (match[1], set(match[2].split("|"))))
    return found


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        pytest.param('x{reason=~"a|b"}', [], id="another_metric"),
        pytest.param(
            'rate(rwrouter_samples_dropped_total{job="r", reason=~"a|b"}[5m])',
            [("=~", {"a", "b"})],
            id="regex",
        ),
        pytest.param(
            'rwrouter_samples_dropped_total{reason!~"a"} + rwrouter_samples_dropped_total{}',
            [("!~", {"a"}), ("", set())],
            id="negative_and_none",
        ),
    ],
)
def test_reason_matchers_reads_each_selector(
    expr: str, expected: list[tuple[str, set[str]]]
) -> None:
    # Guards the checks below.
    assert reason_matchers(expr) == expected


def test_loss_reasons_are_sample_drop_reasons() -> None:
    drop_reasons = {r.value for r in SAMPLE_DROP_REASONS}
    assert not LOSSES - drop_reasons
    assert len(LOSSES) == len(SAMPLE_LOSS_REASONS)  # no reason listed twice
    assert {"relabel", "too_old", "queue_full"} <= NOT_LOSSES
    assert {"not_written", "5xx", "refused", "0xx", "1xx", "4xx"} <= LOSSES


def _rule(name: str) -> dict[str, Any]:
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    (rule,) = [r for g in groups for r in g["rules"] if r.get("alert") == name]
    assert isinstance(rule, dict)
    return rule


def test_samples_dropped_alert_matches_exactly_the_loss_reasons() -> None:
    matchers = reason_matchers(_rule("RwrouterSamplesDropped")["expr"])
    assert matchers == [("=~", LOSSES)], f"missing: {LOSSES - matchers[0][1]}"


def _panel_exprs() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]


DASHBOARD_CASES = [
    pytest.param("Samples lost /s", "=~", LOSSES, id="lost"),
    pytest.param("Samples kept out /s", "!~", LOSSES, id="kept_out"),
]


@pytest.mark.parametrize(("title", "operator", "reasons"), DASHBOARD_CASES)
def test_dashboard_panel_splits_losses_from_the_rest(
    title: str, operator: str, reasons: set[str]
) -> None:
    exprs = [e for t, e in _panel_exprs() if t.startswith(title)]
    assert len(exprs) == 1, title
    assert reason_matchers(exprs[0]) == [(operator, reasons)]


def test_no_dashboard_panel_mixes_losses_with_what_rules_keep_out() -> None:
    # Every sum of rwrouter_samples_dropped_total says which reasons it takes.
    unfiltered = [title for title, expr in _panel_exprs() if ("", set()) in reason_matchers(expr)]
    assert unfiltered == []


@pytest.mark.parametrize("reason", sorted(NOT_LOSSES))
def test_runbook_explains_each_reason_left_out_of_the_alert(reason: str) -> None:
    section = RUNBOOK.read_text(encoding="utf-8").split("\n## RwrouterSamplesDropped\n", 1)[1]
    left_out = section.split("\n## ", 1)[0].split("Not alerted on", 1)[1].split("**Confirm.**")[0]
    assert f"`{reason}`" in left_out
