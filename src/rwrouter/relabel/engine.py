"""The relabel engine: apply compiled rules to one label set (pure).

Source of the rules: Prometheus ``model/relabel/relabel.go`` (``ProcessBuilder`` / ``relabel``),
one function per action, on a :class:`LabelBuilder` (Prometheus ``model/labels`` ``Builder``).
Each action function takes the rule, the working label set (mutated in place) and the source
value, and returns whether the series is kept.

Setting a label to "" deletes it (Prometheus ``labels.Builder.Set``). Labels starting with ``__``
are not removed after the rules (write relabeling).

A rule whose outcome is a function of one string (``replace`` and ``hashmod`` of the source
value, ``labelmap`` of a label name) remembers it in the rule's ``memo``
(:data:`~rwrouter.relabel.rules.RULE_MEMO` entries): RE2's Python binding costs microseconds a
call, and new series (a restarted pod) repeat almost every value of the ones before them.

:func:`process_compiled` runs the rules in the compiled accelerator when it is built
(``relabel_program`` in ``rwrouter/wire/_relabel.h``): :func:`program` compiles them into
tuples that carry each rule's memo and a fallback that computes (and remembers) an outcome
with the functions below, so the accelerator does what :func:`process` does, with a dict
lookup per rule for a value seen before. Tested identical to :func:`process`.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rwrouter.relabel.casemap import go_lower, go_upper
from rwrouter.relabel.rules import DEFAULT_REGEX, RULE_MEMO, Action, RelabelConfig
from rwrouter.relabel.template import expand
from rwrouter.wire.accelerator import compiled

LabelTuple = tuple[tuple[str, str], ...]


class LabelBuilder(dict[str, str]):
    """One series' label set while rules run: Prometheus ``labels.Builder`` as a dict whose
    iteration order is ``Builder.Range``'s.

    ``Range`` walks the base labels no rule deleted or set, in name order, then the labels rules
    set (its ``add`` list) in the order they were first set; ``Set`` of a name already in
    ``add`` changes its value in place, ``Set`` of another name appends it, ``Del`` removes a
    name from ``add``. So: build from the labels sorted by name (:meth:`of`); ``added`` holds
    the names in ``add``; :meth:`set` of a name not in it moves the name to the end. The order
    decides which label wins when a labelmap maps two names to one (the last one set, as in
    Prometheus 3.14+). Build with :meth:`of`; read with the dict methods; change only with
    :meth:`set`.
    """

    __slots__ = ("added",)
    added: set[str]

    @classmethod
    def of(cls, labels: Mapping[str, str] | Iterable[tuple[str, str]]) -> LabelBuilder:
        """A builder whose base is ``labels`` (a mapping, or (name, value) pairs with distinct
        names) in name order."""
        if type(labels) is tuple:  # the usual input: sorted already, so sorting is cheap
            builder = cls(sorted(labels))
        else:
            builder = cls(sorted(labels.items() if isinstance(labels, Mapping) else labels))
        builder.added = set()
        return builder

    def set(self, name: str, value: str) -> None:
        """``Builder.Set``: set ``name`` to ``value``; "" deletes it (``Builder.Del``)."""
        if value:
            added = self.added
            if name not in added:
                added.add(name)
                self.pop(name, None)  # a base label moves to the end
            self[name] = value
        elif self.pop(name, None) is not None:
            self.added.discard(name)


def _drop(rule: RelabelConfig, labels: Mapping[str, str], value: str) -> bool:
    return not rule.regex.matches(value)


def _keep(rule: RelabelConfig, labels: Mapping[str, str], value: str) -> bool:
    return rule.regex.matches(value)


def _dropequal(rule: RelabelConfig, labels: Mapping[str, str], value: str) -> bool:
    return labels.get(rule.target_label, "") != value


def _keepequal(rule: RelabelConfig, labels: Mapping[str, str], value: str) -> bool:
    return labels.get(rule.target_label, "") == value


_MISSING = object()  # not in a rule's memo


def _remember(memo: dict[str, object], key: str, outcome: object) -> None:
    if len(memo) >= RULE_MEMO:
        memo.clear()
    memo[key] = outcome


def _replace(rule: RelabelConfig, labels: LabelBuilder, value: str) -> bool:
    # Prometheus's fast path: add or delete a fixed label pair.
    if value == "" and rule.fixed_pair and rule.regex is DEFAULT_REGEX:
        labels.set(rule.target_label, rule.replacement)
        return True
    if rule.copies_source:  # what _replace_outcome gives for any value
        labels.set(rule.target_label, value)
        return True
    outcome = rule.memo.get(value, _MISSING)
    if outcome is _MISSING:
        outcome = _replace_remembered(rule, value)
    if outcome is not None:
        labels.set(*outcome)
    return True


def _replace_remembered(rule: RelabelConfig, value: str) -> tuple[str, str] | None:
    """:func:`_replace_outcome`, remembered in the rule's memo."""
    outcome = _replace_outcome(rule, value)
    _remember(rule.memo, value, outcome)
    return outcome


def _replace_fallback(rule: RelabelConfig) -> Callable[[str], tuple[str, str] | None]:
    """:func:`_replace_remembered` for the compiled loop; for the usual shape (a fixed valid
    target, replacement ``$N``) without the template walk: the same outcome, remembered."""
    target, template = rule.target_template, rule.replacement_template
    if not (
        len(target) == 1
        and isinstance(target[0], str)
        and rule.valid_target(target[0])
        and len(template) == 1
        and isinstance(template[0], int)
    ):
        return functools.partial(_replace_remembered, rule)
    label, group, search, memo = sys.intern(target[0]), template[0], rule.regex.search, rule.memo

    def remembered(value: str) -> tuple[str, str] | None:
        match = search(value)
        if match is None:
            outcome = None
        else:
            start, end = match.span(group)
            outcome = (label, value[start:end] if start >= 0 else "")
        _remember(memo, value, outcome)
        return outcome

    return remembered


def _replace_outcome(rule: RelabelConfig, value: str) -> tuple[str, str] | None:
    """What a replace of source ``value`` sets: (target label, value; "" deletes it), or None
    when it changes nothing (no match, or a target invalid under the rule's scheme)."""
    match = rule.regex.search(value)
    if match is None:
        return None
    target = expand(rule.target_template, match, value)
    if not rule.valid_target(target):  # under the rule's name validation scheme
        return None
    return target, expand(rule.replacement_template, match, value)


def _lowercase(rule: RelabelConfig, labels: LabelBuilder, value: str) -> bool:
    labels.set(rule.target_label, go_lower(value))
    return True


def _uppercase(rule: RelabelConfig, labels: LabelBuilder, value: str) -> bool:
    labels.set(rule.target_label, go_upper(value))
    return True


def _hashmod(rule: RelabelConfig, labels: LabelBuilder, value: str) -> bool:
    bucket = rule.memo.get(value)
    if bucket is None:
        bucket = _hashmod_remembered(rule, value)
    labels.set(rule.target_label, bucket)
    return True


def _hashmod_remembered(rule: RelabelConfig, value: str) -> str:
    """The bucket of ``value`` (remembered in the rule's memo)."""
    digest = hashlib.md5(value.encode("utf-8"), usedforsecurity=False).digest()
    # Last 8 bytes of the digest, big-endian unsigned, as Prometheus does.
    bucket = str(int.from_bytes(digest[8:], "big") % rule.modulus)
    _remember(rule.memo, value, bucket)
    return bucket


def _labelmap(rule: RelabelConfig, labels: LabelBuilder, value: str) -> bool:
    memo = rule.memo
    # Builder.Range: a snapshot of the names and values before this rule, in Range order (so
    # when two names map to one target, the one walked last wins). No check of the new name.
    for name, label_value in list(labels.items()):
        target = memo.get(name, _MISSING)
        if target is _MISSING:
            target = _labelmap_remembered(rule, name)
        if target is not None:
            labels.set(target, label_value)
    return True


def _labelmap_remembered(rule: RelabelConfig, name: str) -> str | None:
    """The name a labelmap maps ``name`` to (None: it does not match), remembered."""
    match = rule.regex.search(name)
    target = None if match is None else expand(rule.replacement_template, match, name)
    _remember(rule.memo, name, target)
    return target


def _labeldrop(rule: RelabelConfig, labels: LabelBuilder, value: str) -> bool:
    matches = rule.regex.matches  # label names are few: the answers are remembered
    for name in [name for name in labels if matches(name)]:
        labels.set(name, "")
    return True


def _labelkeep(rule: RelabelConfig, labels: LabelBuilder, value: str) -> bool:
    matches = rule.regex.matches
    for name in [name for name in labels if not matches(name)]:
        labels.set(name, "")
    return True


_ACTIONS: dict[Action, Callable[[RelabelConfig, LabelBuilder, str], bool]] = {
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
_FILTERS: dict[Action, Callable[[RelabelConfig, Mapping[str, str], str], bool]] = {
    Action.KEEP: _keep,
    Action.DROP: _drop,
    Action.KEEPEQUAL: _keepequal,
    Action.DROPEQUAL: _dropequal,
}


def passes(labels: Mapping[str, str], rules: Iterable[RelabelConfig]) -> bool:
    """Whether rules made only of :data:`FILTER_ACTIONS` keep ``labels`` (same answer as
    ``process(labels, rules) is not None``; filters only read ``labels``, so no copy and no
    sort)."""
    return all(_FILTERS[rule.action](rule, labels, _source_value(rule, labels)) for rule in rules)


def process(
    labels: Mapping[str, str] | Iterable[tuple[str, str]], rules: Iterable[RelabelConfig]
) -> LabelTuple | None:
    """Apply ``rules`` in order to ``labels`` (Prometheus relabel semantics).

    ``labels`` is a mapping or pairs of (name, value); it is not modified. Returns ``None`` when
    a keep/drop/keepequal/dropequal rule dropped the series, else the resulting label set as
    (name, value) pairs sorted by name — possibly empty (the caller does not send those).
    """
    working = LabelBuilder.of(labels)
    for rule in rules:
        if not _ACTIONS[rule.action](rule, working, _source_value(rule, working)):
            return None
    return tuple(sorted(working.items()))


_CODES = {action: code for code, action in enumerate(Action)}  # the RL_* of _relabel.h
_MAX_PROGRAMS = 256  # compiled rule lists remembered (one per destination and reload)
_programs: dict[int, tuple[tuple[RelabelConfig, ...], tuple[Any, ...]]] = {}
_relabel_program = compiled("relabel_program")


def literal_names(text: str) -> tuple[str, ...] | None:
    """The names a relabel regex ``text`` matches when it is an alternation of plain ASCII
    names (``UUID|Hostname``: letters, digits, ``_`` and ``:``, no regex syntax), else None.
    Anchored as every relabel regex is, it matches those names and nothing else."""
    alternatives = text.split("|")
    for alt in alternatives:
        if not (alt.isascii() and alt.replace("_", "a").replace(":", "a").isalnum()):
            return None
    return tuple(dict.fromkeys(alternatives))


def _compiled_rule(rule: RelabelConfig) -> tuple[Any, ...]:
    """One rule for ``relabel_program``: (code, sources, separator, target, memo, fallback,
    fast, fixed, copy, names); see ``rwrouter/wire/_relabel.h``."""
    action = rule.action
    names = None
    if action in (Action.LABELDROP, Action.LABELKEEP):
        names = literal_names(rule.regex.text)
    memo: dict[str, Any] | None = None
    fallback: Callable[[str], Any] | None = None
    if action in (Action.KEEP, Action.DROP, Action.LABELDROP, Action.LABELKEEP):
        memo, fallback = rule.regex.memo, rule.regex.matches
    elif action == Action.REPLACE:
        memo, fallback = rule.memo, _replace_fallback(rule)
    elif action == Action.HASHMOD:
        memo, fallback = rule.memo, functools.partial(_hashmod_remembered, rule)
    elif action == Action.LABELMAP:
        memo, fallback = rule.memo, functools.partial(_labelmap_remembered, rule)
    elif action in (Action.LOWERCASE, Action.UPPERCASE):
        fallback = go_lower if action == Action.LOWERCASE else go_upper
    fast = rule.fixed_pair and rule.regex is DEFAULT_REGEX
    # Label names interned: the accelerator compares interned names by identity.
    return (
        _CODES[action],
        tuple(sys.intern(name) for name in rule.source_labels),
        rule.separator,
        sys.intern(rule.target_label),
        memo,
        fallback,
        fast,
        rule.replacement,
        rule.copies_source,
        None if names is None else tuple(sys.intern(name) for name in names),
    )


def program(rules: tuple[RelabelConfig, ...]) -> tuple[Any, ...]:
    """``rules`` compiled for the accelerator's ``relabel_program`` (remembered per tuple of
    rules: the routes keep theirs for the life of a configuration)."""
    known = _programs.get(id(rules))
    if known is not None and known[0] is rules:
        return known[1]
    if len(_programs) >= _MAX_PROGRAMS:
        _programs.clear()
    compiled_rules = tuple(_compiled_rule(rule) for rule in rules)
    _programs[id(rules)] = (rules, compiled_rules)  # the tuple is held: its id stays its own
    return compiled_rules


def process_compiled(
    labels: tuple[tuple[str, str], ...], rules: tuple[RelabelConfig, ...]
) -> LabelTuple | None:
    """:func:`process` of ``labels`` (name, value pairs) in the compiled accelerator when it
    is built, else :func:`process` itself: the same result."""
    if _relabel_program is None:
        return process(labels, rules)
    result: LabelTuple | None = _relabel_program(labels, program(rules))
    return result


def apply_rule(rule: RelabelConfig, labels: LabelBuilder) -> bool:
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
    working = LabelBuilder.of(labels)
    steps: list[Step] = []
    for index, rule in enumerate(rules):
        kept = apply_rule(rule, working)
        steps.append(Step(index, rule, tuple(sorted(working.items())), kept))
        if not kept:
            break
    return steps
