"""``rwrouter relabel``: the relabel debugger — where a series goes, and which rule decided.

``rwrouter relabel --config FILE --series SERIES [--series SERIES ...] [--json]`` reads the
configuration of ``rwrouter run`` and, for each series, shows the global rules then each
destination (config order, fallback destinations last): every rule applied (index, the rule in
short, what it changed, or "dropped here") and the outcome — ``sent`` (the label set
forwarded), ``dropped`` (by which rule; counted with reason ``relabel``), ``invalid`` (no
``__name__`` or an empty label name left; reason ``invalid``) or, for a fallback destination,
``not sent`` (a non-fallback destination kept it).

The steps come from the engine (:func:`rwrouter.relabel.trace`) and the outcomes from the
router's own routing (:func:`rwrouter.routing.explain.explain`), so they are what ``rwrouter
run`` does. ``${VAR}`` placeholders are expanded as ``check-config`` does, but an unset
variable is not an error here (URLs and credentials are not used): it stands for ``0`` and is
named in a note on stderr. ``*_file`` paths are not checked.

SERIES: ``{__name__="m", gpu="0"}`` (Prometheus text format / PromQL labels), ``m{gpu="0"}``, or
a bare ``m``; values are double-quoted (``\\"``, ``\\\\``, ``\\n`` and Go's other escapes),
single-quoted or in backquotes (raw), as in PromQL; a label with an empty value is absent.

Exit 0 when traced; 2 for a bad configuration or an unparsable ``--series``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rwrouter.config import Config
    from rwrouter.relabel import Step
    from rwrouter.routing.explain import Decision, Explanation

Labels = tuple[tuple[str, str], ...]
UNSET = "0"  # what an unset ${VAR} stands for (valid in a host name, a port, a path, a region)

__all__ = ["SeriesError", "format_labels", "parse_series", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``relabel`` command to the ``rwrouter`` subcommands."""
    cmd = sub.add_parser("relabel", help="show where series go and which relabel rule decided")
    cmd.add_argument("--config", required=True, help="the YAML configuration of rwrouter run")
    cmd.add_argument("--series", action="append", required=True, metavar="SERIES",
                     help='a label set: \'{__name__="m",gpu="0"}\', \'m{gpu="0"}\' or \'m\'; '
                          "repeat for several")  # fmt: skip
    cmd.add_argument("--json", action="store_true", help="print JSON instead of text")
    cmd.set_defaults(func=cmd_relabel)


def cmd_relabel(args: argparse.Namespace) -> int:
    """``rwrouter relabel``: 0 when traced, 2 for an unparsable --series (ConfigError: 2 too,
    from ``main``)."""
    from rwrouter.routing.explain import explain
    from rwrouter.sending.fanout import build_router

    parsed = []
    for text in args.series:
        try:
            parsed.append((text, parse_series(text)))
        except SeriesError as exc:
            print(f"rwrouter: invalid --series {text!r}: {exc}", file=sys.stderr)
            return 2
    env = _LenientEnv(os.environ)
    config = _load(args.config, env)
    if env.unset:
        names = ", ".join(sorted(env.unset))
        print(f"rwrouter: note: unset environment variables taken as {UNSET!r}: {names} "
              "(URLs and credentials are not used here)", file=sys.stderr)  # fmt: skip
    router = build_router(config)  # the routes rwrouter run builds
    results = [(text, explain(labels, router.global_rules, router.routes))
               for text, labels in parsed]  # fmt: skip
    if args.json:
        print(json.dumps({"series": [_as_json(text, e) for text, e in results]}, indent=2))
    else:
        print("\n\n".join(_as_text(text, e) for text, e in results))
    return 0


# configuration --------------------------------------------------------------------------------
class _LenientEnv(Mapping[str, str]):
    """``os.environ`` where an unset variable stands for :data:`UNSET` (and is remembered)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self.unset: set[str] = set()

    def __getitem__(self, name: str) -> str:
        if name in self._env:
            return self._env[name]
        self.unset.add(name)
        return UNSET

    def __contains__(self, name: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._env)

    def __len__(self) -> int:
        return len(self._env)


def _load(path: str, env: Mapping[str, str]) -> Config:
    """:func:`rwrouter.config.load_config` (what ``check-config`` reads) without its check that
    ``*_file`` credentials are readable: relabeling does not use them."""
    from rwrouter.config import parse_config
    from rwrouter.errors import ConfigError

    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read config file {path!r}: {exc}") from None
    return parse_config(text, env=env, source=path,
                        base_dir=os.path.dirname(os.path.abspath(path)))  # fmt: skip


# --series -------------------------------------------------------------------------------------
class SeriesError(ValueError):
    """An unparsable ``--series``."""


_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SPACE = re.compile(r"\s*")
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
                   "\\": "\\", "'": "'", '"': '"'}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


class _Reader:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def skip_space(self) -> None:
        self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def take(self, pattern: re.Pattern[str]) -> str | None:
        match = pattern.match(self.text, self.pos)
        if match is None:
            return None
        self.pos = match.end()
        return match.group()

    def fail(self, what: str) -> SeriesError:
        where = f"at position {self.pos + 1}" if self.pos < len(self.text) else "at the end"
        return SeriesError(f"{what} {where}")

    def string(self) -> str:
        """A PromQL string literal: "..." or '...' with Go escapes, or `...` (raw)."""
        quote = self.peek()
        start = self.pos
        self.pos += 1
        if quote == "`":
            end = self.text.find("`", self.pos)
            if end < 0:
                self.pos = start
                raise self.fail("unterminated `string`")
            value, self.pos = self.text[self.pos : end], end + 1
            return value
        out: list[str] = []
        while True:
            char = self.peek()
            if char == "" or char == "\n":
                self.pos = start
                raise self.fail(f"unterminated {quote}string{quote}")
            self.pos += 1
            if char == quote:
                return "".join(out)
            if char != "\\":
                out.append(char)
                continue
            out.append(self._escape())

    def _escape(self) -> str:
        char = self.peek()
        self.pos += 1
        if char in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[char]
        digits, base = (_HEX_ESCAPES[char], 16) if char in _HEX_ESCAPES else (3, 8)
        if char not in _HEX_ESCAPES:
            self.pos -= 1  # an octal escape's first digit is the character itself
        code = self.text[self.pos : self.pos + digits]
        try:
            if len(code) != digits:
                raise ValueError(code)
            value = int(code, base)
        except ValueError:
            self.pos -= 1
            raise self.fail(f"invalid escape \\{char}") from None
        if (char == "x" or base == 8) and value > 127:
            # Go: \xHH and \ooo are bytes; alone they must be ASCII to stay valid UTF-8.
            self.pos -= 1
            raise self.fail(f"escape \\{char if base == 16 else ''}{code} is a byte over 0x7f, "
                            "not valid UTF-8 on its own (write the character itself)")
        result = chr(value)
        self.pos += digits
        return result


def parse_series(text: str) -> Labels:
    """``{__name__="m", a="1"}``, ``m{a="1"}`` or ``m`` -> labels sorted by name (an empty
    value: the label is absent). Raises :class:`SeriesError` saying what and where."""
    reader = _Reader(text)
    labels: dict[str, str] = {}

    def add(name: str, value: str) -> None:
        if not name:
            raise reader.fail("empty label name")
        if name in labels:
            raise reader.fail(f"label {name} given twice")
        labels[name] = value

    reader.skip_space()
    name = reader.take(_METRIC)
    if name is not None:
        add("__name__", name)
    reader.skip_space()
    if reader.peek() == "{":
        reader.pos += 1
        _braces(reader, add)
    elif name is None:
        raise reader.fail("expected a metric name or {")
    reader.skip_space()
    if reader.pos < len(text):
        raise reader.fail(f"unexpected {text[reader.pos]!r}")
    result = tuple(sorted((k, v) for k, v in labels.items() if v))
    if not result:
        raise SeriesError("no labels (a series needs at least one label with a value)")
    return result


def _braces(reader: _Reader, add: Callable[[str, str], None]) -> None:
    """The label pairs after ``{`` up to and including ``}``."""
    while True:
        reader.skip_space()
        if reader.peek() == "}":
            reader.pos += 1
            return
        name: str | None
        if reader.peek() in ('"', "'", "`"):
            name = reader.string()
            reader.skip_space()
            if reader.peek() in (",", "}"):  # a lone quoted string: the metric name
                add("__name__", name)
                name = None
        else:
            name = reader.take(_LABEL)
            if name is None:
                raise reader.fail("expected a label name")
        if name is not None:
            reader.skip_space()
            if reader.text.startswith(("!=", "=~", "!~"), reader.pos):
                raise reader.fail("only = is allowed (a series, not a selector),")
            if reader.peek() != "=":
                raise reader.fail(f"expected = after {name}")
            reader.pos += 1
            reader.skip_space()
            if reader.peek() not in ('"', "'", "`"):
                raise reader.fail(f"expected a quoted value for {name}")
            add(name, reader.string())
        reader.skip_space()
        if reader.peek() == ",":
            reader.pos += 1
        elif reader.peek() != "}":
            raise reader.fail("expected , or }")


# output ---------------------------------------------------------------------------------------
def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _name(name: str) -> str:
    return name if _LABEL.fullmatch(name) else _quote(name)


def format_labels(labels: Labels) -> str:
    """``m{a="1"}`` (PromQL), or ``{a="1"}`` when there is no ``__name__`` (or it is not a
    plain metric name: then ``{__name__="..."}``); values escaped as in the text format."""
    mapping = dict(labels)
    metric = mapping.get("__name__")
    prefix = ""
    if metric is not None and _METRIC.fullmatch(metric):
        prefix = metric
        del mapping["__name__"]
    pairs = ", ".join(f"{_name(k)}={_quote(v)}" for k, v in mapping.items())
    return f"{prefix}{{{pairs}}}" if pairs or not prefix else prefix


def _changes(before: Labels, after: Labels) -> dict[str, Any]:
    old, new = dict(before), dict(after)
    return {
        "added": {k: v for k, v in new.items() if k not in old},
        "removed": {k: v for k, v in old.items() if k not in new},
        "changed": {k: [old[k], v] for k, v in new.items() if k in old and old[k] != v},
    }


def _change_text(before: Labels, after: Labels) -> str:
    diff = _changes(before, after)
    parts = [f"+{_name(k)}={_quote(v)}" for k, v in diff["added"].items()]
    parts += [f"-{_name(k)}={_quote(v)}" for k, v in diff["removed"].items()]
    parts += [f"{_name(k)}: {_quote(a)} -> {_quote(b)}" for k, (a, b) in diff["changed"].items()]
    return ", ".join(parts) if parts else "no change"


def _step_lines(steps: tuple[Step, ...], start: Labels, indent: str) -> list[str]:
    from rwrouter.config import describe_rule
    from rwrouter.relabel import FILTER_ACTIONS

    lines, before = [], start
    for step in steps:
        lines.append(f"{indent}[{step.index}] {describe_rule(step.rule)}")
        change = _change_text(before, step.labels) if step.kept else "dropped here"
        if step.kept and step.rule.action in FILTER_ACTIONS:
            change = "kept"  # keep/drop/keepequal/dropequal never change labels
        lines.append(f"{indent}    => {change}")
        before = step.labels
    return lines


def _ordered(decisions: tuple[Decision, ...]) -> list[Decision]:
    """Non-fallback destinations in config order, then the fallback ones."""
    return sorted(decisions, key=lambda d: d.fallback)


def _outcome_text(d: Decision) -> str:
    from rwrouter.routing.explain import INVALID_OUTCOME, SENT

    if d.outcome == SENT:
        assert d.labels is not None
        return f"sent {format_labels(d.labels)}"
    if d.outcome == INVALID_OUTCOME:
        assert d.labels is not None
        return f"{d.detail}: {format_labels(d.labels)} (not sent, counted as reason {d.reason})"
    if d.reason is not None:
        return f"{d.detail} (not sent, counted as reason {d.reason})"
    return f"not sent: {d.detail} (a fallback gets only what no other destination kept)"


def _as_text(text: str, e: Explanation) -> str:
    lines = [f"series {format_labels(e.labels)}"]
    if not e.global_steps:
        lines.append("  global relabel_configs: none")
    else:
        lines.append("  global relabel_configs:")
        lines += _step_lines(e.global_steps, e.labels, "    ")
        after = "dropped" if e.after_global is None else format_labels(e.after_global)
        lines.append(f"    result: {after}")
    for d in _ordered(e.decisions):
        role = " (fallback)" if d.fallback else ""
        lines.append(f"  destination {d.name}{role}: {_outcome_text(d)}")
        if e.after_global is not None and d.steps:
            lines += _step_lines(d.steps, e.after_global, "    ")
        elif e.after_global is not None and d.outcome != "not sent":
            lines.append("    (no write_relabel_configs)")
    return "\n".join(lines)


def _labels_json(labels: Labels | None) -> dict[str, str] | None:
    return None if labels is None else dict(labels)


def _steps_json(steps: tuple[Step, ...], start: Labels) -> list[dict[str, Any]]:
    from rwrouter.config import describe_rule

    out, before = [], start
    for step in steps:
        out.append({
            "index": step.index,
            "action": step.rule.action.value,
            "rule": describe_rule(step.rule),
            "kept": step.kept,
            "labels": dict(step.labels) if step.kept else None,
            "changes": _changes(before, step.labels),
        })  # fmt: skip
        before = step.labels
    return out


def _as_json(text: str, e: Explanation) -> dict[str, Any]:
    start = e.after_global if e.after_global is not None else ()
    return {
        "input": text,
        "labels": dict(e.labels),
        "global": {
            "steps": _steps_json(e.global_steps, e.labels),
            "labels": _labels_json(e.after_global),
        },
        "destinations": [
            {
                "name": d.name,
                "fallback": d.fallback,
                "outcome": d.outcome,
                "labels": _labels_json(d.labels),
                "dropped_by": None if d.dropped_by is None
                else {"scope": d.dropped_by[0], "index": d.dropped_by[1]},
                "reason": d.reason,
                "detail": d.detail,
                "steps": _steps_json(d.steps, start),
            }
            for d in _ordered(e.decisions)
        ],
    }  # fmt: skip
