"""No ``assert`` statement in the package, checked with ``ast``: ``python -O`` removes them, so
an invariant the router relies on is an explicit check that raises
(:class:`rwrouter.errors.InvariantError`, or the fitting rwrouter error)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "rwrouter"


def asserts_in(source: str) -> list[int]:
    """The line of every ``assert`` statement in ``source`` (nested ones too)."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Assert)]


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("x = 1\nassert x\n", [2]),
        ("def f(x):\n    if x:\n        assert x, 'why'\n", [3]),
        ("class C:\n    def m(self):\n        assert self\n", [3]),
        ("if x is None:\n    raise RuntimeError('x')\n", []),
        ("s = 'assert x'\n# assert y\n", []),
    ],
    ids=["top_level", "in_a_function", "in_a_method", "explicit_check", "text_only"],
)
def test_asserts_in(source: str, lines: list[int]) -> None:
    assert asserts_in(source) == lines


def test_the_package_has_no_assert_statements() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not path.name.endswith("_pb2.py")
        for line in asserts_in(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "python -O removes asserts: raise InvariantError (rwrouter.errors)"
