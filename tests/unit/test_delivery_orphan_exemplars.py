"""An exemplar-only series with no series of its labels in the same batch (an "orphan"), sent
in remote write 2.0 to a Prometheus 3 receiver.

Prometheus's RW 1.0 sender puts each exemplar in a TimeSeries of its own, after the samples
of the same WAL read: with scrapes larger than its ``max_samples_per_send`` the exemplars of
the first requests' series arrive in a later request, and rwrouter's own batches can cut
between a series and its exemplar frame too. Prometheus 3 answers 400 to a whole request with
such a series ("TimeSeries must contain at least one sample or histogram",
storage/remote/write_handler.go ``appendV2``), after committing the rest of it; when rwrouter
sent orphans alone, the 400 split the batch down to each orphan: with a real Prometheus 3.16,
5 batches of 100 orphans cost 325 requests and 165 error log lines (found by the adversarial
review of issue 12, ``breakit``), and every already written series of a split batch was
written again. Now the orphans are left out of the RW 2.0 request and counted as dropped
(``orphan_exemplar``; docs/configuration.md, "Remote write 2.0 out").

Fakes only, no sockets (the rig of test_delivery_protocol.py).
"""

from __future__ import annotations

import logging

import pytest

from rwrouter.protocol import Written
from rwrouter.send.refusals import Kind
from tests.support.rw2_frames import Exemplar, Frame, decode_v2
from tests.unit.test_delivery_protocol import NAME, Reply, Sent, items_of, rig, series


def prometheus3(sent: Sent) -> Reply:
    """Prometheus 3's RW 2.0 receiver: 400 for a request with an exemplar-only series (the
    rest committed, Written counts it), else 204 and exact counts."""
    request = decode_v2(sent.raw)
    written = Written(
        sum(len(t.samples) for t in request.timeseries),
        sum(len(t.histograms) for t in request.timeseries),
        sum(len(t.exemplars) for t in request.timeseries if t.samples or t.histograms),
    )
    orphans = [t for t in request.timeseries if not (t.samples or t.histograms)]
    return (400 if orphans else 204), written.headers()


def orphan(i: int) -> Frame:
    labels = (("__name__", "up"), ("i", str(i)))
    return Frame(labels, exemplars=(Exemplar((("trace_id", f"t{i}"),), b"\x00" * 8, 1_000),))


async def test_orphan_exemplars_cost_no_split_cascade(caplog: pytest.LogCaptureFixture) -> None:
    r = rig(prometheus3)
    batch = items_of([series(i) for i in range(50)] + [orphan(100 + i) for i in range(50)])
    with caplog.at_level(logging.INFO, logger="rwrouter.sending"):
        delivered = await r.deliverer.deliver(batch, Kind.SAMPLES)
    assert delivered == 50  # the samples, written once
    assert len(r.transport.sent) == 1, f"{len(r.transport.sent)} requests for one batch"
    assert not any(record.levelno >= logging.ERROR for record in caplog.records)
    dropped = r.metrics.registry.get_sample_value(
        "rwrouter_samples_dropped_total", {"destination": NAME, "reason": "orphan_exemplar"}
    )
    assert dropped == 50
