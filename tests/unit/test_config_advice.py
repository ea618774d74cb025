"""rwrouter.config.advice: what check-config warns about without refusing the file."""

from __future__ import annotations

import pytest

from rwrouter.config import parse_config
from rwrouter.config.advice import config_warnings

AGE = "remote_write[{i}].queue_config.sample_age_limit"
AGE_REASON = (
    "{limit} is not above batch_send_deadline ({deadline}): a batch that waits for its "
    "deadline holds samples that old when it is sent, and they are dropped (reason too_old); "
    "set sample_age_limit well above batch_send_deadline (e.g. 50m for the managed workspace)"
)


def _dest(queue: str, *, extra: str = "") -> str:
    return f"  - url: http://x:1/w\n    queue_config: {{{queue}}}\n{extra}"


CASES = [
    pytest.param(
        _dest("sample_age_limit: 2s"),
        [(AGE.format(i=0), AGE_REASON.format(limit="2s", deadline="5s"))],
        id="age-limit-below-the-default-deadline",
    ),
    pytest.param(
        _dest("sample_age_limit: 10s, batch_send_deadline: 10s"),
        [(AGE.format(i=0), AGE_REASON.format(limit="10s", deadline="10s"))],
        id="age-limit-equal-to-the-deadline",
    ),
    pytest.param(
        _dest("sample_age_limit: 6s"),
        [],
        id="age-limit-above-the-deadline",
    ),
    pytest.param(_dest("sample_age_limit: 0"), [], id="age-limit-off"),
    pytest.param(_dest("batch_send_deadline: 1m"), [], id="no-age-limit-long-deadline"),
    pytest.param(
        _dest("sample_age_limit: 50m") + _dest("sample_age_limit: 1s, batch_send_deadline: 2s"),
        [(AGE.format(i=1), AGE_REASON.format(limit="1s", deadline="2s"))],
        id="names-the-destination",
    ),
    pytest.param(
        "  - url: http://x:1/w\n"
        "  - {name: s, shadow: true, queue_config: {sample_age_limit: 1s}}\n",
        [],
        id="shadow-sends-nothing",
    ),
]


@pytest.mark.parametrize(("destinations", "expected"), CASES)
def test_config_warnings(destinations: str, expected: list[tuple[str, str]]) -> None:
    config = parse_config(f"remote_write:\n{destinations}", env={})  # valid: never refused
    found = config_warnings(config)
    assert [(w.path, w.reason) for w in found] == expected
    assert [str(w) for w in found] == [f"{path}: {reason}" for path, reason in expected]
