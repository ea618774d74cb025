"""The dead-letter store: batches a destination rejected for good, kept on disk for replay.

A batch (or the part of one that is still refused once split) becomes a dead letter when its
destination rejects it for good (a 4xx other than a retried 429, a 413 of a single series, or
its retry budget is spent). The user-facing names say "rejected": the directory, ``rwrouter
rejected``, ``rwrouter_rejected_*``, ``storage.rejected_max_bytes``. Each destination has its
own bounded directory, ``<storage.path>/rejected/<destination>/`` (:func:`dead_letter_dir`);
after every add the oldest entries are removed until the directory holds at most
``max_bytes``. ``rwrouter rejected list|replay`` reads and empties it, possibly while
``rwrouter run`` adds to it.

File format (version 1), one file per entry, named ``<key_ms>-<seq>-<token>.rej`` (``key_ms``:
13 digits, unix ms of the add, but never below the newest entry's even if the clock steps back;
``seq``: 6 digits, order within that millisecond; ``token``: 8 random hex digits, so names
never collide), so sorting names sorts entries oldest first. Content::

    rwrouter-rejected/1\\n                  magic and format version
    {"at_ms": ..., "status": ..., ...}\\n    one line of JSON: the DeadLetter fields (minus
                                            name) plus "crc32" of the body
    <body>                                  the snappy-block-compressed WriteRequest, exactly
                                            body_bytes bytes: ready to POST

An entry is written to ``.<name>.tmp``, fsynced, renamed to ``<name>.rej`` and the directory
fsynced, so a crash never leaves a half entry visible; readers ignore every other file. A
leftover ``.tmp`` file (a crash while writing) is removed by a later add once it is older than
:data:`STALE_TMP_SECONDS`.

Destination directory names: the destination name percent-encoded as UTF-8 with only ASCII
letters, digits and ``_.-~`` kept (``urllib.parse.quote(name, safe="")``: ``/`` becomes
``%2F``, ``:`` ``%3A``, ``%`` ``%25``), and a leading ``.`` written ``%2E`` (so ``.`` and ``..``
are not path steps and no name is hidden). The mapping is one to one: ``urllib.parse.unquote``
gives the name back.

Blocking file I/O throughout: async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rwrouter.config.paths import destination_dirname
from rwrouter.deadletter.entry import HEADER_MAX_BYTES, MAGIC, parse_header, read_entry
from rwrouter.logs import kv
from rwrouter.send.refusals import Kind
from rwrouter.wire import compress

log = logging.getLogger("rwrouter.rejected")

SUFFIX = ".rej"
TMP_SUFFIX = ".tmp"
RESPONSE_MAX_BYTES = 4096  # of the destination's answer kept with an entry (UTF-8)
STALE_TMP_SECONDS = 600.0  # a .tmp file this old is a crash leftover, not a write in progress
TOTALS_TTL = 10.0  # seconds the cached size and count are trusted (gauges, the bound check)
KINDS = tuple(kind.value for kind in Kind)  # the values: ValueError names them as they are
_NAME = re.compile(r"\A\d{13}-\d{6}-[0-9a-f]{8}\.rej\Z")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter: a batch its destination rejected for good, as listed (the body stays
    on disk: :meth:`DeadLetterStore.body`).

    ``name``: the file name in the store. ``at_ms``: when it was rejected (unix ms). ``status``:
    the last HTTP status, None when there was no answer (network errors until the retry budget
    was spent). ``reason``: why it was given up (``4xx``, ``retry_budget``, ``too_large``, ...).
    ``response``: the start of the answer's body (at most 4 KiB of UTF-8). ``series``/
    ``samples``: what the batch carries (for ``kind`` ``metadata``: entries, and ``samples`` the
    same count). ``body_bytes``: size of the compressed body. ``tenant``: the tenant of its
    series for a destination with a ``tenant_header`` (replayed in it), else None (the field
    is absent from the file).
    """

    name: str
    at_ms: int
    status: int | None
    reason: str
    response: str
    series: int
    samples: int
    kind: str
    body_bytes: int
    tenant: str | None = None

    @property
    def samples_kind(self) -> bool:
        """Whether it carries samples (:attr:`Kind.SAMPLES <rwrouter.send.refusals.Kind>`),
        not metadata."""
        return self.kind == Kind.SAMPLES


safe_dirname = destination_dirname  # a destination's directory name (rwrouter.config.paths)


def dead_letter_dir(storage_path: str | os.PathLike[str], destination: str) -> Path:
    """``<storage_path>/rejected/<safe name>`` (:func:`safe_dirname`).

    Raises ValueError for an empty destination name.
    """
    return Path(storage_path) / "rejected" / safe_dirname(destination)


class DeadLetterStore:
    """One destination's dead-letter directory (format in the module docstring).

    ``max_bytes``: bound of the files' total size on disk (bytes). ``wall_clock``: unix seconds,
    injectable for tests. ``totals_ttl``: seconds the counted size and number of entries are
    reused (the directory is listed again after that; stale tmp files from a crash are removed
    by the add that lists it). The directory is created on the first add. Adds from several threads
    of one process are serialised; another process may list, read and remove entries meanwhile.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int,
        wall_clock: Callable[[], float] = time.time,
        totals_ttl: float = TOTALS_TTL,
    ) -> None:
        self.directory = Path(directory)
        self.totals_ttl = totals_ttl
        self.max_bytes = max_bytes
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._last_ms = 0
        self._seq = 0
        # (monotonic time, bytes, entries) as last counted; _cleaned: by a scan that also
        # removed stale tmp files (the add path needs one of those now and then)
        self._totals: tuple[float, int, int] | None = None
        self._cleaned = False

    def add(
        self,
        *,
        raw: bytes,
        kind: str,
        status: int | None,
        reason: str,
        response: str,
        series: int,
        samples: int,
        tenant: str | None = None,
    ) -> int:
        """Store a rejected batch (of ``tenant``, None: none); returns how many older entries
        were removed for the bound.

        ``raw``: the uncompressed WriteRequest (concatenated framed series or metadata), stored
        snappy-compressed. ``response`` is cut to 4 KiB. The new entry is kept even when it
        alone is over ``max_bytes`` (all others are then removed). Raises ValueError for an
        unknown ``kind``, OSError when the file cannot be written (nothing is left behind).
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        body = compress(raw)
        now_ms = int(self._wall() * 1000)
        header = {
            "at_ms": now_ms,
            "status": status,
            "reason": reason,
            "response": _cut(response, RESPONSE_MAX_BYTES),
            "series": series,
            "samples": samples,
            "kind": kind,
            "body_bytes": len(body),
            "crc32": zlib.crc32(body),
        }
        if tenant is not None:
            header["tenant"] = tenant
        data = MAGIC + json.dumps(header).encode() + b"\n" + body
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            if not self._last_ms:  # first add: continue after the newest entry on disk
                newest = self._names()[-1:]
                for last in newest:
                    self._last_ms, self._seq = int(last[:13]), int(last[14:20])
            name = self._next_name(now_ms)
            self._write(name, data)
            totals = self._fresh_totals() if self._cleaned else None
            if totals is not None and totals[1] + len(data) <= self.max_bytes:
                self._totals = (totals[0], totals[1] + len(data), totals[2] + 1)
                return 0  # within the bound: no need to list the directory
            return self._enforce_bound(keep=name)

    def entries(self) -> list[DeadLetter]:
        """The entries, oldest first. Unreadable or corrupt files (not a regular file, a
        header that does not parse or does not match the file) are skipped with a warning;
        files that vanish meanwhile (removed by another process) are skipped silently."""
        found = []
        for name in self._names(regular=False):
            try:
                head, size = read_entry(self.directory / name, limit=len(MAGIC) + HEADER_MAX_BYTES)
                header, start = parse_header(head)
                if size != start + header["body_bytes"]:
                    raise ValueError(f"{size} bytes, the header says {start} + body_bytes")
            except FileNotFoundError:
                continue
            except (OSError, ValueError, OverflowError) as exc:
                log.warning(
                    kv(
                        file=self.directory / name,
                        msg="corrupt dead-letter entry skipped",
                        error=exc,
                    )
                )
                continue
            del header["crc32"]
            found.append(DeadLetter(name=name, **header))
        return found

    def body(self, entry: DeadLetter) -> bytes:
        """The entry's compressed body (snappy block, ready to POST).

        Raises FileNotFoundError when the entry was removed meanwhile, ValueError when the
        file does not hold a valid entry (not a regular file, its body does not match the
        checksum), OSError.
        """
        data, _ = read_entry(self.directory / _checked(entry.name), limit=None)
        header, start = parse_header(data)
        body = data[start:]
        if len(body) != header["body_bytes"] or zlib.crc32(body) != header["crc32"]:
            raise ValueError(f"{entry.name}: body does not match its header")
        return body

    def remove(self, entry: DeadLetter) -> None:
        """Delete an entry; an entry already gone (removed by another process) is no error."""
        with contextlib.suppress(FileNotFoundError):
            (self.directory / _checked(entry.name)).unlink()
        self._totals = None

    @property
    def size_bytes(self) -> int:
        """Total size of the entry files on disk (bytes); counted again from the directory at
        most every :data:`TOTALS_TTL` seconds (another process may remove entries)."""
        return self._counted()[1]

    def __len__(self) -> int:
        """Number of entries (same freshness as :attr:`size_bytes`)."""
        return self._counted()[2]

    def _fresh_totals(self) -> tuple[float, int, int] | None:
        totals = self._totals
        if totals is None or time.monotonic() - totals[0] >= self.totals_ttl:
            return None
        return totals

    def _counted(self) -> tuple[float, int, int]:
        totals = self._fresh_totals()
        if totals is None:
            try:
                sizes = self._sizes()
            except OSError as exc:  # e.g. the path is a file: the gauges must not fail
                log.warning(
                    kv(
                        directory=self.directory,
                        msg="cannot list the dead-letter store",
                        error=exc,
                    )
                )
                sizes = []
            totals = (time.monotonic(), sum(size for _, size in sizes), len(sizes))
            self._totals, self._cleaned = totals, False
        return totals

    # internals --------------------------------------------------------------------------------
    def _next_name(self, now_ms: int) -> str:
        """A unique name sorting after every earlier one of this store (clock steps back
        included)."""
        if now_ms > self._last_ms:
            self._last_ms, self._seq = now_ms, 0
        else:
            self._seq += 1
            if self._seq > 999_999:
                self._last_ms, self._seq = self._last_ms + 1, 0
        return f"{self._last_ms:013d}-{self._seq:06d}-{secrets.token_hex(4)}{SUFFIX}"

    def _write(self, name: str, data: bytes) -> None:
        """Write ``data`` as entry ``name`` atomically: tmp file, fsync, rename, fsync dir."""
        tmp = self.directory / f".{name}{TMP_SUFFIX}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                with os.fdopen(fd, "wb", closefd=False) as file:
                    file.write(data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, self.directory / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.directory)

    def _enforce_bound(self, *, keep: str) -> int:
        """Remove the oldest entries (never ``keep``) until the total is within the bound."""
        sizes = self._sizes(clean=True)
        total = sum(size for _, size in sizes)
        removed = 0
        for name, size in sizes:
            if total <= self.max_bytes:
                break
            if name == keep:
                continue
            try:
                (self.directory / name).unlink()
                removed += 1
            except FileNotFoundError:
                pass  # removed by another process meanwhile (a replay): no longer counts
            total -= size
        self._totals, self._cleaned = (time.monotonic(), total, len(sizes) - removed), True
        if removed:
            log.warning(
                kv(
                    directory=self.directory,
                    removed=removed,
                    max_bytes=self.max_bytes,
                    msg="dead-letter store full: oldest entries removed",
                )
            )
        return removed

    def _names(self, *, regular: bool = True) -> list[str]:
        return [name for name, _ in self._sizes(regular=regular)]

    def _sizes(self, *, clean: bool = False, regular: bool = True) -> list[tuple[str, int]]:
        """(name, bytes) of each entry file, oldest first; ``regular``: regular files only
        (the bound and the totals; a FIFO or directory named like an entry is not one);
        ``clean``: also remove stale tmp files (compared with file times, hence the real
        clock)."""
        found = []
        stale_before = time.time() - STALE_TMP_SECONDS
        try:
            with os.scandir(self.directory) as it:
                for item in it:
                    try:
                        if _NAME.match(item.name):
                            if regular and not item.is_file(follow_symlinks=False):
                                continue
                            found.append((item.name, item.stat(follow_symlinks=False).st_size))
                        elif clean and _stale_tmp(item, stale_before):
                            os.unlink(item.path)
                    except FileNotFoundError:
                        continue
        except FileNotFoundError:
            return []
        return sorted(found)


def _stale_tmp(item: os.DirEntry[str], before: float) -> bool:
    """Whether ``item`` is a tmp file of this store last written before ``before`` (unix s)."""
    name = item.name
    return name.startswith(".") and name.endswith(TMP_SUFFIX) and item.stat().st_mtime < before


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, on a character boundary."""
    return text.encode("utf-8", "replace")[:limit].decode("utf-8", "ignore")


def _checked(name: str) -> str:
    """An entry name, refused (ValueError) unless it has the store's pattern (no path steps)."""
    if not _NAME.match(name):
        raise ValueError(f"not a dead-letter entry name: {name!r}")
    return name


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; a no-op where directories cannot be
    opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
