"""A torn record at the end of a disk queue (README "Guarantees": a torn write is contained),
and a corrupt record inside it.

rwrouter is stopped with SIGTERM while the workspace is down, so the workspace's queue stays on
disk (several segment files). The last record of the last segment is cut in the middle, as a
crash during its write would leave it. At the restart the router must start, count exactly one
corrupt record and that record's samples as dropped (``reason="corrupt"``), and deliver every
other acknowledged sample once the workspace is back. The record's samples are read with the
router's own record format before the cut, so the expectation is exact: what is missing at the
workspace afterwards is that record, nothing else.

A record corrupted in the middle of the first segment (one flipped byte: its checksum fails,
its length is sound) is found while reading instead and skipped alone; the metrics count it,
and every other record of that segment is delivered.
"""

from __future__ import annotations

import os

import pytest

from tests.faults.harness import (
    Report,
    Routers,
    SelfHosted,
    Workspace,
    wait_drained,
    wait_for,
)
from tests.faults.queue_files import queue_dir, queue_records
from tests.support.ledger import Ledger, by_name, make_streams, prometheus_keys, workspace_keys

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(90)]

TAG = "torn"
CRITICAL, BULK = f"critical_{TAG}_.*", f"bulk_{TAG}_.*"
#: 1 MiB bound: 64 KiB segments (a sixteenth), so a few seconds of traffic fill several.
WORKSPACE_QUEUE = {"max_disk_bytes": "1MiB"}


def test_torn_last_record_is_cut_counted_and_the_rest_delivered(
    workspace: Workspace, self_hosted: SelfHosted, routers: Routers, report: Report
) -> None:
    double = workspace.double
    double.down()
    router = routers.start(
        workspace=workspace, self_hosted=self_hosted, workspace_queue=WORKSPACE_QUEUE
    )
    directory = queue_dir(routers.storage, "workspace")
    ledger = Ledger(router.url, streams=make_streams(TAG, streams=2, series=40)).start()
    try:
        wait_for(
            lambda: len(list(directory.glob("*.seg"))) >= 3,
            timeout_s=30,
            what="three segment files in the workspace queue",
        )
    finally:
        ledger.stop(timeout_s=20)
    assert ledger.refused == [] and ledger.unacknowledged == set()
    router.stop(timeout_s=15)
    assert router.process.returncode == 0

    records = queue_records(directory)
    last = records[-1]
    segments = sorted(directory.glob("*.seg"))
    assert last.path == segments[-1], "the last record is not in the highest-numbered segment"
    cut_at = last.offset + 8 + last.length // 2  # 8: the record header (length, crc32)
    os.truncate(last.path, cut_at)
    router.restart()
    router.wait_ready(timeout_s=20)
    corrupt = router.metric_value("rwrouter_queue_corrupt_records_total", destination="workspace")
    dropped = router.metric_value(
        "rwrouter_samples_dropped_total", destination="workspace", reason="corrupt"
    )
    double.up()
    wait_drained(router, timeout_s=30)

    acked = ledger.acknowledged
    critical, bulk = by_name(acked, CRITICAL), by_name(acked, BULK)
    at_workspace = workspace_keys(double, name=CRITICAL)
    at_self_hosted = prometheus_keys(self_hosted.prom, f'{{__name__=~"{BULK}"}}')
    report(
        {
            "protocol": "rw1",  # the ledger's default input
            "segments": len(segments),
            "records_in_workspace_queue": len(records),
            "torn_record_samples": last.samples,
            "corrupt_records": corrupt,
            "dropped_corrupt_samples": dropped,
            "samples_acknowledged": len(acked),
            "samples_lost_beyond_torn_record": len((critical - last.keys) - at_workspace)
            + len(bulk - at_self_hosted),
        }
    )
    assert (corrupt, dropped) == (1, last.samples)
    assert critical - at_workspace == set(last.keys)  # that record, and nothing else
    assert at_workspace <= critical
    assert at_self_hosted == bulk


class CorruptionNotCounted(AssertionError):
    """The skipped records are not in the metrics."""


def test_corrupt_record_inside_the_queue_is_skipped_alone_and_counted(
    workspace: Workspace, self_hosted: SelfHosted, routers: Routers, report: Report
) -> None:
    double = workspace.double
    double.down()
    router = routers.start(
        workspace=workspace, self_hosted=self_hosted, workspace_queue=WORKSPACE_QUEUE
    )
    directory = queue_dir(routers.storage, "workspace")
    ledger = Ledger(router.url, streams=make_streams("corrupt", streams=2, series=40)).start()
    try:
        wait_for(
            lambda: len(list(directory.glob("*.seg"))) >= 3,
            timeout_s=30,
            what="three segment files in the workspace queue",
        )
    finally:
        ledger.stop(timeout_s=20)
    router.stop(timeout_s=15)
    first = sorted(directory.glob("*.seg"))[0]
    in_first = [r for r in queue_records(directory) if r.path == first]
    skipped = [in_first[len(in_first) // 2]]  # a flipped byte: that record alone is lost
    data = bytearray(first.read_bytes())
    data[skipped[0].offset + 8 + skipped[0].length - 1] ^= 0xFF
    first.write_bytes(bytes(data))
    router.restart()
    router.wait_ready(timeout_s=20)
    double.up()
    wait_drained(router, timeout_s=30)

    critical = by_name(ledger.acknowledged, "critical_corrupt_.*")
    at_workspace = workspace_keys(double, name="critical_corrupt_.*")
    lost_keys = set().union(*(r.keys for r in skipped))
    corrupt = router.metric_value("rwrouter_queue_corrupt_records_total", destination="workspace")
    dropped = router.metric_value(
        "rwrouter_samples_dropped_total", destination="workspace", reason="corrupt"
    )
    report(
        {
            "protocol": "rw1",
            "skipped_records": len(skipped),
            "skipped_samples": len(lost_keys),
            "corrupt_records": corrupt,
            "dropped_corrupt_samples": dropped,
        }
    )
    assert critical - at_workspace == lost_keys  # that record, nothing else
    if (corrupt, dropped) != (1, len(lost_keys)):
        raise CorruptionNotCounted(f"counted {corrupt} records, {dropped} samples")
