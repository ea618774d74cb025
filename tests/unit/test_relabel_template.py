"""Replacement templates follow Go ``regexp.Expand`` (used by Prometheus relabeling)."""

from __future__ import annotations

import pytest

from rwrouter.relabel.rules import Regex
from rwrouter.relabel.template import compile_template, expand

# The regex has group 1 = "ab", group 2 = "cd", named group "name" (3) = "ef", and "ünï" (4) = "g";
# groups 5..10 exist: 5 = "h", 10 = "TEN"; group 11 does not participate.
REGEX = r"(ab)(cd)(?P<name>ef)(?P<ünï>g)(h)(i)(j)(k)(l)(TEN)(zz)?"
VALUE = "abcdefghijklTEN"
# The same groups around non-ASCII text: matched as str, not as bytes (Regex.search).
WIDE_REGEX = r"é?" + REGEX
WIDE_VALUE = "é" + VALUE

CASES = [
    ("plain_number", "$1", "ab"),
    ("braced_number", "${1}", "ab"),
    ("longest_name_run", "$1_x", ""),
    ("braced_then_suffix", "${1}_x", "ab_x"),
    ("two_digit_group", "$10", "TEN"),
    ("two_digit_braced", "${1}0", "ab0"),
    ("dollar_dollar", "$$", "$"),
    ("dollar_dollar_one", "$$1", "$1"),
    ("triple_dollar", "$$$1", "$ab"),
    ("open_brace_alone", "${", "${"),
    ("open_brace_no_close", "${1", "${1"),
    ("empty_braces", "${}", "${}"),
    ("trailing_dollar", "x$", "x$"),
    ("dollar_punct", "$-1", "$-1"),
    ("named_group", "$name", "ef"),
    ("named_group_braced", "${name}!", "ef!"),
    ("unicode_name", "$ünï", "g"),
    ("unicode_letters_extend_name", "$nameé", ""),
    ("unknown_name", "$nope", ""),
    ("unmatched_group", "[$11]", "[]"),
    ("missing_group", "[$99]", "[]"),
    ("leading_zero_is_a_name", "$01", ""),
    ("zero_is_whole_match", "$0", VALUE),
    ("huge_number_is_a_name", "$100000000", ""),
    ("literal_only", "plain", "plain"),
    ("empty", "", ""),
    ("mixed", "a${1}b${2}c$2c$$", "aabbcdc$"),
    ("non_ascii_digit_is_a_name", "$\u0661", ""),
]


@pytest.mark.parametrize(
    "regex, value", [(REGEX, VALUE), (WIDE_REGEX, WIDE_VALUE)], ids=["ascii", "wide"]
)
@pytest.mark.parametrize(
    ("template", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_expand(regex: str, value: str, template: str, expected: str) -> None:
    regexp = Regex.compile(regex)
    match = regexp.search(value)
    assert match is not None
    pattern = regexp.pattern
    compiled = compile_template(template, group_index=pattern.groupindex, groups=pattern.groups)
    if expected == VALUE:  # $0: the whole match
        expected = value
    assert expand(compiled, match, value) == expected
