"""``LabelBuilder`` against a direct model of Prometheus's ``labels.Builder``
(``model/labels/labels_common.go``): the same contents, ``Get`` and ``Range`` order after any
sequence of ``Set``/``Del``.

The model keeps Prometheus's three parts: ``base`` (sorted, never changed), ``add`` (a list of
pairs: ``Set`` of a name in it updates the value in place, else appends; ``Del`` removes it) and
``del`` (names; ``Del`` appends, ``Set`` does not remove). ``Range`` walks the base labels in
neither ``del`` nor ``add``, then ``add`` in order.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rwrouter.relabel import LabelBuilder


class GoBuilder:
    """Prometheus ``labels.Builder``, transcribed."""

    def __init__(self, base: dict[str, str]) -> None:
        self.base = sorted(base.items())
        self.add: list[list[str]] = []
        self.deleted: list[str] = []

    def delete(self, name: str) -> None:
        self.add = [pair for pair in self.add if pair[0] != name]
        self.deleted.append(name)

    def set(self, name: str, value: str) -> None:
        if value == "":
            self.delete(name)
            return
        for pair in self.add:
            if pair[0] == name:
                pair[1] = value
                return
        self.add.append([name, value])

    def get(self, name: str) -> str:
        for pair_name, value in self.add:
            if pair_name == name:
                return value
        if name in self.deleted:
            return ""
        return dict(self.base).get(name, "")

    def range(self) -> list[tuple[str, str]]:
        added = {name for name, _ in self.add}
        walked = [(n, v) for n, v in self.base if n not in self.deleted and n not in added]
        return walked + [(n, v) for n, v in self.add]


NAMES = st.sampled_from(["a", "b", "c", "d", "a.b", "z", "__name__"])
VALUES = st.sampled_from(["", "1", "2", "x"])


@settings(max_examples=400, deadline=None)
@given(
    base=st.dictionaries(NAMES, VALUES.filter(bool), max_size=5),
    operations=st.lists(st.tuples(NAMES, VALUES), max_size=12),
)
def test_label_builder_is_prometheus_builder(
    base: dict[str, str], operations: list[tuple[str, str]]
) -> None:
    ours, theirs = LabelBuilder.of(base), GoBuilder(base)
    for name, value in operations:  # value "" is Del
        ours.set(name, value)
        theirs.set(name, value)
        assert list(ours.items()) == theirs.range()
        assert all(ours.get(n, "") == theirs.get(n) for n in ("a", "b", "c", "d", "a.b", "z"))


def test_of_sorts_any_input() -> None:
    assert list(LabelBuilder.of([("b", "1"), ("a", "2")])) == ["a", "b"]
    assert list(LabelBuilder.of({"z": "1", "a.b": "2", "A": "3"})) == ["A", "a.b", "z"]
    assert list(LabelBuilder.of((("é", "1"), ("z", "2")))) == ["z", "é"]  # code point order
