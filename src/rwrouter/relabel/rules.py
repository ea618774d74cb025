"""Relabel rule schema, parsing, validation and compilation (pure).

Source of the rules: Prometheus ``model/relabel/relabel.go`` (``Config``, ``DefaultRelabelConfig``,
``Config.Validate``, ``NewRegexp``) and prometheus/common ``model`` (``ValidationScheme``,
``LabelName.UnmarshalYAML``). Validation error texts are Prometheus's; the key path is ours.

Name validation schemes (``global.metric_name_validation_scheme``; each compiled rule keeps its
own, as Prometheus's ``Config.NameValidationScheme``):

- ``utf8`` (Prometheus 3's default): a label name is any non-empty valid UTF-8 text; targets and
  labelmap replacements may contain ``$`` references (any non-empty text is accepted).
- ``legacy``: a label name matches ``[a-zA-Z_][a-zA-Z0-9_]*``; a replace target with ``$`` and a
  labelmap replacement must match Prometheus's ``relabelTargetLegacy`` (a legacy name in which
  ``$name`` / ``${name}`` references may stand).
- ``source_labels`` accept any non-empty UTF-8 name under both (Prometheus 3 reads them with
  prometheus/common's global scheme, which its ``main`` sets to UTF-8).

YAML value handling (mirrors ``gopkg.in/yaml.v2`` as Prometheus uses it):

- a missing key takes the default (``action: replace``, ``separator: ";"``, ``regex: "(.*)"``,
  ``replacement: "$1"``); an explicit ``null`` takes the *zero* value (``""``, ``0``, no source
  labels), and ``regex: null`` becomes the empty regex, as in Prometheus;
- string fields accept strings and plain integers (``replacement: 1`` is ``"1"``); other scalars
  (floats, booleans) are refused because their YAML text cannot be recovered after parsing;
- a string holding a surrogate code point (only a ``"\\ud800"``-style escape gives one: PyYAML
  accepts it, Go's YAML parser refuses every ``\\uD800``-``\\uDFFF`` escape, pairs included) is
  refused: it is not valid UTF-8.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import re2  # type: ignore[import-untyped]

from rwrouter.errors import ConfigError, ConfigErrors
from rwrouter.relabel.names import (
    LEGACY,
    UTF8,
    go_quote,
    is_utf8_label_name,
    is_valid_utf8,
    is_valid_with_references,
    name_check,
)
from rwrouter.relabel.template import Template, compile_template


class Action(enum.StrEnum):
    """The 11 relabel actions (Prometheus relabel semantics)."""

    REPLACE = "replace"
    KEEP = "keep"
    DROP = "drop"
    KEEPEQUAL = "keepequal"
    DROPEQUAL = "dropequal"
    HASHMOD = "hashmod"
    LABELMAP = "labelmap"
    LABELDROP = "labeldrop"
    LABELKEEP = "labelkeep"
    LOWERCASE = "lowercase"
    UPPERCASE = "uppercase"


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False

MATCH_MEMO = 4096  # distinct values whose keep/drop answer a Regex remembers
RULE_MEMO = 4096  # distinct source values (or names) whose outcome a rule remembers


@dataclass(frozen=True, slots=True, eq=False)
class Regex:
    """A relabel regex: ``text`` as written, compiled anchored and dot-all as ``^(?s:text)$``.

    Equality is by text. Build with :meth:`Regex.compile`.
    """

    text: str
    pattern: Any = field(repr=False)
    _matches: dict[str, bool] = field(default_factory=dict, repr=False)

    def matches(self, value: str) -> bool:
        """Whether the whole of ``value`` matches (``keep``/``drop`` on a value, ``labeldrop``/
        ``labelkeep`` on a label name). Remembers the answers for up to :data:`MATCH_MEMO`
        distinct values (metric and label names are few), then starts over: the same answer as
        ``pattern.search``, without RE2's per-call cost."""
        if (known := self._matches.get(value)) is None:
            if len(self._matches) >= MATCH_MEMO:
                self._matches.clear()
            known = self._matches[value] = self.search(value) is not None
        return known

    def search(self, text: str) -> Any:
        """``pattern.search(text)``, spans in ``text``: ASCII is matched as bytes (a third of
        the str path's cost, same spans). Read groups by span (``template.expand``)."""
        return self.pattern.search(text.encode("ascii") if text.isascii() else text)

    @property
    def memo(self) -> dict[str, bool]:
        """The answers :meth:`matches` remembers (value -> whether it matches)."""
        return self._matches

    @classmethod
    def compile(cls, text: str) -> Regex:
        """Compile ``text`` with RE2; raises ``ValueError`` with RE2's reason if it is invalid.

        ``\\C`` (any single byte) is refused too: C++ RE2 has it, Go's regexp (Prometheus) does
        not, and a rule Prometheus refuses must not load here either.
        """
        if _has_any_byte_escape(text):
            raise ValueError("error parsing regexp: invalid escape sequence: `\\C`")
        try:
            pattern = re2.compile(f"^(?s:{text})$", _RE2_OPTIONS)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else "invalid"
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            raise ValueError(f"error parsing regexp: {reason}") from None
        return cls(text=text, pattern=pattern)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Regex) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def _has_any_byte_escape(text: str) -> bool:
    """Whether ``text`` has an unescaped ``\\C`` outside ``\\Q...\\E`` quoting."""
    pos = text.find("\\")
    while pos >= 0:
        escaped = text[pos + 1 : pos + 2]
        if escaped == "C":
            return True
        if escaped == "Q":  # literal text up to \E (or the end)
            end = text.find("\\E", pos + 2)
            if end < 0:
                return False
            pos = end
        pos = text.find("\\", pos + 2)
    return False


#: The default regex object. Like Prometheus (which compares the pointer), "regex not set" means
#: *this object*: an explicit ``regex: "(.*)"`` is a different, non-default regex.
DEFAULT_REGEX = Regex.compile("(.*)")


@dataclass(frozen=True, slots=True)
class RelabelConfig:
    """One validated, compiled relabel rule (Prometheus ``relabel.Config``).

    Build through :func:`parse_relabel_configs` (which validates). The defaults below are the
    only place they are declared; templates are compiled against ``regex`` on construction.
    ``name_validation_scheme`` (``utf8`` or ``legacy``, Prometheus's ``NameValidationScheme``)
    is the scheme the rule was validated under; a replace checks its expanded target with it
    (``valid_target``) when it runs. ``memo``: the engine's memory of this rule's outcomes by
    source value (``replace``, ``hashmod``) or label name (``labelmap``), at most
    :data:`RULE_MEMO` entries, then started over: a rule's outcome depends on nothing else, and
    new series mostly repeat the values of earlier ones (a restarted pod changes one or two).
    ``copies_source``: a replace whose outcome for any value is (target, the value) — regex
    ``(.*)``, replacement ``$1``, a fixed valid target (the common "copy label" rule) — which
    the engine applies without the regex or the memo.
    """

    action: Action = Action.REPLACE
    source_labels: tuple[str, ...] = ()
    separator: str = ";"
    regex: Regex = DEFAULT_REGEX
    modulus: int = 0
    target_label: str = ""
    replacement: str = "$1"
    name_validation_scheme: str = UTF8
    target_template: Template = field(init=False, repr=False, compare=False)
    replacement_template: Template = field(init=False, repr=False, compare=False)
    valid_target: Callable[[str], bool] = field(init=False, repr=False, compare=False)
    fixed_pair: bool = field(init=False, repr=False, compare=False)
    copies_source: bool = field(init=False, repr=False, compare=False)
    memo: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "memo", {})
        object.__setattr__(self, "valid_target", name_check(self.name_validation_scheme))
        # Prometheus's replace fast path: neither target nor replacement has a $ reference.
        object.__setattr__(self, "fixed_pair", "$" not in self.target_label + self.replacement)
        # A replace that copies its source value to a fixed, valid target (regex "(.*)",
        # replacement "$1": the anchored dot-all regex matches any value whole): no regex run.
        object.__setattr__(
            self,
            "copies_source",
            self.action == Action.REPLACE
            and self.regex.text == "(.*)"
            and self.replacement == "$1"
            and "$" not in self.target_label
            and self.valid_target(self.target_label),
        )
        pattern = self.regex.pattern
        groups = {"group_index": pattern.groupindex, "groups": pattern.groups}
        object.__setattr__(self, "target_template", compile_template(self.target_label, **groups))
        object.__setattr__(
            self, "replacement_template", compile_template(self.replacement, **groups)
        )


DEFAULT = RelabelConfig()

_STRING_KEYS = ("separator", "regex", "target_label", "replacement")
_KNOWN_KEYS = frozenset(("source_labels", "modulus", "action", *_STRING_KEYS))
_TARGET_REQUIRED = frozenset(
    (
        Action.REPLACE,
        Action.HASHMOD,
        Action.LOWERCASE,
        Action.UPPERCASE,
        Action.KEEPEQUAL,
        Action.DROPEQUAL,
    )
)
_NO_REPLACEMENT = frozenset(
    (Action.LOWERCASE, Action.UPPERCASE, Action.KEEPEQUAL, Action.DROPEQUAL)
)


def _string(value: object, path: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        if not is_valid_utf8(value):
            raise ConfigError(
                path,
                f"{go_quote(value)} is not valid UTF-8 (a surrogate escape; "
                "Prometheus's YAML parser refuses it: found invalid Unicode "
                "character escape code)",
            )
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ConfigError(path, f"expected a string, got {type(value).__name__}")


def _source_labels(value: object, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ConfigError(path, "expected a list of label names")
    names = []
    for index, item in enumerate(value):
        name = _string(item, f"{path}[{index}]")
        if not is_utf8_label_name(name):  # any scheme: prometheus/common's global (UTF-8)
            raise ConfigError(f"{path}[{index}]", f"{go_quote(name)} is not a valid label name")
        names.append(name)
    return tuple(names)


def _modulus(value: object, path: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise ConfigError(path, "expected an unsigned 64-bit integer")
    return value


def _action(value: object, path: str) -> Action | None:
    """``None`` for an explicit null (Prometheus: "relabel action cannot be empty")."""
    if value is None:
        return None
    text = _string(value, path)
    try:
        return Action(text.lower())
    except ValueError:
        raise ConfigError(path, f"unknown relabel action {go_quote(text)}") from None


def _fields(raw: Mapping[Any, Any], path: str) -> dict[str, Any]:
    """The rule's values by key; every unknown key and bad value is reported (ConfigErrors)."""
    problems = [
        ConfigError(f"{path}.{key}", "unknown key") for key in raw if key not in _KNOWN_KEYS
    ]
    readers = {**dict.fromkeys(_STRING_KEYS, _string), "source_labels": _source_labels}
    fields: dict[str, Any] = {}
    for key, read in {**readers, "modulus": _modulus, "action": _action}.items():
        try:
            if key in raw:
                fields[key] = read(raw[key], f"{path}.{key}")
            if key == "regex" and key in fields:
                fields[key] = Regex.compile(fields[key])
        except ConfigError as exc:
            problems.append(exc)
        except ValueError as exc:  # the regex
            problems.append(ConfigError(f"{path}.regex", str(exc)))
    if problems:
        raise ConfigErrors.of(problems)
    return fields


def parse_relabel_config(raw: object, path: str, *, scheme: str = "utf8") -> RelabelConfig:
    """Parse and validate one rule (a YAML mapping) under the name validation ``scheme``
    (``utf8`` or ``legacy``: ``global.metric_name_validation_scheme``), which the rule keeps.

    Raises :class:`rwrouter.errors.ConfigError` naming ``path.key``; ``ValueError`` for an
    unknown ``scheme`` (the config parser refuses those first)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(path, "expected a mapping")
    name_check(scheme)  # ValueError for an unknown scheme
    fields = _fields(raw, path)
    if "action" in fields and fields["action"] is None:
        raise ConfigError(f"{path}.action", "relabel action cannot be empty")
    rule = RelabelConfig(**fields, name_validation_scheme=scheme)
    validate(rule, path=path, source_labels_set=raw.get("source_labels") is not None)
    return rule


def parse_relabel_configs(
    raw: object, path: str, *, scheme: str = "utf8"
) -> tuple[RelabelConfig, ...]:
    """Parse a YAML list of rules (``None`` is no rules) under the name validation ``scheme``
    (see :func:`parse_relabel_config`); errors name ``path[i].key``.

    Raises :class:`rwrouter.errors.ConfigError`.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise ConfigError(path, "expected a list of relabel rules")
    return tuple(
        parse_relabel_config(item, f"{path}[{index}]", scheme=scheme)
        for index, item in enumerate(raw)
    )


def validate(rule: RelabelConfig, *, path: str, source_labels_set: bool) -> None:
    """Prometheus ``Config.Validate`` (same order, same texts) under the rule's
    ``name_validation_scheme``; raises ``ConfigError``.

    ``source_labels_set`` is whether ``source_labels`` was given (even as ``[]``): labeldrop and
    labelkeep refuse it, as Prometheus refuses a non-nil list.
    """
    action, target = rule.action, rule.target_label
    scheme, valid_name = rule.name_validation_scheme, rule.valid_target
    if action is Action.HASHMOD and rule.modulus == 0:
        raise ConfigError(
            f"{path}.modulus", "relabel configuration for hashmod requires non-zero modulus"
        )
    if action in _TARGET_REQUIRED and target == "":
        raise ConfigError(
            f"{path}.target_label",
            f"relabel configuration for {action} action requires 'target_label' value",
        )
    if action is Action.REPLACE and "$" not in target and not valid_name(target):
        raise _invalid_target(path, rule)
    if action is Action.REPLACE and "$" in target and not is_valid_with_references(target, scheme):
        raise _invalid_target(path, rule)
    if action in _NO_REPLACEMENT and not valid_name(target):
        raise _invalid_target(path, rule)
    if action in _NO_REPLACEMENT and rule.replacement != DEFAULT.replacement:
        reason = f"'replacement' can not be set for {action} action"
        raise ConfigError(f"{path}.replacement", reason)
    if action is Action.LABELMAP and not is_valid_with_references(rule.replacement, scheme):
        reason = f"{go_quote(rule.replacement)} is invalid 'replacement' for {action} action"
        if scheme == LEGACY:
            reason += " (global.metric_name_validation_scheme is legacy)"
        raise ConfigError(f"{path}.replacement", reason)
    if action is Action.HASHMOD and not valid_name(target):
        raise _invalid_target(path, rule)
    _validate_field_sets(rule, path=path, source_labels_set=source_labels_set)


def _invalid_target(path: str, rule: RelabelConfig) -> ConfigError:
    """Prometheus's text, plus which scheme refused it when that is ``legacy`` (under utf8
    only an empty or invalid UTF-8 name is refused)."""
    reason = f"{go_quote(rule.target_label)} is invalid 'target_label' for {rule.action} action"
    if rule.name_validation_scheme == LEGACY:
        reason += " (global.metric_name_validation_scheme is legacy: [a-zA-Z_][a-zA-Z0-9_]*)"
    return ConfigError(f"{path}.target_label", reason)


def _validate_field_sets(rule: RelabelConfig, *, path: str, source_labels_set: bool) -> None:
    action = rule.action
    common_changed = (
        rule.modulus != DEFAULT.modulus
        or rule.separator != DEFAULT.separator
        or rule.replacement != DEFAULT.replacement
    )
    if action in (Action.KEEPEQUAL, Action.DROPEQUAL) and (
        rule.regex is not DEFAULT_REGEX or common_changed
    ):
        raise ConfigError(
            path,
            f"{action} action requires only 'source_labels' and `target_label`, "
            "and no other fields",
        )
    if action in (Action.LABELDROP, Action.LABELKEEP) and (
        source_labels_set or rule.target_label != DEFAULT.target_label or common_changed
    ):
        raise ConfigError(path, f"{action} action requires only 'regex', and no other fields")
