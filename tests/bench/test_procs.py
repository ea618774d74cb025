"""bench/procs.py's TreeMonitor against real child processes: it measures CPU finer than the
10 ms clock tick (schedstat nanoseconds), counts the threads of a child and the children of a
child, and keeps what a thread used after that thread ended."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.procs import TreeMonitor, read_thread_ns

# Each child says "ready" once started, waits for a line, burns about ``burn`` CPU seconds in the
# way named, says "done" and waits for stdin to close.
CHILD = r"""
import subprocess, sys, threading, time
burn, how = float(sys.argv[1]), sys.argv[2]
print("ready", flush=True)
sys.stdin.readline()
def spin():
    end = time.thread_time() + burn
    while time.thread_time() < end:
        pass
if how == "main":
    spin()
elif how == "thread":
    t = threading.Thread(target=spin); t.start(); t.join()
elif how == "grandchild":
    subprocess.run([sys.executable, "-c", "import sys, time\nend = time.process_time() + "
                    + repr(burn) + "\nwhile time.process_time() < end: pass"], check=True)
print("done", flush=True)
sys.stdin.read()
"""
# (seconds burned, how, seconds more allowed). Up to one sampling period of an ended thread's or
# process's CPU can be missed, so the measure must reach 80 % of the burn.
CASES = {
    # 3 ms: less than one clock tick, so utime + stime would read 0 or 10 ms.
    "main thread, under one tick": (0.003, "main", 0.004),
    "a thread that ended": (0.2, "thread", 0.02),
    # The grandchild's interpreter start-up counts too.
    "a grandchild that ended": (0.05, "grandchild", 0.5),
}


@pytest.mark.parametrize(("burn", "how", "slack"), list(CASES.values()), ids=list(CASES))
def test_monitor_measures_what_the_tree_burned(burn: float, how: str, slack: float) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(burn), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as proc:
        if proc.stdout is None or proc.stdin is None:
            raise AssertionError("no pipes")
        proc.stdout.readline()
        monitor = TreeMonitor(proc.pid, period=0.001)
        monitor.start()
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        proc.stdout.readline()
        monitor.stop()
        proc.stdin.close()
        proc.wait(timeout=10)
    used = monitor.cpu_seconds()
    assert burn * 0.8 <= used < burn + slack, used


def test_thread_times_are_nanoseconds_by_thread() -> None:
    threads = read_thread_ns(os.getpid())
    assert threads is not None and threads, threads
    assert all(ns > 0 for ns in threads.values())


def test_a_process_gone_reads_as_no_threads() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=10)
    assert read_thread_ns(proc.pid) == {}
