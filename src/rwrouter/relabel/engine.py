"""The relabel engine: apply compiled rules to one label set (pure).

Source of the rules: Prometheus ``model/relabel/relabel.go`` (``Process`` / ``relabel``), one
function per action. Each action function takes the rule, the working label dict (mutated in
place) and the source value, and returns whether the series is kept.

Setting a label to "" deletes it (Prometheus ``labels.Builder.Set``). Labels starting with ``__``
are not removed after the rules (write relabeling).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from rwrouter.relabel.casemap import go_lower, go_upper
from rwrouter.relabel.rules import DEFAULT_REGEX, Action, RelabelConfig, is_valid_label_name
from rwrouter.relabel.template import expand

Labels = dict[str, str]
LabelTuple = tuple[tuple[str, str], ...]


def _set(labels: Labels, name: str, value: str) -> None:
    if value:
        labels[name] = value
    else:
        labels.pop(name, None)


def _drop(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    return not rule.regex.matches(value)


def _keep(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    return rule.regex.matches(value)


def _dropequal(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    return labels.get(rule.target_label, "") != value


def _keepequal(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    return labels.get(rule.target_label, "") == value


def _replace(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    target, replacement = rule.target_label, rule.replacement
    # Prometheus's fast path: add or delete a fixed label pair.
    if value == "" and rule.regex is DEFAULT_REGEX and "$" not in target + replacement:
        _set(labels, target, replacement)
        return True
    match = rule.regex.pattern.search(value)
    if match is None:
        return True
    if "$" in target:
        target = expand(rule.target_template, match)
        if not is_valid_label_name(target):
            return True
    _set(labels, target, expand(rule.replacement_template, match))
    return True


def _lowercase(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    _set(labels, rule.target_label, go_lower(value))
    return True


def _uppercase(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    _set(labels, rule.target_label, go_upper(value))
    return True


def _hashmod(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    digest = hashlib.md5(value.encode("utf-8"), usedforsecurity=False).digest()
    # Last 8 bytes of the digest, big-endian unsigned, as Prometheus does.
    _set(labels, rule.target_label, str(int.from_bytes(digest[8:], "big") % rule.modulus))
    return True


def _labelmap(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    search = rule.regex.pattern.search
    for name, label_value in list(labels.items()):  # the label set before this rule
        match = search(name)
        if match is not None:
            _set(labels, expand(rule.replacement_template, match), label_value)
    return True


def _labeldrop(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    matches = rule.regex.matches  # label names are few: the answers are remembered
    for name in [name for name in labels if matches(name)]:
        del labels[name]
    return True


def _labelkeep(rule: RelabelConfig, labels: Labels, value: str) -> bool:
    matches = rule.regex.matches
    for name in [name for name in labels if not matches(name)]:
        del labels[name]
    return True


_ACTIONS: dict[Action, Callable[[RelabelConfig, Labels, str], bool]] = {
    Action.REPLACE: _replace,
    Action.KEEP: _keep,
    Action.DROP: _drop,
    Action.KEEPEQUAL: _keepequal,
    Action.DROPEQUAL: _dropequal,
    Action.HASHMOD: _hashmod,
    Action.LABELMAP: _labelmap,
    Action.LABELDROP: _labeldrop,
    Action.LABELKEEP: _labelkeep,
    Action.LOWERCASE: _lowercase,
    Action.UPPERCASE: _uppercase,
}


def _source_value(rule: RelabelConfig, labels: Mapping[str, str]) -> str:
    names = rule.source_labels
    if len(names) == 1:
        return labels.get(names[0], "")
    return rule.separator.join([labels.get(name, "") for name in names])


FILTER_ACTIONS = frozenset((Action.KEEP, Action.DROP, Action.KEEPEQUAL, Action.DROPEQUAL))
"""Actions that only decide whether a series is kept: they never change its labels."""


def passes(labels: Labels, rules: Iterable[RelabelConfig]) -> bool:
    """Whether rules made only of :data:`FILTER_ACTIONS` keep ``labels`` (same answer as
    ``process(labels, rules) is not None``; filters only read ``labels``, so no copy and no
    sort)."""
    return all(_ACTIONS[rule.action](rule, labels, _source_value(rule, labels)) for rule in rules)


def process(
    labels: Mapping[str, str] | Iterable[tuple[str, str]], rules: Iterable[RelabelConfig]
) -> LabelTuple | None:
    """Apply ``rules`` in order to ``labels`` (Prometheus relabel semantics).

    ``labels`` is a mapping or pairs of (name, value); it is not modified. Returns ``None`` when
    a keep/drop/keepequal/dropequal rule dropped the series, else the resulting label set as
    (name, value) pairs sorted by name — possibly empty (the caller does not send those).
    """
    working: Labels = dict(labels)
    for rule in rules:
        if not _ACTIONS[rule.action](rule, working, _source_value(rule, working)):
            return None
    return tuple(sorted(working.items()))


def apply_rule(rule: RelabelConfig, labels: Labels) -> bool:
    """Apply one rule to ``labels`` in place (the step :func:`process` takes per rule); False
    when it drops the series."""
    return _ACTIONS[rule.action](rule, labels, _source_value(rule, labels))


@dataclass(frozen=True, slots=True)
class Step:
    """One rule of a :func:`trace`: its index in the rules, and the label set after it (sorted
    by name) — or, when ``kept`` is False, the label set it dropped."""

    index: int
    rule: RelabelConfig
    labels: LabelTuple
    kept: bool


def trace(
    rules: Iterable[RelabelConfig], labels: Mapping[str, str] | Iterable[tuple[str, str]]
) -> list[Step]:
    """:func:`process`, one :class:`Step` per rule applied (for the relabel debugger, not the
    hot path). The steps stop at the rule that dropped the series; the last step's labels are
    ``process``'s result when it kept the series (the input, sorted, when there are no rules)."""
    working: Labels = dict(labels)
    steps: list[Step] = []
    for index, rule in enumerate(rules):
        kept = apply_rule(rule, working)
        steps.append(Step(index, rule, tuple(sorted(working.items())), kept))
        if not kept:
            break
    return steps
