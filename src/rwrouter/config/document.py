"""The configuration file as a YAML document: ``yaml.safe_load`` that also refuses what
Prometheus's (Go) YAML parser refuses and PyYAML would let through: a duplicate key in a
mapping and a lone surrogate from a ``"\\ud800"`` escape. Raises ConfigError naming the key path.

A YAML syntax error is one line naming the file, line and column, without PyYAML's snippet
of the offending line (which would print whatever is written there, a password included).
"""

from __future__ import annotations

import re

import yaml

from rwrouter.config.values import ShortBool
from rwrouter.errors import ConfigError

__all__ = ["load_yaml"]

_SHORT_BOOL = "tag:rwrouter,2025:short-bool"


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that reads a plain ``y``/``Y``/``n``/``N`` as a
    :class:`~rwrouter.config.values.ShortBool` (YAML 1.1 booleans PyYAML leaves as strings;
    go-yaml v2, so Prometheus, reads them as booleans)."""


_Loader.add_implicit_resolver(_SHORT_BOOL, re.compile(r"^[yYnN]$"), list("yYnN"))
_Loader.add_constructor(_SHORT_BOOL, lambda loader, node: ShortBool(node.value))


def load_yaml(text: str, source: str) -> object:
    """``yaml.safe_load`` that also refuses duplicate keys in a mapping."""
    loader = _Loader(text)
    loader.name = source  # shown in YAML error marks
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_duplicate_keys(node, "", set())
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError("", f"invalid YAML: {_marked(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError("", "invalid YAML: " + " ".join(str(exc).split())) from None
    finally:
        loader.dispose()


def _marked(exc: yaml.MarkedYAMLError) -> str:
    """``while <context> (<where>): <problem> (<where>)``, each mark as ``in "<file>", line
    L, column C``: the parts of PyYAML's message but the snippets of the document."""
    parts = []
    for text, mark in ((exc.context, exc.context_mark), (exc.problem, exc.problem_mark)):
        if text is None and mark is None:
            continue
        where = (
            ""
            if mark is None
            else f'in "{mark.name}", line {mark.line + 1}, column {mark.column + 1}'
        )
        parts.append(" ".join(p for p in (text or "", where) if p))
    if exc.note:
        parts.append(exc.note)
    return "; ".join(parts)


def _check_utf8(text: str, path: str) -> None:
    """Refuse a lone surrogate (``"\\ud800"`` YAML escapes: not valid UTF-8; Go's YAML parser,
    so Prometheus, refuses every such escape)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = text[exc.start]
            raise ConfigError(
                path, f"invalid UTF-8: a lone surrogate \\u{ord(bad):04x} (from a YAML escape)"
            ) from None


def _check_duplicate_keys(node: yaml.Node, path: str, seen: set[int]) -> None:
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode) and isinstance(node.value, str):
        _check_utf8(node.value, path)
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicate_keys(item, f"{path}[{i}]", seen)
    elif isinstance(node, yaml.MappingNode):
        lines: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            child = f"{path}.{key.value}" if path else str(key.value)
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                line = key.start_mark.line + 1
                if (key.tag, key.value) in lines:
                    first = lines[(key.tag, key.value)]
                    raise ConfigError(child, f"duplicate key (lines {first} and {line})")
                lines[(key.tag, key.value)] = line
            _check_duplicate_keys(value, child, seen)
