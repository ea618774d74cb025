"""Replacement templates with Go ``regexp.Expand`` rules (pure).

Source of the rule: Go ``regexp.(*Regexp).expand`` and ``extract`` (used by Prometheus relabeling
for ``target_label`` and ``replacement``):

- ``$$`` is a literal ``$``.
- ``$name`` takes the *longest* run of Unicode letters (category L*), decimal digits (Nd) and
  ``_``; ``${name}`` needs the closing brace.
- A name is a group number only if it is all ASCII digits, has no leading zero and is < 1e8;
  otherwise it is a group name.
- A group that does not exist or did not participate expands to "".
- A malformed reference (``$`` followed by no name character, or ``${`` without a name and ``}``)
  is the literal ``$``; the text after it is read as ordinary template text.

Templates are parsed once (:func:`compile_template`) into literal pieces and group indexes, so
expanding them per series is a join.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

#: A compiled template: literal text (``str``) and group indexes (``int``).
Template = tuple[str | int, ...]

_MAX_GROUP_NUMBER = 100_000_000  # Go: "num >= 1e8" stops being a number


def _is_name_char(char: str) -> bool:
    # Go: unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_'
    if char.isascii():
        return char.isalnum() or char == "_"
    category = unicodedata.category(char)
    return category[0] == "L" or category == "Nd"


def _extract(text: str, start: int) -> tuple[str, int] | None:
    """Go ``extract``: the reference name after a ``$`` at ``start - 1``, and where it ends.

    Returns ``None`` for a malformed reference.
    """
    brace = start < len(text) and text[start] == "{"
    begin = start + 1 if brace else start
    end = begin
    while end < len(text) and _is_name_char(text[end]):
        end += 1
    if end == begin:
        return None
    name = text[begin:end]
    if brace:
        if end >= len(text) or text[end] != "}":
            return None
        end += 1
    return name, end


def _group_number(name: str) -> int | None:
    if not (name.isascii() and name.isdigit()):
        return None
    if len(name) > 1 and name[0] == "0":
        return None
    number = int(name)
    return number if number < _MAX_GROUP_NUMBER else None


def compile_template(template: str, *, group_index: Mapping[str, int], groups: int) -> Template:
    """Parse ``template`` against a regex with ``groups`` capture groups named by ``group_index``.

    References to groups that do not exist are dropped (they would expand to "").
    """
    parts: list[str | int] = []
    literal: list[str] = []
    pos = 0
    while True:
        dollar = template.find("$", pos)
        if dollar < 0:
            literal.append(template[pos:])
            break
        literal.append(template[pos:dollar])
        pos = dollar + 1
        if template.startswith("$", pos):
            literal.append("$")
            pos += 1
            continue
        extracted = _extract(template, pos)
        if extracted is None:
            literal.append("$")
            continue
        name, pos = extracted
        number = _group_number(name)
        index = group_index.get(name, -1) if number is None else number
        if 0 <= index <= groups:
            parts.append("".join(literal))
            literal.clear()
            parts.append(index)
    parts.append("".join(literal))
    return tuple(part for part in parts if part != "")


def expand(template: Template, match: Any, text: str) -> str:
    """Expand a compiled ``template`` with a regex ``match`` of ``text`` (an ``re2`` match,
    as :meth:`Regex.search <rwrouter.relabel.rules.Regex.search>` gives it: its spans are
    offsets in ``text``; a group that took no part expands to "")."""
    if len(template) == 1 and isinstance(template[0], str):
        return template[0]
    out: list[str] = []
    for part in template:
        if isinstance(part, str):
            out.append(part)
        else:
            start, end = match.span(part)
            if start >= 0:
                out.append(text[start:end])
    return "".join(out)
