"""lowercase/uppercase follow Go's rune-by-rune Unicode *simple* case mapping."""

from __future__ import annotations

import sys

import pytest

from rwrouter.relabel.casemap import go_lower, go_upper

CASES = [
    # (id, function, input, expected)
    ("ascii_lower", go_lower, "GPU_Util", "gpu_util"),
    ("ascii_upper", go_upper, "gpu_util", "GPU_UTIL"),
    ("dotted_capital_i_lowers_to_i", go_lower, "İSTANBUL", "istanbul"),
    ("no_final_sigma", go_lower, "ΟΔΟΣ", "οδοσ"),
    ("sharp_s_stays", go_upper, "straße", "STRAßE"),
    ("ligature_stays", go_upper, "ﬀ", "ﬀ"),
    ("n_apostrophe_stays", go_upper, "ŉ", "ŉ"),
    ("ypogegrammeni_to_titlecase", go_upper, "ᾳ", "ᾼ"),
    ("titlecase_upper_stays", go_upper, "ᾼ", "ᾼ"),
    ("dz_digraph_upper", go_upper, "ǅ", "Ǆ"),
    ("dz_digraph_lower", go_lower, "ǅ", "ǆ"),
    ("dotless_i_upper", go_upper, "\u0131", "I"),
    ("long_s_upper", go_upper, "\u017f", "S"),
    ("capital_sharp_s_lower", go_lower, "ẞ", "ß"),
    ("cyrillic", go_upper, "привет", "ПРИВЕТ"),
    ("emoji_untouched", go_lower, "A🙂B", "a🙂b"),
]


@pytest.mark.parametrize(
    ("function", "value", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_case_mapping(function: object, value: str, expected: str) -> None:
    assert callable(function)
    assert function(value) == expected


def test_one_rune_in_one_rune_out_everywhere() -> None:
    for code_point in range(sys.maxunicode + 1):
        char = chr(code_point)
        assert len(go_lower(char)) == 1
        assert len(go_upper(char)) == 1


def test_only_dotted_capital_i_has_a_multi_char_full_lowercase() -> None:
    # The claim casemap.py relies on for the running Python's Unicode database.
    multi = [chr(c) for c in range(sys.maxunicode + 1) if len(chr(c).lower()) != 1]
    assert multi == ["\u0130"]
