"""Build remote write 2.0 requests in tests, with the generated ``rwrouter.wire.write_v2_pb2``.

:func:`symbolize` turns an RW 1.0 ``WriteRequest`` into the RW 2.0 ``Request`` Prometheus's
sender would write for the same data (storage/remote/queue_manager.go ``populateV2TimeSeries``
and ``writev2.SymbolsTable``): a symbols table starting with "", each string once, in order of
first use; labels, then the series' metadata (help, unit); samples and histograms copied (their
field numbers are RW 1.0's), exemplars with label refs. Metadata per series comes from
``metadata`` (metric name -> (type, help, unit)), as Prometheus looks it up per series.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import snappy  # type: ignore[import-untyped,unused-ignore]

from rwrouter.protocol import RW2_MESSAGE, request_headers
from rwrouter.wire import remote_pb2, write_v2_pb2

HEADERS_V2 = request_headers(RW2_MESSAGE)
Meta = tuple[int, str, str]  # type (the enum value, RW 1.0 = RW 2.0), help, unit


class Symbols:
    """A symbols table: "" first, each string once."""

    def __init__(self) -> None:
        self.table: list[str] = [""]
        self._refs = {"": 0}

    def ref(self, text: str) -> int:
        if text not in self._refs:
            self._refs[text] = len(self.table)
            self.table.append(text)
        return self._refs[text]

    def refs(self, labels: Iterable[tuple[str, str]]) -> list[int]:
        out = []
        for name, value in labels:
            out += [self.ref(name), self.ref(value)]
        return out


def symbolize(
    request: remote_pb2.WriteRequest, *, metadata: Mapping[str, Meta] | None = None
) -> write_v2_pb2.Request:
    """The RW 2.0 request of ``request`` (labels in their order there; sort them first for
    what Prometheus sends). ``metadata``: per metric name, the series' metadata."""
    symbols = Symbols()
    out = write_v2_pb2.Request()
    for ts in request.timeseries:
        series = out.timeseries.add()
        labels = [(label.name, label.value) for label in ts.labels]
        series.labels_refs.extend(symbols.refs(labels))
        for sample in ts.samples:
            series.samples.add().MergeFromString(sample.SerializeToString())
        for histogram in ts.histograms:
            series.histograms.add().MergeFromString(histogram.SerializeToString())
        for ex in ts.exemplars:
            series.exemplars.add(
                labels_refs=symbols.refs((lab.name, lab.value) for lab in ex.labels),
                value=ex.value,
                timestamp=ex.timestamp,
            )
        meta = (metadata or {}).get(dict(labels).get("__name__", ""))
        if meta is not None:
            series.metadata.type = meta[0]
            series.metadata.help_ref = symbols.ref(meta[1])
            series.metadata.unit_ref = symbols.ref(meta[2])
    out.symbols.extend(symbols.table)
    return out


def encode_v2(request: write_v2_pb2.Request) -> bytes:
    """Serialise and snappy-block-compress (the HTTP body)."""
    return bytes(snappy.compress(request.SerializeToString()))
