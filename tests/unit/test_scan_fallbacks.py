"""What the compiled per-series loop hands to Python, per series: a request of many series of
an unusual but valid shape must not cost a Python call each.

The compiled ``scan_request`` (``_scan.c``) takes a series of labels and plain samples itself
and calls ``rwrouter.wire.codec.split_series`` for any other shape. Each call costs about 1.5
to 2 us, so a request of tiny series of such a shape is a cheap way to keep a decode lane
busy: 64 MiB decoded of empty series (``0a 00``, or ``2a 00`` in remote write 2.0, which
converts to it) is about 3 MB compressed and cost 44 s of CPU (empty) or 36 s (one empty
histogram or exemplar each) when measured, while 64 MiB of plain series take well under a
second. Found by the adversarial review of issue 12 (``breakit``). Empty and labels-only series
are taken by the compiled loop now; not yet the shapes with histograms or exemplars, which need
their checks (``validate.check_histogram``, ``check_exemplar``) in C.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import pytest

from rwrouter.routing import Router
from rwrouter.wire import codec
from rwrouter.wire.accelerator import ACCELERATED
from tests.unit.test_scan_paths import make_routes

pytestmark = pytest.mark.skipif(not ACCELERATED, reason="the compiled accelerator is not built")

LABEL = b"\x0a\x0d\x0a\x08__name__\x12\x01u"  # __name__="u"
SAMPLE = b"\x12\x0b\x09" + b"\x00" * 8 + b"\x10\x01"


def frame(payload: bytes) -> bytes:
    return b"\x0a" + bytes([len(payload)]) + payload


XFAIL = pytest.mark.xfail(
    strict=True,
    reason="the compiled loop calls codec.split_series for "
    "each series of this shape (see the module docstring)",
)
# (id, a TimeSeries payload)
SHAPES = [
    pytest.param(LABEL + SAMPLE, id="plain_samples"),
    pytest.param(b"", id="empty_series"),
    pytest.param(LABEL, id="labels_only"),
    pytest.param(LABEL + b"\x22\x00", id="histogram_only", marks=XFAIL),
    pytest.param(LABEL + b"\x1a\x00", id="exemplar_only", marks=XFAIL),
]


def python_calls(body: bytes) -> int:
    """How often routing ``body`` (cold) calls ``codec.split_series``."""
    target = codec.split_series.__code__
    calls = 0

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        nonlocal calls
        if event == "call" and frame.f_code is target:
            calls += 1

    router = Router(global_rules=(), routes=make_routes())
    sys.setprofile(profile)
    try:
        router.route(body)
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("payload", SHAPES)
def test_many_series_of_one_shape_cost_no_python_call_each(payload: bytes) -> None:
    assert python_calls(frame(payload) * 1000) == 0
