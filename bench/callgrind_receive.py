"""The RW 1.0 receive path for an instruction count: N passes of decompress, route and
encode_share over the same requests (every label set cached after the first pass).

    PYTHONPATH=<src>:. valgrind --tool=callgrind python -m bench.callgrind_receive N

Instructions of N passes minus those of 0 passes are the path's own (bench/RESULTS.md, "RW 1.0
speed before and after issue 12's changes"); ``<src>`` is the ``src/`` of the rwrouter to
count, its C extension built in place. Destination A keeps the workload's allowlist
(:data:`bench.workload.A_REGEX`), B is the fallback, as in the benchmark.
"""

from __future__ import annotations

import sys

from bench.workload import A_REGEX, load_or_generate
from rwrouter.config import parse_config
from rwrouter.queue.records import encode_share
from rwrouter.routing import build_router
from rwrouter.wire import decompress

CONFIG = f"""
remote_write:
  - name: a
    url: http://127.0.0.1:1/api/v1/write
    write_relabel_configs:
      - {{source_labels: [__name__], regex: "{A_REGEX}", action: keep}}
  - name: b
    url: http://127.0.0.1:2/api/v1/write
    fallback: true
"""
RECEIVED_MS = 1_700_000_000_000


def main(passes: int) -> None:
    router = build_router(parse_config(CONFIG, env={}))
    workload, _ = load_or_generate(7, 30, 2)
    for n in range(passes):
        for body in workload.bodies:
            routed = router.route(decompress(body, max_decoded_bytes=64 << 20), now=float(n))
            for share in routed.shares:
                encode_share(share, received_ms=RECEIVED_MS, max_body_bytes=8 << 20)
    print(f"{len(workload.bodies)} bodies, {passes} passes, {len(router)} label sets cached")


if __name__ == "__main__":
    main(int(sys.argv[1]))
