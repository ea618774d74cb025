"""Connection balancing for ``rwrouter run --workers N``: the kernel spreads connections, not
requests, over the workers (``SO_REUSEPORT`` hashes each new connection to one of them), so a
handful of keep-alive connections can load one worker and leave another idle.

The workers share a **board**: a file ``<runtime_dir>/connections`` of N little-endian uint64
slots (8 bytes each), one per worker, created by the supervisor and mapped into every worker
(``mmap``: reading and writing it are memory accesses, no system call). In its slot a worker
publishes how many of its open connections have carried an accepted write request (its
"write connections"; scrapes, probes and refused requests do not count). After accepting a
write request (204), a worker with more than its fair share of all write connections
(:func:`should_end`) ends that one (``Connection: close``): the sender reconnects and the
kernel hashes the new connection (a new source port) to any worker; one that lands on the
busy worker again is ended again after its next request. The supervisor zeroes the slot of
a worker that exits (its connections are gone); a worker zeroes its own when it starts and
when it stops.

A slot is written by one process only. A reader may see a value from a moment ago (or, in
theory, a torn 8-byte write): at worst one decision is wrong, and the next request corrects it.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

SLOT = struct.Struct("<Q")  # one worker's number of open write connections


def board_path(runtime_dir: str) -> Path:
    """The board file in the supervisor's private runtime directory."""
    return Path(runtime_dir) / "connections"


def create_board(path: Path, *, count: int) -> None:
    """Write a board of ``count`` zero slots (``count * 8`` bytes) at ``path`` (supervisor).
    Raises OSError."""
    path.write_bytes(bytes(count * SLOT.size))


def clear_slot(path: Path, index: int) -> None:
    """Zero worker ``index``'s slot (supervisor, once that worker exited). Raises OSError."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(SLOT.size), index * SLOT.size)
    finally:
        os.close(fd)


def should_end(slots: Sequence[int], *, index: int, own: int) -> bool:
    """Whether worker ``index`` should end the connection that just carried an accepted write
    request.

    ``slots``: every worker's published number of open write connections (the board, one entry
    per worker); ``own``: worker ``index``'s fresh count, which replaces ``slots[index]``. The
    rule: end it when ``own`` is greater than the fair share ``ceil(total / len(slots))`` of
    ``total`` (the sum over all workers). A single worker never ends one; with an odd total
    the share rounds up, so 3 and 2 connections over 2 workers is balanced.
    """
    total = sum(slots) - slots[index] + own
    return own > -(-total // len(slots))


class Connection(Protocol):
    """What the balancer needs of a connection (an asyncio transport)."""

    def is_closing(self) -> bool: ...


class Board:
    """Worker ``index``'s view of the board at ``path`` (of ``count`` slots): it zeroes its
    slot on opening. Raises OSError when the file is absent or shorter than ``count * 8``
    bytes."""

    def __init__(self, path: Path, *, index: int, count: int) -> None:
        with open(path, "r+b") as file:
            self._map = mmap.mmap(file.fileno(), count * SLOT.size)
        self._slots = struct.Struct(f"<{count}Q")
        self.index, self.count = index, count
        self.publish(0)

    def slots(self) -> tuple[int, ...]:
        """Every worker's published count, in worker order."""
        return self._slots.unpack_from(self._map)

    def publish(self, value: int) -> None:
        """Set this worker's slot to ``value`` (connections)."""
        SLOT.pack_into(self._map, self.index * SLOT.size, value)

    def close(self) -> None:
        """Zero this worker's slot (it serves no connection any more) and unmap the file."""
        self.publish(0)
        self._map.close()


class Balancer:
    """This worker's write connections, published on ``board``, and the choice of which to
    end. Costs O(open write connections) per call, no system call."""

    def __init__(self, board: Board) -> None:
        self.board = board
        # Transports (aiohttp's RequestHandler cannot be weakly referenced; a closed transport
        # holds no socket): those found closing leave the set at the next write request.
        self._open: set[Connection] = set()

    def count(self) -> int:
        """Open connections (not closing) that carried an accepted write request."""
        return sum(1 for connection in self._open if not connection.is_closing())

    def end_connection(self, connection: Connection) -> bool:
        """Called once a write request on ``connection`` is accepted: count it, publish this
        worker's count and return whether to end it (:func:`should_end`). If so, it no longer
        counts: the count published is one less, so one excess ends one connection."""
        if connection.is_closing():
            return False
        self._open.add(connection)
        self._open.difference_update([c for c in self._open if c.is_closing()])
        own = len(self._open)
        end = should_end(self.board.slots(), index=self.board.index, own=own)
        if end:
            self._open.discard(connection)
            own -= 1
        self.board.publish(own)
        return end

    def close(self) -> None:
        """Stop publishing (the worker stops): its slot is zeroed."""
        self.board.close()
