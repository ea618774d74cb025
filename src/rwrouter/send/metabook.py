"""A destination's metadata book (pure): the latest metadata entry routed to it per metric
family, and the lookup the RW 2.0 encoder uses (:mod:`rwrouter.wire.rw2_out`).

RW 2.0 carries metadata in every series (``TimeSeries.metadata``), RW 1.0 in separate
entries (``MetricMetadata``, sent by Prometheus every ``metadata_config.send_interval``). The
book keeps the entries routed to an RW 2.0 destination so each series it sends carries its
family's type, help and unit.

- Bounds: :data:`BOOK_ENTRIES` families (the managed workspace keeps metadata for 20,000
  metrics, and a Prometheus sends all of its families again every minute) and
  :data:`BOOK_BYTES` bytes of entries as received. Beyond either, the family updated longest
  ago goes first (``evicted``: counted by the caller).
- Lookup of a series' metric name (:meth:`MetadataBook.resolve`): the family of that exact
  name, else the name without the one suffix it ends with when the family found has a type
  that series of that suffix belong to: ``_total`` and ``_created`` counter; ``_bucket``,
  ``_sum``, ``_count``, ``_created`` histogram; ``_bucket``, ``_gsum``, ``_gcount`` gauge
  histogram; ``_sum``, ``_count``, ``_created`` summary; ``_info`` info (Prometheus
  ``scrape.isSeriesPartOfFamily``, plus OpenMetrics ``_created``). Nothing found: None.
- Names escaped for the destination (``metric_name_escaping_scheme``, applied by the router
  to series and metadata alike): under ``dots`` and ``values`` every ``_`` of a name that
  needed escaping doubles, so the suffix arrives doubled (``a.b_total`` -> ``U__a_2e_b__total``,
  family ``a.b`` -> ``U__a_2e_b``). With such a scheme, a name whose family is not found without
  the suffix is looked up without it and the ``_`` before it (``U__a_2e_b``), with the same type
  rule.
- Results are memoised in :attr:`MetadataBook.memo` (metric name -> metadata or None, at most
  :data:`MEMO_ENTRIES`), cleared whenever the book's content changes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from rwrouter.config.model import EscapingScheme
from rwrouter.errors import DecodeError
from rwrouter.routing.escape import ALLOW_UTF8, DOTS, VALUES
from rwrouter.wire.rw2_out import Meta
from rwrouter.wire.walk import LEN, VARINT, fields, read_varint

__all__ = ["BOOK_BYTES", "BOOK_ENTRIES", "MEMO_ENTRIES", "MetadataBook", "parse_entry"]

BOOK_ENTRIES = 20_000  # families
BOOK_BYTES = 8 * 1024 * 1024  # bytes of entries as received
MEMO_ENTRIES = 65_536  # metric names resolved

COUNTER, HISTOGRAM, GAUGEHISTOGRAM, SUMMARY, INFO = 1, 3, 4, 5, 6
MAX_TYPE = 7  # STATESET; a larger value is not a type RW 2.0 knows: sent as unknown (0)

_SUFFIXES: tuple[tuple[bytes, frozenset[int]], ...] = (
    (b"_bucket", frozenset((HISTOGRAM, GAUGEHISTOGRAM))),
    (b"_sum", frozenset((HISTOGRAM, SUMMARY))),
    (b"_count", frozenset((HISTOGRAM, SUMMARY))),
    (b"_gsum", frozenset((GAUGEHISTOGRAM,))),
    (b"_gcount", frozenset((GAUGEHISTOGRAM,))),
    (b"_total", frozenset((COUNTER,))),
    (b"_created", frozenset((COUNTER, HISTOGRAM, SUMMARY))),
    (b"_info", frozenset((INFO,))),
)


def parse_entry(framed: bytes) -> tuple[bytes, Meta]:
    """(family name, (type, help, unit)) of a framed RW 1.0 ``metadata`` field
    (``1a <len> MetricMetadata``: type 1, metric_family_name 2, help 4, unit 5; already
    checked at receive). A type above 7 reads as 0. Raises DecodeError when it is not one."""
    if not framed or framed[0] != 0x1A:
        raise DecodeError("not a framed metadata entry")
    length, start = read_varint(framed, 1, len(framed))
    if start + length != len(framed):
        raise DecodeError("metadata entry length does not match its frame")
    kind, family, help_text, unit = 0, b"", b"", b""
    for number, wire_type, _, vstart, vend in fields(framed, start, len(framed), "metadata"):
        if number == 1 and wire_type == VARINT:
            kind = read_varint(framed, vstart, vend)[0]
        elif wire_type == LEN and number in (2, 4, 5):
            value = framed[vstart:vend]
            if number == 2:
                family = value
            elif number == 4:
                help_text = value
            else:
                unit = value
    return family, (kind if kind <= MAX_TYPE else 0, help_text, unit)


class MetadataBook:
    """The latest metadata per family routed to one destination (see the module docstring).

    ``max_entries``/``max_bytes``: the bounds. ``nbytes``: bytes of the entries held.
    ``escaping``: the destination's ``metric_name_escaping_scheme`` (the names it holds and
    looks up are escaped by it).
    """

    def __init__(
        self,
        *,
        max_entries: int = BOOK_ENTRIES,
        max_bytes: int = BOOK_BYTES,
        escaping: EscapingScheme = ALLOW_UTF8,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._doubled = escaping in (DOTS, VALUES)  # escaped names have their "_" doubled
        self._entries: OrderedDict[bytes, tuple[bytes, Meta]] = OrderedDict()
        self._held: dict[bytes, bytes] = {}  # framed entry held -> its family (no re-parse)
        self.nbytes = 0
        self.memo: dict[bytes, Meta | None] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def update(self, framed: Iterable[bytes]) -> int:
        """Record framed RW 1.0 metadata entries (the latest per family wins); returns how
        many families were evicted to stay within the bounds. Entries that do not parse, or
        have no family name, are skipped (the receive side counted them as invalid)."""
        entries = self._entries
        changed = False
        held = self._held
        for entry in framed:
            known = held.get(entry)  # the same entry again (a sender repeats its metadata)
            if known is not None:
                entries.move_to_end(known)
                continue
            try:
                family, meta = parse_entry(entry)
            except DecodeError:
                continue
            if not family:
                continue
            old = entries.get(family)
            if old is not None:
                entries.move_to_end(family)
                self.nbytes -= len(old[0])
                del held[old[0]]
            entries[family] = (entry, meta)
            held[entry] = family
            self.nbytes += len(entry)
            changed = True
        evicted = 0
        while entries and (len(entries) > self.max_entries or self.nbytes > self.max_bytes):
            _, (gone, _) = entries.popitem(last=False)
            del held[gone]
            self.nbytes -= len(gone)
            evicted += 1
        if changed or evicted:
            self.memo.clear()
        return evicted

    def entries(self) -> list[bytes]:
        """Every framed entry held, the least recently updated first (for RW 1.0 sending)."""
        return [entry for entry, _ in self._entries.values()]

    def resolve(self, name: bytes) -> Meta | None:
        """The metadata of a series' metric name (see the module docstring), memoised."""
        meta = self._find(name)
        if len(self.memo) >= MEMO_ENTRIES:
            self.memo.clear()
        self.memo[name] = meta
        return meta

    def _find(self, name: bytes) -> Meta | None:
        found = self._entries.get(name)
        if found is not None:
            return found[1]
        for suffix, kinds in _SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                found = self._entries.get(name[: -len(suffix)])
                cut = len(suffix) + 1
                if found is None and self._doubled and len(name) > cut and name[-cut] == 0x5F:
                    found = self._entries.get(name[:-cut])  # "_" + suffix, doubled
                if found is not None and found[1][0] in kinds:
                    return found[1]
                return None
        return None
