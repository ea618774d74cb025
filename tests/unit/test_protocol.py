"""rwrouter.protocol: content negotiation and the Written headers (RW 1.0 / RW 2.0 specs)."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from rwrouter.errors import UnsupportedError
from rwrouter.protocol import RW1_MESSAGE, RW2_MESSAGE, Written, message_of, request_headers

V2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"

NEGOTIATION = [
    # (name, Content-Encoding, Content-Type, message or the 415 reason's start)
    ("no_headers", None, None, RW1_MESSAGE),
    ("rw1_plain", "snappy", "application/x-protobuf", RW1_MESSAGE),
    ("rw1_named", "snappy", "application/x-protobuf;proto=prometheus.WriteRequest", RW1_MESSAGE),
    ("rw2", "snappy", V2, RW2_MESSAGE),
    ("rw2_spaced_quoted", "Snappy", f'application/x-protobuf; proto="{RW2_MESSAGE}"', RW2_MESSAGE),
    (
        "rw2_other_params_first",
        None,
        "application/x-protobuf;charset=x;proto=" + RW2_MESSAGE,
        RW2_MESSAGE,
    ),
    ("rw2_lower_case", None, V2.lower(), RW2_MESSAGE),
    ("empty_proto", None, "application/x-protobuf;proto=", RW1_MESSAGE),
    (
        "unknown_proto",
        None,
        "application/x-protobuf;proto=io.prometheus.write.v3.Request",
        "415 unsupported protobuf message 'io.prometheus.write.v3.Request'",
    ),
    ("json", None, "application/json", "415 unsupported Content-Type 'application/json'"),
    ("gzip", "gzip", "application/x-protobuf", "415 unsupported Content-Encoding 'gzip'"),
]


@pytest.mark.parametrize(
    ("name", "encoding", "content_type", "expected"), NEGOTIATION, ids=[c[0] for c in NEGOTIATION]
)
def test_message_of(
    name: str, encoding: str | None, content_type: str | None, expected: str
) -> None:
    if not expected.startswith("415 "):
        assert message_of(encoding, content_type) == expected
        return
    with pytest.raises(UnsupportedError) as info:
        message_of(encoding, content_type)
    assert info.value.status == 415
    assert str(info.value).startswith(expected.removeprefix("415 "))


def test_request_headers_per_message() -> None:
    assert request_headers(RW1_MESSAGE) == {
        "Content-Encoding": "snappy",
        "Content-Type": "application/x-protobuf",
        "X-Prometheus-Remote-Write-Version": "0.1.0",
    }
    assert request_headers(RW2_MESSAGE) == {
        "Content-Encoding": "snappy",
        "Content-Type": V2,
        "X-Prometheus-Remote-Write-Version": "2.0.0",
    }
    assert message_of("snappy", request_headers(RW2_MESSAGE)["Content-Type"]) == RW2_MESSAGE


WRITTEN = [
    # (name, headers, parsed)
    ("none", {}, None),
    (
        "all",
        {
            "X-Prometheus-Remote-Write-Samples-Written": "5",
            "X-Prometheus-Remote-Write-Histograms-Written": "2",
            "X-Prometheus-Remote-Write-Exemplars-Written": "1",
        },
        Written(5, 2, 1),
    ),
    ("lower_case_names", {"x-prometheus-remote-write-samples-written": "7"}, Written(7, 0, 0)),
    (
        "one_missing_counts_zero",
        {
            "X-Prometheus-Remote-Write-Samples-Written": "3",
            "X-Prometheus-Remote-Write-Exemplars-Written": "4",
        },
        Written(3, 0, 4),
    ),
    (
        "garbage_counts_zero",
        {
            "X-Prometheus-Remote-Write-Samples-Written": "-1",
            "X-Prometheus-Remote-Write-Histograms-Written": "1e3",
        },
        Written(0, 0, 0),
    ),
    # Prometheus ParseWriteResponseStats: "Empty means zero" and an empty value does not
    # confirm a 2.0 receiver (h.Get, whose value Go trims, is compared with "").
    (
        "empty_values_are_absent",
        {
            "X-Prometheus-Remote-Write-Samples-Written": "",
            "X-Prometheus-Remote-Write-Histograms-Written": " ",
            "X-Prometheus-Remote-Write-Exemplars-Written": "",
        },
        None,
    ),
    (
        "one_empty_among_others",
        {
            "X-Prometheus-Remote-Write-Samples-Written": "",
            "X-Prometheus-Remote-Write-Histograms-Written": "3",
        },
        Written(0, 3, 0),
    ),
]


@pytest.mark.parametrize(("name", "headers", "parsed"), WRITTEN, ids=[c[0] for c in WRITTEN])
def test_written_parse(name: str, headers: dict[str, str], parsed: Written | None) -> None:
    assert Written.parse(CIMultiDict(headers)) == parsed


def test_written_headers_round_trip() -> None:
    written = Written(samples=2000, histograms=3, exemplars=0)
    assert written.total == 2003
    assert Written.parse(CIMultiDict(written.headers())) == written
