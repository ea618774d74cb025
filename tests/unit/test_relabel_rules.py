"""Relabel rule parsing and validation (Prometheus ``Config.Validate`` texts, our key paths).

The errors here do not depend on the name validation scheme: each case runs under both
(``tests/unit/test_relabel_schemes.py`` has the ones that do)."""

from __future__ import annotations

from typing import Any

import pytest

from rwrouter.errors import ConfigError
from rwrouter.relabel import DEFAULT, DEFAULT_REGEX, Action, RelabelConfig, parse_relabel_configs

P = "remote_write[1].write_relabel_configs"

# (id, rule, expected path, expected reason substring)
BAD: list[tuple[str, Any, str, str]] = [
    ("unknown_key", {"action": "keep", "regex": "a", "foo": 1}, f"{P}[0].foo", "unknown key"),
    ("not_a_mapping", "keep", f"{P}[0]", "expected a mapping"),
    ("unknown_action", {"action": "Explode"}, f"{P}[0].action", 'unknown relabel action "Explode"'),
    ("quoted_empty_action", {"action": ""}, f"{P}[0].action", 'unknown relabel action ""'),
    ("null_action", {"action": None}, f"{P}[0].action", "relabel action cannot be empty"),
    ("bad_regex", {"action": "keep", "regex": "a("}, f"{P}[0].regex", "error parsing regexp"),
    (
        "bad_regex_backreference",
        {"action": "keep", "regex": r"(a)\1"},
        f"{P}[0].regex",
        "error parsing regexp",
    ),
    (
        "any_byte_escape_go_refuses",
        {"action": "keep", "regex": r"a\C"},
        f"{P}[0].regex",
        "invalid escape sequence",
    ),
    (
        "source_labels_not_list",
        {"source_labels": "a", "target_label": "x"},
        f"{P}[0].source_labels",
        "expected a list",
    ),
    (
        "separator_not_string",
        {"separator": 1.5, "target_label": "x"},
        f"{P}[0].separator",
        "expected a string",
    ),
    (
        "modulus_negative",
        {"action": "hashmod", "modulus": -1, "target_label": "x"},
        f"{P}[0].modulus",
        "unsigned 64-bit",
    ),
    (
        "hashmod_zero_modulus",
        {"action": "hashmod", "target_label": "x"},
        f"{P}[0].modulus",
        "relabel configuration for hashmod requires non-zero modulus",
    ),
    (
        "replace_needs_target",
        {"source_labels": ["a"]},
        f"{P}[0].target_label",
        "relabel configuration for replace action requires 'target_label' value",
    ),
    (
        "hashmod_needs_target",
        {"action": "hashmod", "modulus": 2},
        f"{P}[0].target_label",
        "relabel configuration for hashmod action requires 'target_label' value",
    ),
    (
        "lowercase_needs_target",
        {"action": "lowercase"},
        f"{P}[0].target_label",
        "relabel configuration for lowercase action requires 'target_label' value",
    ),
    (
        "uppercase_needs_target",
        {"action": "uppercase"},
        f"{P}[0].target_label",
        "relabel configuration for uppercase action requires 'target_label' value",
    ),
    (
        "keepequal_needs_target",
        {"action": "keepequal"},
        f"{P}[0].target_label",
        "relabel configuration for keepequal action requires 'target_label' value",
    ),
    (
        "dropequal_needs_target",
        {"action": "dropequal"},
        f"{P}[0].target_label",
        "relabel configuration for dropequal action requires 'target_label' value",
    ),
    (
        "keepequal_replacement",
        {"action": "keepequal", "target_label": "a", "replacement": "x"},
        f"{P}[0].replacement",
        "'replacement' can not be set for keepequal action",
    ),
    (
        "uppercase_replacement",
        {"action": "uppercase", "target_label": "a", "replacement": "x"},
        f"{P}[0].replacement",
        "'replacement' can not be set for uppercase action",
    ),
    (
        "dropequal_regex",
        {"action": "dropequal", "target_label": "a", "regex": "(.*)"},
        f"{P}[0]",
        "dropequal action requires only 'source_labels' and `target_label`, and no other",
    ),
    (
        "keepequal_separator",
        {"action": "keepequal", "target_label": "a", "separator": ","},
        f"{P}[0]",
        "keepequal action requires only 'source_labels' and `target_label`",
    ),
    (
        "keepequal_modulus",
        {"action": "keepequal", "target_label": "a", "modulus": 3},
        f"{P}[0]",
        "keepequal action requires only",
    ),
    (
        "labeldrop_source_labels",
        {"action": "labeldrop", "source_labels": ["a"]},
        f"{P}[0]",
        "labeldrop action requires only 'regex', and no other fields",
    ),
    (
        "labelkeep_empty_source_labels",
        {"action": "labelkeep", "source_labels": []},
        f"{P}[0]",
        "labelkeep action requires only 'regex', and no other fields",
    ),
    (
        "labelkeep_target",
        {"action": "labelkeep", "target_label": "a"},
        f"{P}[0]",
        "labelkeep action requires only 'regex'",
    ),
    (
        "labeldrop_replacement",
        {"action": "labeldrop", "replacement": "x"},
        f"{P}[0]",
        "labeldrop action requires only 'regex'",
    ),
    (
        "empty_source_label",
        {"source_labels": ["ok", ""], "target_label": "x"},
        f"{P}[0].source_labels[1]",
        '"" is not a valid label name',
    ),
    (
        "surrogate_source_label",
        {"source_labels": ["a\ud800"], "target_label": "x"},
        f"{P}[0].source_labels[0]",
        '"a\\ud800" is not valid UTF-8',
    ),
    (
        "surrogate_pair_target",
        {"target_label": "\ud83d\ude00"},
        f"{P}[0].target_label",
        "found invalid Unicode character escape code",
    ),
    (
        "surrogate_replacement",
        {"target_label": "x", "replacement": "\udfff"},
        f"{P}[0].replacement",
        "not valid UTF-8",
    ),
    ("surrogate_regex", {"action": "keep", "regex": "\udc00"}, f"{P}[0].regex", "not valid UTF-8"),
    (
        "surrogate_separator",
        {"target_label": "x", "separator": "\ud800"},
        f"{P}[0].separator",
        "not valid UTF-8",
    ),
    (
        "order_modulus_before_target",
        {"action": "hashmod", "target_label": "a.b"},
        f"{P}[0].modulus",
        "requires non-zero modulus",
    ),
]


@pytest.mark.parametrize("scheme", ["utf8", "legacy"])
@pytest.mark.parametrize(("rule", "path", "reason"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_invalid_rule(rule: Any, path: str, reason: str, scheme: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_relabel_configs([rule], P, scheme=scheme)
    assert info.value.path == path
    assert reason in info.value.reason
    assert str(info.value).startswith(f"{path}: ")


def test_error_names_the_rule_index() -> None:
    with pytest.raises(ConfigError) as info:
        parse_relabel_configs([{"action": "keep"}, {"action": "keep"}, {"foo": 1}], P)
    assert str(info.value) == f"{P}[2].foo: unknown key"


def test_not_a_list() -> None:
    with pytest.raises(ConfigError, match="expected a list"):
        parse_relabel_configs({"action": "keep"}, P)


def test_defaults_declared_once() -> None:
    assert (
        RelabelConfig(action=Action.REPLACE, separator=";", regex=DEFAULT_REGEX, replacement="$1")
        == DEFAULT
    )
    (rule,) = parse_relabel_configs([{"target_label": "x"}], P)
    assert rule.regex is DEFAULT_REGEX
    assert (rule.action, rule.separator, rule.replacement, rule.modulus) == (
        "replace",
        ";",
        "$1",
        0,
    )


GOOD: list[tuple[str, Any]] = [
    ("action_case_insensitive", {"action": "LabelDrop", "regex": "x"}),
    ("keepequal_minimal", {"action": "keepequal", "source_labels": ["a"], "target_label": "b"}),
    ("replace_templated_target", {"target_label": "${1}_x", "regex": "(.*)"}),
    ("integer_replacement", {"target_label": "x", "replacement": 1}),
    ("labelmap_default_replacement", {"action": "labelmap", "regex": "__meta_(.*)"}),
    ("null_regex_is_empty_regex", {"action": "keep", "regex": None}),
    ("null_source_labels_on_labeldrop", {"action": "labeldrop", "source_labels": None}),
    ("max_modulus", {"action": "hashmod", "modulus": 2**64 - 1, "target_label": "x"}),
    (
        "utf8_source_labels",
        {"source_labels": ["service.name", "ä", "not-ok", "1"], "target_label": "x"},
    ),
    ("non_bmp_names", {"source_labels": ["\U0001f600"], "target_label": "y"}),
]


@pytest.mark.parametrize("scheme", ["utf8", "legacy"])
@pytest.mark.parametrize("rule", [c[1] for c in GOOD], ids=[c[0] for c in GOOD])
def test_valid_rule(rule: Any, scheme: str) -> None:
    (parsed,) = parse_relabel_configs([rule], P, scheme=scheme)
    assert parsed.name_validation_scheme == scheme


def test_unknown_scheme_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown name validation scheme 'utf-8'"):
        parse_relabel_configs([{"target_label": "x"}], P, scheme="utf-8")


def test_explicit_values() -> None:
    (rule,) = parse_relabel_configs(
        [{"action": "KEEP", "regex": "a.b", "source_labels": ["x"], "replacement": 1}], P
    )
    assert rule.action is Action.KEEP
    assert rule.regex.text == "a.b"  # the text as written, for display
    assert rule.replacement == "1"
    (rule,) = parse_relabel_configs([{"action": "keep", "regex": None}], P)
    assert rule.regex.text == ""


def test_none_is_no_rules() -> None:
    assert parse_relabel_configs(None, P) == ()
