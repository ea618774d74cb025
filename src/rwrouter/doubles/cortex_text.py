"""Cortex's texts for the workspace double's refusals (pure): Go's ``%q`` quoting and a
series as Cortex's ``formatLabelSet`` writes it. Written for the double from Go's ``strconv``
rules and Cortex ``pkg/util/validation``, not shared with rwrouter's own code (the double
checks it)."""

from __future__ import annotations

__all__ = ["Labels", "cortex_series", "go_quote"]

#: A series identity: (name, value) pairs in the order received (they are validated sorted).
Labels = tuple[tuple[str, str], ...]

_GO_SHORT = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x5C: "\\\\",
    0x22: '\\"',
}


def go_quote(text: str, limit: int = 200) -> str:
    """Go's ``fmt`` ``%.200q`` of ``text``: its first ``limit`` characters, double-quoted,
    with Go's escapes (``strconv.Quote``: printable characters as they are)."""
    out = ['"']
    for char in text[:limit]:
        code = ord(char)
        if code in _GO_SHORT:
            out.append(_GO_SHORT[code])
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def cortex_series(labels: Labels) -> str:
    """A series as Cortex's ``formatLabelSet`` writes it in validation messages:
    ``name{a="x", b="y"}`` (labels in the order received, values Go-quoted)."""
    name, rest = "", []
    for label_name, value in labels:
        if label_name == "__name__" and not name and value:
            name = value
        else:
            rest.append(f"{label_name}={go_quote(value, limit=1 << 30)}")
    if not rest:
        return name or "{}"
    return f"{name}{{{', '.join(rest)}}}"
