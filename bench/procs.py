"""Process helpers for the runner: CPU and peak RSS of a process tree from /proc, and child
processes that never outlive the runner.

CPU: the run time of every thread, ``/proc/<pid>/task/<tid>/schedstat`` (first field,
nanoseconds), summed over the root process, every descendant and every thread seen while sampling
(a thread or process that exits keeps its last sampled value: up to one sampling period of its CPU
can be missed). Where schedstat cannot be read, ``utime + stime`` of ``/proc/<pid>/stat`` (clock
ticks of 10 ms, converted to seconds) stands in: too coarse for runs shorter than a second.
Peak RSS: ``VmHWM`` of ``/proc/<pid>/status`` (bytes), summed over the same processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What we read of one process: parent pid, start time (ticks since boot: with the pid it
    identifies the process), CPU seconds (utime + stime)."""

    pid: int
    ppid: int
    start_ticks: int
    cpu_seconds: float


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` of one process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid 4, utime 14, stime 15, starttime 22.
    return ProcStat(
        pid=pid,
        ppid=int(fields[1]),
        start_ticks=int(fields[19]),
        cpu_seconds=(int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
    )


def read_thread_ns(pid: int) -> dict[int, int] | None:
    """CPU run time of each thread of a process, nanoseconds by thread id (first field of
    ``/proc/<pid>/task/<tid>/schedstat``): empty if the process is gone, None if it cannot be
    read that way (no schedstat, no permission)."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return out
    except PermissionError:
        return None
    for tid in tids:
        try:
            out[int(tid)] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between listing and reading
        except (PermissionError, ValueError, IndexError):
            return None
    return out


def read_hwm_bytes(pid: int) -> int | None:
    """Peak resident set size (``VmHWM``) of a process in bytes, or None if unknown/gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return None


def tree(root: int) -> list[ProcStat]:
    """The root process and its descendants now alive (empty when the root is gone)."""
    stats: dict[int, ProcStat] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = read_stat(int(entry.name))
            if st is not None:
                stats[st.pid] = st
    if root not in stats:
        return []
    children: dict[int, list[int]] = {}
    for st in stats.values():
        children.setdefault(st.ppid, []).append(st.pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(stats[pid])
        todo.extend(children.get(pid, ()))
    return out


class TreeMonitor:
    """Samples a process tree every ``period`` seconds in a thread: the last CPU seconds and the
    peak RSS of every process seen, keyed by (pid, start time), and the last run time of every
    thread seen, keyed by (pid, start time, thread id)."""

    def __init__(self, root: int, period: float = 0.2) -> None:
        self.root = root
        self.period = period
        self._cpu: dict[tuple[int, int], float] = {}
        self._hwm: dict[tuple[int, int], int] = {}
        self._baseline: dict[tuple[int, int], float] = {}
        self._thread_ns: dict[tuple[int, int, int], int] = {}
        self._thread_baseline: dict[tuple[int, int, int], int] = {}
        self._schedstat = True
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Take one sample now."""
        procs = tree(self.root)
        with self._lock:
            for st in procs:
                key = (st.pid, st.start_ticks)
                self._cpu[key] = st.cpu_seconds
                threads = read_thread_ns(st.pid) if self._schedstat else None
                if threads is None:
                    self._schedstat = True
                else:
                    for tid, ns in threads.items():
                        self._thread_ns[(st.pid, st.start_ticks, tid)] = ns
                hwm = read_hwm_bytes(st.pid)
                if hwm is not None:
                    self._hwm[key] = max(hwm, self._hwm.get(key, 0))

    def start(self) -> None:
        """Sample now (this is the CPU baseline), then keep sampling in a thread."""
        self.sample()
        with self._lock:
            self._baseline = dict(self._cpu)
            self._thread_baseline = dict(self._thread_ns)
        self._thread = threading.Thread(target=self._run, name="tree-monitor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def stop(self) -> None:
        """Take a last sample and stop the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()

    def cpu_seconds(self) -> float:
        """CPU seconds used by the tree since :meth:`start`: threads' schedstat run time, or
        utime + stime (10 ms ticks) once any process could not be read that way."""
        with self._lock:
            if self._schedstat:
                base = self._thread_baseline
                ns = sum(v - base.get(k, 0) for k, v in self._thread_ns.items())
                return ns / 1e9
            return sum(v - self._baseline.get(k, 0.0) for k, v in self._cpu.items())

    def peak_rss_bytes(self) -> int:
        """Sum over the processes seen of their peak RSS (VmHWM), bytes."""
        with self._lock:
            return sum(self._hwm.values())

    def processes(self) -> list[tuple[int, int]]:
        """(pid, start ticks) of every process seen."""
        with self._lock:
            return list(self._cpu)

    def process_count(self) -> int:
        """How many processes were seen in the tree."""
        with self._lock:
            return len(self._cpu)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the runner dies (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    stdin: int | None = None,
    stdout_pipe: bool = False,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[Any]:
    """Start a child that gets SIGTERM if the runner dies; stderr (and stdout unless piped) go
    to ``log``. Call from the main thread while no other thread runs (``preexec_fn``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as logf:
        return subprocess.Popen(
            list(argv),
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout_pipe else logf,
            stderr=logf,
            cwd=cwd,
            env=env,
            preexec_fn=_die_with_parent,
        )


def read_line(stream: IO[bytes], deadline: float, proc: subprocess.Popen[Any]) -> str:
    """The next line of a child's stdout pipe, waiting until ``deadline`` (time.monotonic).
    Raises RuntimeError if the child exits or the deadline passes first."""
    fd = stream.fileno()
    buf = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RuntimeError(f"timed out waiting for output of {proc.args!r}")
        ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
        if ready:
            chunk = os.read(fd, 1)
            if not chunk:
                raise RuntimeError(f"{proc.args!r} exited (status {proc.wait()})")
            buf += chunk
            if chunk == b"\n":
                return buf.decode(errors="replace").strip()
        elif proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited (status {proc.returncode})")


def stop(
    proc: subprocess.Popen[Any],
    *,
    timeout: float = 40.0,
    descendants: Sequence[tuple[int, int]] = (),
) -> int | None:
    """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL; then SIGKILL any of
    ``descendants`` (pid, start ticks) still alive (checked by start time: never another
    process that reused the pid). Returns the exit status."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)
    for pid, start in descendants:
        if pid == proc.pid:
            continue
        st = read_stat(pid)
        if st is not None and st.start_ticks == start:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return proc.returncode
