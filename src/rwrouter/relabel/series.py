"""A label set as text (pure), for the relabel debugger (:mod:`rwrouter.cli.relabel`).

Read (:func:`parse_series`) in the Prometheus 3 text format / PromQL forms
``{__name__="m", gpu="0"}``, ``m{gpu="0"}`` or a bare ``m``, UTF-8 names quoted:
``{"service.name"="api"}``, and a lone quoted string in the braces is the metric name:
``{"http.server.duration", job="a"}`` (Prometheus ``model/textparse/promparse.go``, PromQL
``label_set_item``). ``"my.metric"{...}`` is refused: neither Prometheus's text parser nor
PromQL takes a quoted name before the braces. Strings are double-quoted (``\\"``, ``\\\\``,
``\\n`` and Go's other escapes), single-quoted or in backquotes (raw), as in PromQL; a label with
an empty value is absent.

Written (:func:`format_labels`) as Prometheus 3 prints label sets: names outside the legacy
character set and all values quoted as Go's ``strconv.Quote`` does (``labels.Labels.String``),
the metric name in front when it is a legacy metric name (PromQL), else as ``__name__``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rwrouter.errors import SeriesError
from rwrouter.relabel.names import go_quote, is_legacy_label_name

Labels = tuple[tuple[str, str], ...]

__all__ = ["Labels", "SeriesError", "format_labels", "format_name", "parse_series", "quote_value"]


_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SPACE = re.compile(r"\s*")
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
}
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
        if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
            self.pos -= 1  # Go's strconv.Unquote: not a Unicode code point
            raise self.fail(f"escape \\{char}{code} is not a Unicode character")
        if (char == "x" or base == 8) and value > 127:
            # Go: \xHH and \ooo are bytes; alone they must be ASCII to stay valid UTF-8.
            self.pos -= 1
            raise self.fail(
                f"escape \\{char if base == 16 else ''}{code} is a byte over 0x7f, "
                "not valid UTF-8 on its own (write the character itself)"
            )
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
    elif reader.peek() in ('"', "'", "`"):
        raise reader.fail(
            'a quoted metric name goes inside the braces, {"my.metric", label="value"}:'
        )
    reader.skip_space()
    if reader.peek() == "{":
        reader.pos += 1
        _braces(reader, add)
    elif name is None:
        raise reader.fail("expected a metric name or {")
    reader.skip_space()
    if reader.pos < len(text):
        raise _with_hint(reader, f"unexpected {text[reader.pos]!r}")
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
                raise _with_hint(reader, f"expected = after {name}")
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


def _with_hint(reader: _Reader, what: str) -> SeriesError:
    """``reader.fail(what)``, with a hint when the text goes on with a character that only a
    quoted (UTF-8) name may hold (``gpu.utilization`` unquoted)."""
    error = reader.fail(what)
    char = reader.peek()
    if not char or char.isspace() or char.isalnum() or char in "_:{}=,!~\"'`":
        return error
    return SeriesError(
        f"{error} (a name with {char!r} in it is quoted, as Prometheus 3 "
        'writes it: {"gpu.utilization", "service.name"="x"})'
    )


def quote_value(value: str) -> str:
    """``value`` double-quoted as Prometheus 3 prints it (Go ``strconv.Quote``: ``\\``, ``"``,
    controls and other non-printable characters escaped)."""
    return go_quote(value)


def format_name(name: str) -> str:
    """A label name as Prometheus 3 prints it (``labels.Labels.String``): bare when it is a
    legacy label name, else quoted as Go's ``strconv.Quote`` does."""
    return name if is_legacy_label_name(name) else go_quote(name)


def format_labels(labels: Labels) -> str:
    """``m{a="1", "service.name"="x"}`` (PromQL), or ``{a="1"}`` when there is no ``__name__``
    (or it is not a legacy metric name: then ``{__name__="my.metric", ...}``, as
    ``labels.Labels.String`` writes it); names and values quoted by :func:`format_name` and
    :func:`quote_value`."""
    mapping = dict(labels)
    metric = mapping.get("__name__")
    prefix = ""
    if metric is not None and _METRIC.fullmatch(metric):
        prefix = metric
        del mapping["__name__"]
    pairs = ", ".join(f"{format_name(k)}={quote_value(v)}" for k, v in mapping.items())
    return f"{prefix}{{{pairs}}}" if pairs or not prefix else prefix
