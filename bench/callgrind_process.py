"""The whole rwrouter process, receive and send, for an instruction count: one ``rwrouter run``
under callgrind, fed a fixed set of RW 1.0 requests one after another, until both sinks hold
every sample; then stopped.

    python -m bench.callgrind_process --src <src> --requests N [--out FILE]

``<src>``: the ``src/`` of the rwrouter to count, its C extension built in place (run from the
repository root, so that ``bench`` is importable). Destination A keeps
:data:`bench.workload.A_REGEX`, B is the fallback, as in the benchmark
(:func:`bench.contenders.rwrouter_contender`), with the same queue defaults. Prints the process's
total instructions (callgrind's ``summary``); the count of ``--requests 0`` (start-up and
shutdown) subtracted from another gives what the requests cost. Asyncio's timing under
valgrind makes the batches' cut points vary a little from run to run: repeat a count to see
its spread (bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from bench.contenders import yaml_dump
from bench.workload import A_REGEX, load_or_generate

SEED, NODES, SCRAPES = 7, 30, 2
DEADLINE = 900.0  # seconds for one counted run at most


def _sink(name: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.sink", "--name", name, "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().split() if proc.stdout else []
    if len(line) != 4 or line[2] != "LISTENING":
        raise SystemExit(f"sink {name} did not start: {line}")
    return proc, int(line[-1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:
        body: bytes = answer.read()
        return body


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "snappy",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return int(answer.status)


def _wait(check: Callable[[], bool], what: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def count(src: Path, requests: int, out: Path) -> int:
    """Instructions of one ``rwrouter run`` fed ``requests`` requests (see the module doc)."""
    workload, _ = load_or_generate(SEED, NODES, SCRAPES)
    bodies = workload.bodies[:requests]
    expected = sum(workload.samples_per_body[:requests])
    sinks = [_sink("A"), _sink("B")]
    work = Path(tempfile.mkdtemp(prefix="rwrouter-cg-"))
    port = 19000 + os.getpid() % 1000
    config = {
        "server": {"listen_address": f"127.0.0.1:{port}"},
        "storage": {"path": str(work / "data")},
        "remote_write": [
            {
                "name": "A",
                "url": f"http://127.0.0.1:{sinks[0][1]}/api/v1/write",
                "write_relabel_configs": [
                    {"action": "keep", "source_labels": ["__name__"], "regex": A_REGEX}
                ],
            },
            {"name": "B", "url": f"http://127.0.0.1:{sinks[1][1]}/api/v1/write", "fallback": True},
        ],
    }
    (work / "rwrouter.yaml").write_text(yaml_dump(config))
    env = {**os.environ, "PYTHONPATH": str(src.resolve()), "PYTHONHASHSEED": "0"}
    router = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "rwrouter",
            "run",
            "--config",
            str(work / "rwrouter.yaml"),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + DEADLINE
    try:
        base = f"http://127.0.0.1:{port}"
        _wait(lambda: _get(base + "/-/ready") is not None, "rwrouter ready", deadline)
        for body in bodies:
            status = _post(base + "/api/v1/write", body)
            if status != 204:
                raise SystemExit(f"rwrouter answered {status}")

        def delivered() -> bool:
            got = [json.loads(_get(f"http://127.0.0.1:{p}/stats"))["samples"] for _, p in sinks]
            return bool(sum(got) == expected)

        _wait(delivered, f"{expected} samples at the sinks", deadline)
    finally:
        router.send_signal(signal.SIGTERM)
        _, err = router.communicate(timeout=120)
        for proc, _ in sinks:
            proc.terminate()
            proc.wait(timeout=10)
    for line in err.splitlines():
        if "Collected" in line:
            return int(line.split()[-1].replace(",", ""))
    raise SystemExit("no callgrind summary:\n" + err[-2000:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.callgrind_process", description=__doc__)
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--out", type=Path, default=Path(os.devnull))
    args = parser.parse_args(argv)
    print(count(args.src, args.requests, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
