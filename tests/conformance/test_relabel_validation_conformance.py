"""Rule validation conformance: Prometheus 3 (3.16, the peers cache) loads or refuses each rule
of the unit tables as ``rwrouter.relabel`` does, under both name validation schemes.

One Prometheus runs for the module; each case is a config reload with one ``remote_write``
whose ``write_relabel_configs`` is the rule and whose ``global.metric_name_validation_scheme``
is the case's scheme. A reload Prometheus refuses answers 500 with the error; we compare
accept/refuse always, and the text where ours is Prometheus's (``Config.Validate`` and
``LabelName``/``Action`` unmarshalling; YAML and type errors are worded differently).

Known and kept: rwrouter refuses a float or boolean where a string goes (``separator: 1.5``),
which Go's YAML turns into the text as written; rwrouter cannot recover that text after
PyYAML parsed it (``relabel/rules.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from rwrouter.errors import ConfigError
from rwrouter.relabel import parse_relabel_configs
from tests.support.peers import peer_binary
from tests.support.prometheus import PrometheusProcess
from tests.unit.test_relabel_prometheus_cases import LEGACY_TARGET_CASES, VALIDATE_CASES
from tests.unit.test_relabel_rules import BAD, GOOD
from tests.unit.test_relabel_schemes import SCHEME_CASES

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(300)]

#: Parts of our reasons that are Prometheus's own texts.
PROMETHEUS_TEXTS = (
    "relabel action cannot be empty",
    "requires non-zero modulus",
    "requires 'target_label' value",
    "is invalid 'target_label' for",
    "can not be set for",
    "is invalid 'replacement' for",
    "requires only",
    "is not a valid label name",
    "unknown relabel action",
    "found invalid Unicode character escape code",
)
#: What rwrouter adds to Prometheus's text of a legacy-scheme refusal (which scheme refused).
SCHEME_HINT = " (global.metric_name_validation_scheme is legacy"
#: Accepted by Prometheus, refused by rwrouter on purpose (module docstring).
STRICTER = {"bad-separator_not_string"}

Case = tuple[str, Any]
CASES: list[Case] = [
    *[(f"bad-{c[0]}", c[1]) for c in BAD],
    *[(f"good-{c[0]}", c[1]) for c in GOOD],
    *[(f"scheme-{c[0]}", c[1]) for c in SCHEME_CASES],
    *[(f"prometheus-validate-{c[0]}", c[2]) for c in VALIDATE_CASES],
    *[
        (f"legacy-target-{i}", {"target_label": text})
        for i, (text, _) in enumerate(LEGACY_TARGET_CASES)
    ],
]


def _config(rule: Any, scheme: str) -> str:
    config = {
        "global": {"scrape_interval": "1h", "metric_name_validation_scheme": scheme},
        "remote_write": [
            {
                "url": "http://127.0.0.1:9/never",
                "write_relabel_configs": [rule],
                "metadata_config": {"send": False},
            }
        ],
    }
    return yaml.safe_dump(config, allow_unicode=True, sort_keys=False)


@pytest.fixture(scope="module")
def prometheus3() -> Iterator[PrometheusProcess]:
    with PrometheusProcess.start(
        _config({"action": "labeldrop", "regex": "x"}, "utf8"), binary=peer_binary("prometheus")
    ) as prom:
        yield prom


def _prometheus_error(prom: PrometheusProcess, rule: Any, scheme: str) -> str | None:
    """None when Prometheus loads the config, else its error."""
    try:
        prom.reload(_config(rule, scheme))
    except RuntimeError as exc:
        return str(exc)
    return None


def _our_error(rule: Any, scheme: str) -> str | None:
    try:
        parse_relabel_configs([rule], "remote_write[0].write_relabel_configs", scheme=scheme)
    except ConfigError as exc:
        return exc.reason
    return None


@pytest.mark.parametrize("scheme", ["utf8", "legacy"])
@pytest.mark.parametrize(("case", "rule"), CASES, ids=[c[0] for c in CASES])
def test_prometheus3_validates_as_we_do(
    case: str, rule: Any, scheme: str, prometheus3: PrometheusProcess
) -> None:
    theirs, ours = _prometheus_error(prometheus3, rule, scheme), _our_error(rule, scheme)
    if case in STRICTER:
        assert theirs is None and ours is not None
        return
    assert (theirs is None) == (ours is None), f"Prometheus: {theirs}\nrwrouter: {ours}"
    if ours is not None and theirs is not None:
        ours = ours.split(SCHEME_HINT)[0]  # our addition after Prometheus's own text
        for text in PROMETHEUS_TEXTS:
            if text in ours:
                expected = ours if text != PROMETHEUS_TEXTS[-1] else text
                assert expected in theirs, f"Prometheus: {theirs}\nrwrouter: {ours}"
