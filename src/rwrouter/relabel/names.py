"""Prometheus label-name validation schemes and Go string quoting (pure).

Sources: prometheus/common ``model/metric.go`` (``ValidationScheme.IsValidLabelName``),
Prometheus ``model/relabel/relabel.go`` (``relabelTargetLegacy``,
``isValidLabelNameWithRegexVarFn``) and Go ``strconv.Quote``.

- ``utf8``: a label name is any non-empty valid UTF-8 text (a Python ``str`` is valid UTF-8
  unless it holds a lone surrogate, which only a ``"\\ud800"``-style YAML escape produces).
- ``legacy``: ``[a-zA-Z_][a-zA-Z0-9_]*``.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

import re2  # type: ignore[import-untyped]

__all__ = [
    "LEGACY",
    "SCHEMES",
    "UTF8",
    "ValidationScheme",
    "go_quote",
    "is_legacy_label_name",
    "is_utf8_label_name",
    "is_valid_utf8",
    "is_valid_with_references",
    "name_check",
]

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
# Prometheus's relabelTargetLegacy: a label name that may contain $var / ${var} references.
_RELABEL_TARGET = re2.compile(r"^(?:(?:[a-zA-Z_]|\$(?:\{\w+\}|\w+))+\w*)+$", _RE2_OPTIONS)


class ValidationScheme(StrEnum):
    """The name validation schemes (prometheus/common ``model.ValidationScheme``, YAML
    spelling: ``global.metric_name_validation_scheme``)."""

    UTF8 = "utf8"
    LEGACY = "legacy"


UTF8, LEGACY = ValidationScheme.UTF8, ValidationScheme.LEGACY
SCHEMES = tuple(ValidationScheme)


def is_valid_utf8(text: str) -> bool:
    """Whether ``text`` encodes to valid UTF-8 (a Python str fails only with lone surrogates)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_legacy_label_name(name: str) -> bool:
    """Legacy Prometheus label name: ``[a-zA-Z_][a-zA-Z0-9_]*``."""
    return name.isascii() and name.isidentifier()


def is_utf8_label_name(name: str) -> bool:
    """UTF-8 Prometheus label name: non-empty, valid UTF-8."""
    return name != "" and is_valid_utf8(name)


_NAME_CHECKS: dict[str, Callable[[str], bool]] = {
    UTF8: is_utf8_label_name,
    LEGACY: is_legacy_label_name,
}


def name_check(scheme: str) -> Callable[[str], bool]:
    """The label-name check of ``scheme`` (``utf8`` or ``legacy``): prometheus/common
    ``ValidationScheme.IsValidLabelName``. ``ValueError`` for an unknown scheme."""
    try:
        return _NAME_CHECKS[scheme]
    except KeyError:
        raise ValueError(f"unknown name validation scheme {scheme!r}") from None


def is_valid_with_references(text: str, scheme: str) -> bool:
    """A replace target with ``$`` or a labelmap replacement (Prometheus's
    ``isValidLabelNameWithRegexVarFn``): any label name under utf8, ``relabelTargetLegacy``
    under legacy."""
    if scheme == UTF8:
        return is_utf8_label_name(text)
    return _RELABEL_TARGET.search(text) is not None


_GO_CONTROL_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` (``%q``): double quotes; ``\\``, ``\"``, ``\\a`` ``\\b`` ``\\f``
    ``\\n`` ``\\r`` ``\\t`` ``\\v`` escaped; other non-printable characters as ``\\xHH`` (ASCII),
    ``\\uHHHH`` or ``\\UHHHHHHHH``. Printable means Unicode letters, marks, numbers, punctuation,
    symbols and the ASCII space, for Go (``strconv.IsPrint``) and Python (``str.isprintable``)
    alike. Compared with Go 1.26's ``strconv.Quote`` over every code point: the same but for
    the characters Unicode assigned after the running Python's Unicode version (3.11: 14.0),
    which Python takes as unassigned and escapes."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif char in _GO_CONTROL_ESCAPES:
            out.append(_GO_CONTROL_ESCAPES[char])
        elif 0xD800 <= ord(char) <= 0xDFFF:  # not UTF-8 (refused): shown as it was escaped
            out.append(f"\\u{ord(char):04x}")
        elif not char.isprintable() and ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif not char.isprintable():
            out.append(f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)
