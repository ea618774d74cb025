"""Names for stores that refuse UTF-8 (pure): Prometheus's escaping schemes, applied per
destination to its output label set after its ``write_relabel_configs``
(``metric_name_escaping_scheme``).

Source: prometheus/common v0.72.1 ``model/metric.go`` (``EscapeName``, ``isValidLegacyRune``,
``EscapeMetricFamily``, ``IsValidLegacyMetricName``). As ``EscapeMetricFamily`` does, a name
already valid under the legacy scheme is left as it is (even under ``dots``, whose
``EscapeName`` doubles the underscores of any name); another one is written with
``EscapeName``'s rules:

* ``allow-utf-8``: as it is;
* ``underscores``: every character outside the legacy set becomes ``_``
  (``http.server.duration`` -> ``http_server_duration``);
* ``dots``: ``_`` -> ``__``, ``.`` -> ``_dot_``, any other character outside the set -> ``__``
  (``http.server_duration`` -> ``http_dot_server__duration``);
* ``values``: the prefix ``U__``, ``_`` -> ``__``, any other character outside the set ->
  ``_<code point in lower-case hex>_`` (``a.b`` -> ``U__a_2e_b``).

The legacy set of a character at position ``i``: ``a-z A-Z _``, digits when ``i > 0``, and
``:`` in a metric name (the ``__name__`` value, ``[a-zA-Z_:][a-zA-Z0-9_:]*``). rwrouter's one
deviation: ``EscapeMetricFamily`` judges *label names* by the metric-name rule too, so it leaves
a ``:`` in a label name, which the managed workspace refuses (``invalid label``); rwrouter
judges label names by the label-name rule ``[a-zA-Z_][a-zA-Z0-9_]*`` and escapes a ``:`` like
any other character outside it (``a:b`` -> ``a_b``). Label values never change.

Two label names of one set that escape to the same name collide (rwrouter's rule): the label
whose original name sorts first (byte order) is kept and the other dropped; the ``__name__``
label is always kept (a label escaping to ``__name__`` is the one dropped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rwrouter.config.model import EscapingScheme
from rwrouter.wire.walk import encode_varint, fields

__all__ = [
    "ALLOW_UTF8",
    "DOTS",
    "SCHEMES",
    "UNDERSCORES",
    "VALUES",
    "Escaped",
    "escape_label_name",
    "escape_labels",
    "escape_metadata",
    "escape_metric_name",
    "escape_name",
    "is_legacy_label_name",
    "is_legacy_metric_name",
    "needs_escaping",
]

# The schemes (:class:`~rwrouter.config.model.EscapingScheme`, prometheus/common
# model.EscapingScheme), by the short names the escaping code uses.
ALLOW_UTF8, UNDERSCORES, DOTS, VALUES = EscapingScheme
SCHEMES = tuple(EscapingScheme)

LabelTuple = tuple[tuple[str, str], ...]
_NAME = "__name__"


def is_legacy_label_name(name: str) -> bool:
    """Whether ``name`` matches ``[a-zA-Z_][a-zA-Z0-9_]*`` (the legacy label-name rule)."""
    # For ASCII text, str.isidentifier() is exactly that pattern.
    return name.isascii() and name.isidentifier()


def is_legacy_metric_name(name: str) -> bool:
    """Whether ``name`` matches ``[a-zA-Z_:][a-zA-Z0-9_:]*`` (prometheus/common
    ``IsValidLegacyMetricName``)."""
    if not name.isascii():
        return False
    return name.isidentifier() or (":" in name and name.replace(":", "_").isidentifier())


def _legacy_char(char: str, index: int, colon: bool) -> bool:
    """prometheus/common ``isValidLegacyRune``; ``colon=False``: the label-name rule."""
    return (
        "a" <= char <= "z"
        or "A" <= char <= "Z"
        or char == "_"
        or (colon and char == ":")
        or ("0" <= char <= "9" and index > 0)
    )


def _escape(name: str, scheme: str, colon: bool) -> str:
    """``EscapeName``'s character rules (without its early return for legacy names)."""
    if not name or scheme == ALLOW_UTF8:
        return name
    if scheme not in SCHEMES:
        raise ValueError(f"unknown escaping scheme {scheme!r}")
    out = ["U__"] if scheme == VALUES else []
    for i, char in enumerate(name):
        valid = _legacy_char(char, i, colon)
        if scheme == UNDERSCORES:
            out.append(char if valid else "_")
        elif char == "_":
            out.append("__")
        elif scheme == DOTS:
            out.append("_dot_" if char == "." else char if valid else "__")
        elif valid:
            out.append(char)
        elif "\ud800" <= char <= "\udfff":  # an undecodable byte (surrogateescape): Go's
            out.append("_fffd_")  # range yields U+FFFD for it
        else:
            out.append(f"_{ord(char):x}_")
    return "".join(out)


def escape_name(name: str, scheme: str) -> str:
    """prometheus/common ``model.EscapeName(name, scheme)``: unchanged under ``allow-utf-8``,
    and under ``underscores`` and ``values`` when ``name`` is a legacy metric name; ``dots``
    escapes every name (``a_b`` -> ``a__b``). Raises ValueError for an unknown scheme."""
    if scheme in (UNDERSCORES, VALUES) and is_legacy_metric_name(name):
        return name
    return _escape(name, scheme, True)


def escape_metric_name(name: str, scheme: str) -> str:
    """A ``__name__`` value (or metadata family name) as ``scheme`` writes it: unchanged when
    it is a legacy metric name, else :func:`escape_name` (``EscapeMetricFamily``)."""
    return name if is_legacy_metric_name(name) else _escape(name, scheme, True)


def escape_label_name(name: str, scheme: str) -> str:
    """A label name as ``scheme`` writes it: unchanged when it is a legacy *label* name, else
    ``EscapeName``'s rules with ``:`` outside the set (rwrouter's deviation, see above)."""
    return name if is_legacy_label_name(name) else _escape(name, scheme, False)


def needs_escaping(labels: Sequence[tuple[str, str]]) -> bool:
    """Whether a label name is not a legacy label name or the ``__name__`` value not a legacy
    metric name (otherwise no scheme changes the set)."""
    for name, value in labels:
        if name == _NAME:
            if not is_legacy_metric_name(value):
                return True
        elif not (name.isascii() and name.isidentifier()):
            return True
    return False


@dataclass(frozen=True, slots=True)
class Escaped:
    """A label set as a scheme writes it. ``labels``: sorted by (escaped) name. ``renamed``:
    (original, escaped) label names that changed; ``metric_name``: (original, escaped)
    ``__name__`` value when it changed; ``dropped``: (dropped name, kept name), originals, of
    the labels dropped because their names collided."""

    labels: LabelTuple
    renamed: tuple[tuple[str, str], ...] = ()
    metric_name: tuple[str, str] | None = None
    dropped: tuple[tuple[str, str], ...] = ()

    @property
    def changed(self) -> bool:
        """Whether escaping changed the set."""
        return bool(self.renamed or self.metric_name or self.dropped)


def escape_labels(labels: Sequence[tuple[str, str]], scheme: str) -> Escaped:
    """``labels`` (unique names) as ``scheme`` writes them: names escaped, the ``__name__``
    value escaped as a metric name, colliding names resolved (module docstring). Raises
    ValueError for an unknown scheme."""
    if scheme == ALLOW_UTF8 or not needs_escaping(labels):
        return Escaped(tuple(labels))
    out: dict[str, str] = {}
    origin: dict[str, str] = {}
    renamed, dropped = [], []
    metric_name = None
    ordered = sorted(labels)
    for name, value in ordered:  # the metric name first: it is never the one dropped
        if name == _NAME:
            escaped_value = escape_metric_name(value, scheme)
            if escaped_value != value:
                metric_name = (value, escaped_value)
            out[_NAME], origin[_NAME] = escaped_value, _NAME
    for name, value in ordered:
        if name == _NAME:
            continue
        escaped = escape_label_name(name, scheme)
        if escaped != name:
            renamed.append((name, escaped))
        if escaped in out:
            dropped.append((name, origin[escaped]))
            continue
        out[escaped], origin[escaped] = value, name
    return Escaped(tuple(sorted(out.items())), tuple(renamed), metric_name, tuple(dropped))


def escape_metadata(payload: bytes, family: str, scheme: str) -> bytes:
    """A raw ``MetricMetadata`` payload with its ``metric_family_name`` (field 2, ``family``)
    escaped as a metric name, so it matches the escaped series; ``payload`` itself when that
    changes nothing. Other fields are kept byte for byte (RW 1.0 field numbers)."""
    escaped = escape_metric_name(family, scheme) if scheme != ALLOW_UTF8 else family
    if escaped == family:
        return payload
    name = escaped.encode()
    out = bytearray()
    for field, _, head, _, end in fields(payload, 0, len(payload), "metadata"):
        if field == 2:
            out += b"\x12" + encode_varint(len(name)) + name
        else:
            out += payload[head:end]
    return bytes(out)
