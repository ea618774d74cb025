"""Go ``strings.ToLower`` / ``strings.ToUpper`` in Python (pure).

Go maps a string rune by rune with ``unicode.ToLower`` / ``unicode.ToUpper``, which use the
Unicode *simple* case mappings (UnicodeData.txt fields 13/12): one code point always maps to one
code point and there is no context. Python's ``str.lower()`` / ``str.upper()`` use the *full*
mappings (SpecialCasing.txt) and the final-sigma rule instead.

Approach: map each character on its own (so Python's final-sigma rule, which needs context, never
applies) and, where Python's full mapping of a single character yields more than one character,
fall back to the simple mapping:

- lower: the only such character is U+0130 'İ', whose simple lowercase is 'i'.
- upper: characters such as 'ß', 'ŉ', 'ﬀ' have no simple uppercase (they stay as they are); the
  Greek letters with ypogegrammeni (e.g. U+1FB3 'ᾳ') have a simple uppercase equal to their
  single-character titlecase (U+1FBC 'ᾼ'). So: the titlecase if it is one character, else the
  character itself.

``tests/unit/test_relabel_casemap.py`` checks these claims over every code point of the running
Python's Unicode database. Unicode versions can differ between Python and the Go that built a
given Prometheus for characters added in between; that is accepted.
"""

from __future__ import annotations

from functools import lru_cache

_SIMPLE_LOWER_EXCEPTIONS = {"\u0130": "i"}


@lru_cache(maxsize=4096)
def _lower_char(char: str) -> str:
    lowered = char.lower()
    if len(lowered) == 1:
        return lowered
    return _SIMPLE_LOWER_EXCEPTIONS.get(char, char)


@lru_cache(maxsize=4096)
def _upper_char(char: str) -> str:
    uppered = char.upper()
    if len(uppered) == 1:
        return uppered
    titled = char.title()
    return titled if len(titled) == 1 else char


def go_lower(value: str) -> str:
    """Go ``strings.ToLower``: Unicode simple lowercase mapping, rune by rune."""
    if value.isascii():
        return value.lower()
    return "".join(map(_lower_char, value))


def go_upper(value: str) -> str:
    """Go ``strings.ToUpper``: Unicode simple uppercase mapping, rune by rune."""
    if value.isascii():
        return value.upper()
    return "".join(map(_upper_char, value))
