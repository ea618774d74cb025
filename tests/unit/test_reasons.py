"""The typed enumerations (rwrouter.reasons and the enums beside the code that uses them):
their values are metric label values, log fields and config values, so they are pinned here;
and the reason of a final refusal by its status class (rwrouter.send.refusals.reason_of)."""

from __future__ import annotations

from enum import StrEnum

import pytest

from rwrouter.config import EscapingScheme, Fsync, OnFull
from rwrouter.reasons import DropReason, RefuseReason
from rwrouter.relabel.names import ValidationScheme
from rwrouter.send.encoding import FallbackReason
from rwrouter.send.refusals import Kind, reason_of
from rwrouter.send.retry import RetryReason

PINNED: list[tuple[str, type[StrEnum], set[str]]] = [
    (
        "drop_reasons",
        DropReason,
        {
            "relabel",
            "invalid",
            "name_collision",
            "filtered",
            "queue_full",
            "too_large",
            "drop_oldest",
            "corrupt",
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
            "slow_body",
            "too_large",
            "unsupported",
            "client_gone",
            "queue_full",
            "busy",
            "storage",
        },
    ),
    ("retry_reasons", RetryReason, {"network", "5xx", "429", "4xx", "credential_refresh"}),
    ("fallback_reasons", FallbackReason, {"415", "nothing_written"}),
    ("kinds", Kind, {"samples", "metadata"}),
    ("on_full", OnFull, {"backpressure", "drop_oldest"}),
    ("fsync", Fsync, {"always", "interval"}),
    ("escaping_schemes", EscapingScheme, {"allow-utf-8", "underscores", "dots", "values"}),
    ("validation_schemes", ValidationScheme, {"utf8", "legacy"}),
]


@pytest.mark.parametrize(("enum", "values"), [c[1:] for c in PINNED], ids=[c[0] for c in PINNED])
def test_values_are_the_label_values(enum: type[StrEnum], values: set[str]) -> None:
    assert {member.value for member in enum} == values
    for member in enum:  # a member is its value wherever a string is
        assert member == member.value and str(member) == f"{member}" == member.value


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
