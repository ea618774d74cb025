"""The workload as remote write 2.0: what a Prometheus 3 with ``protobuf_message:
io.prometheus.write.v2.Request`` sends for the same scrapes.

Each RW 1.0 request of :mod:`bench.workload` is re-encoded as one ``io.prometheus.write.v2.Request``
with its own symbols table (Prometheus 3 builds one per request: ``writev2.SymbolsTable``,
reset after each send) by rwrouter's own encoder, :func:`rwrouter.wire.rw2_out.encode_request`
(a ``WriteRequest`` body is RW1-form frames concatenated, what the encoder takes); then
snappy-compressed. Same series, same samples, same order, same request boundaries.

Metadata: by default none, so each series carries an empty ``Metadata`` (``2a 00``), which is
what Prometheus 3 sends unless ``--enable-feature=metadata-wal-records`` (or
``type-and-unit-labels``) is on (``storage/remote/queue_manager.go``,
``populateV2TimeSeries``: "metadata is sent when ..."). With ``metadata=True``: type (counter
or gauge, from the generator) and a help text per metric name, as Prometheus 3 sends with
``metadata-wal-records`` (the help texts here are the generator's, not the exporters').
"""

from __future__ import annotations

import time

import snappy  # type: ignore[import-untyped,unused-ignore]

from bench.workload import Workload, fleet_series
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE
from rwrouter.wire.rw2_out import Encoded, Meta, encode_request

INPUTS = {"rw1": RW1_MESSAGE, "rw2": RW2_MESSAGE}
"""The ``--input`` values and the protobuf message each sends."""

COUNTER, GAUGE = 1, 2  # MetricMetadata.MetricType (RW 1.0 and RW 2.0 share the values)


def metadata_book(seed: int) -> dict[bytes, Meta | None]:
    """Per metric name (UTF-8 bytes; every node has them all): (type, help, unit) as
    :mod:`rwrouter.wire.rw2_out` takes them; counter or gauge as the generator draws the
    values; help ``b"<name> (rwrouter bench)."``; no unit."""
    book: dict[bytes, Meta | None] = {}
    for series in fleet_series(seed, 1):
        name = series.name.encode()
        kind = COUNTER if series.counter else GAUGE
        book.setdefault(name, (kind, name + b" (rwrouter bench).", b""))
    return book


def encode_body(body: bytes, book: dict[bytes, Meta | None]) -> Encoded:
    """One snappy-compressed RW 1.0 request body as an RW 2.0 Request (uncompressed), with
    the metadata of ``book`` (an empty book: an empty Metadata per series). Raises what
    :func:`~rwrouter.wire.rw2_out.encode_request` raises for a malformed body."""
    return encode_request(snappy.uncompress(body), book, _unknown)


def _unknown(_name: bytes) -> Meta | None:
    """No metadata for a name outside the book."""
    return None


def as_rw2(workload: Workload, *, metadata: bool = False) -> Workload:
    """``workload`` with every body re-encoded as a snappy-compressed RW 2.0 Request (see the
    module docstring); counts as they were, ``raw_bytes``/``compressed_bytes`` of the new
    bodies, ``generate_seconds`` the encoding time. Raises ValueError when a Request does not
    carry exactly its RW 1.0 body's samples."""
    start = time.perf_counter()
    book = metadata_book(workload.seed) if metadata else {}
    bodies: list[bytes] = []
    raw = 0
    for i, body in enumerate(workload.bodies):
        encoded = encode_body(body, book)
        if (encoded.samples, encoded.histograms, encoded.exemplars) != (
            workload.samples_per_body[i],
            0,
            0,
        ):
            raise ValueError(
                f"request {i}: RW 2.0 encoding carries {encoded[1:]}, expected "
                f"{workload.samples_per_body[i]} samples"
            )
        raw += len(encoded.request)
        bodies.append(snappy.compress(encoded.request))
    return Workload(
        seed=workload.seed,
        nodes=workload.nodes,
        scrapes=workload.scrapes,
        bodies=bodies,
        samples_per_body=list(workload.samples_per_body),
        series_per_scrape=workload.series_per_scrape,
        samples_a=workload.samples_a,
        samples_b=workload.samples_b,
        raw_bytes=raw,
        compressed_bytes=sum(len(b) for b in bodies),
        requests_per_scrape=workload.requests_per_scrape,
        generate_seconds=time.perf_counter() - start,
    )


def sizes_line(rw1: Workload, rw2: Workload) -> str:
    """One report line: bytes per sample of the request bodies, snappy and raw, RW 1.0 and
    RW 2.0, and their ratio."""
    n = max(1, rw1.samples)
    c1, c2 = rw1.compressed_bytes / n, rw2.compressed_bytes / n
    r1, r2 = rw1.raw_bytes / n, rw2.raw_bytes / n
    return (
        f"request bodies, bytes per sample: RW 1.0 {c1:.1f} snappy ({r1:.1f} raw), "
        f"RW 2.0 {c2:.1f} snappy ({r2:.1f} raw); RW2/RW1 {c2 / c1:.2f} snappy, "
        f"{r2 / r1:.2f} raw"
    )
