"""The typed enumerations (rwrouter.reasons and the enums beside the code that uses them):
their values are metric label values, log fields and config values, so they are pinned here;
each reason a metric counts is in its help text and in the configuration reference's metrics
table; and the reason of a final refusal by its status class (rwrouter.send.refusals.reason_of)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

import pytest

from rwrouter.config import EscapingScheme, Fsync, OnFull, OnSeriesLimit
from rwrouter.config.web import ClientAuth, Role
from rwrouter.metrics import Metrics
from rwrouter.reasons import (
    CLOSED_CONNECTION_REASONS,
    METADATA_DROP_REASONS,
    REFUSAL_REASONS,
    REFUSED_CONNECTION_REASONS,
    RETRY_LABELS,
    SAMPLE_DROP_REASONS,
    AuthReason,
    ConnectionReason,
    DropReason,
    FallbackReason,
    Reason,
    RefuseReason,
    RetryReason,
)
from rwrouter.relabel.names import ValidationScheme
from rwrouter.send.refusals import Kind, reason_of

PINNED: list[tuple[str, type[StrEnum], set[str]]] = [
    (
        "drop_reasons",
        DropReason,
        {
            "relabel",
            "invalid",
            "name_collision",
            "filtered",
            "ha_replica",
            "series_limit",
            "queue_full",
            "too_large",
            "drop_oldest",
            "corrupt",
            "too_old",
            "retry_budget",
            "not_written",
            "orphan_exemplar",
            "book_full",
            "0xx",
            "1xx",
            "3xx",
            "4xx",
            "5xx",
            "refused",
        },
    ),
    (
        "refuse_reasons",
        RefuseReason,
        {
            "decode",
            "bad_request",
            "tenant",
            "slow_body",
            "too_large",
            "unsupported",
            "client_gone",
            "queue_full",
            "busy",
            "storage",
            "read_wait",
        },
    ),
    ("connection_reasons", ConnectionReason, {"max_connections", "header_timeout", "idle_timeout"}),
    ("retry_reasons", RetryReason, {"network", "5xx", "429", "4xx", "credential_refresh"}),
    ("fallback_reasons", FallbackReason, {"415", "nothing_written"}),
    ("web_roles", Role, {"write", "read", "admin"}),
    (
        "client_auth_types",
        ClientAuth,
        {
            "NoClientCert",
            "RequestClientCert",
            "RequireAnyClientCert",
            "VerifyClientCertIfGiven",
            "RequireAndVerifyClientCert",
        },
    ),
    ("auth_reasons", AuthReason, {"missing", "wrong", "forbidden", "client_cert", "lifecycle"}),
    ("kinds", Kind, {"samples", "metadata"}),
    ("on_full", OnFull, {"backpressure", "drop_oldest"}),
    ("on_series_limit", OnSeriesLimit, {"fallback", "drop"}),
    ("fsync", Fsync, {"always", "interval"}),
    ("escaping_schemes", EscapingScheme, {"allow-utf-8", "underscores", "dots", "values"}),
    ("validation_schemes", ValidationScheme, {"utf8", "legacy"}),
]


@pytest.mark.parametrize(("enum", "values"), [c[1:] for c in PINNED], ids=[c[0] for c in PINNED])
def test_values_are_the_label_values(enum: type[StrEnum], values: set[str]) -> None:
    assert {member.value for member in enum} == values
    for member in enum:  # a member is its value wherever a string is
        assert member == member.value and str(member) == f"{member}" == member.value


# id, metric family (without _total), the reasons its ``reason`` label takes
COUNTED: list[tuple[str, str, Sequence[Reason]]] = [
    ("samples_dropped", "rwrouter_samples_dropped", SAMPLE_DROP_REASONS),
    ("metadata_dropped", "rwrouter_metadata_dropped", METADATA_DROP_REASONS),
    ("rejected_batches", "rwrouter_rejected_batches", REFUSAL_REASONS),
    ("refused_requests", "rwrouter_refused_requests", list(RefuseReason)),
    ("retries", "rwrouter_retries", RETRY_LABELS),
    ("protocol_fallbacks", "rwrouter_protocol_fallbacks", list(FallbackReason)),
    ("auth_failures", "rwrouter_auth_failures", list(AuthReason)),
    ("connections_refused", "rwrouter_connections_refused", REFUSED_CONNECTION_REASONS),
    ("connections_closed", "rwrouter_connections_closed", CLOSED_CONNECTION_REASONS),
]
REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _help(family: str) -> str:
    for metric in Metrics().registry.collect():
        if metric.name == family:
            return metric.documentation
    raise LookupError(family)


@pytest.mark.parametrize(
    ("family", "reasons"), [c[1:] for c in COUNTED], ids=[c[0] for c in COUNTED]
)
def test_each_counted_reason_is_described_in_the_help(
    family: str, reasons: Sequence[Reason]
) -> None:
    text = _help(family)
    for reason in reasons:
        assert reason.description, f"{reason!r} has no description"
        assert f"{reason.value} ({reason.description})" in text


@pytest.mark.parametrize(
    ("family", "reasons"), [c[1:] for c in COUNTED], ids=[c[0] for c in COUNTED]
)
def test_each_counted_reason_is_in_the_reference(family: str, reasons: Sequence[Reason]) -> None:
    rows = [
        line
        for line in REFERENCE.read_text(encoding="utf-8").splitlines()
        if line.startswith(f"| `{family}_total` |")
    ]
    assert len(rows) == 1, f"{family}: one row in the metrics table of {REFERENCE.name}"
    named = set(re.findall(r"`([^`]+)`", rows[0]))
    missing = [r.value for r in reasons if r.value not in named]
    assert not missing, f"{family}: {missing} not in its row of {REFERENCE.name}"


def test_reason_members_are_their_values_with_a_description() -> None:
    member = DropReason("relabel")  # looked up by value, as a label value read back
    assert member is DropReason.RELABEL and member.description
    assert RetryReason("5xx").description == ""  # not a label value: no description needed


REASON_OF = [
    # id, status, reason
    ("no_answer", None, DropReason.REFUSED),
    ("below_100", 99, DropReason.NOT_HTTP),
    ("zero", 0, DropReason.NOT_HTTP),
    ("1xx", 103, DropReason.INFORMATIONAL),
    ("3xx", 302, DropReason.REDIRECTION),
    ("400", 400, DropReason.CLIENT_ERROR),
    ("429", 429, DropReason.CLIENT_ERROR),
    ("499", 499, DropReason.CLIENT_ERROR),
    ("5xx", 503, DropReason.SERVER_ERROR),
    ("above_599", 700, DropReason.SERVER_ERROR),
]


@pytest.mark.parametrize(
    ("status", "reason"), [c[1:] for c in REASON_OF], ids=[c[0] for c in REASON_OF]
)
def test_reason_of_a_final_refusal(status: int | None, reason: DropReason) -> None:
    assert reason_of(status) is reason


@pytest.mark.parametrize("status", [200, 204, 299], ids=lambda s: str(s))
def test_a_2xx_is_no_refusal(status: int) -> None:
    with pytest.raises(ValueError, match="not a refusal"):
        reason_of(status)
