"""Connection balancing of ``rwrouter run --workers``: the policy, the board file shared by mmap
and the balancer's count, without processes or sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from rwrouter.server.balance import (
    Balancer,
    Board,
    board_path,
    clear_slot,
    create_board,
    should_end,
)

POLICY_CASES = [
    # (id, board slots, this worker's index, its fresh count, end the connection)
    ("balanced", (2, 2), 0, 2, False),
    ("one_over", (3, 1), 0, 3, True),
    ("one_under", (1, 3), 0, 1, False),
    ("fresh_count_replaces_own_slot", (1, 1), 0, 3, True),
    ("odd_total_rounds_up", (3, 2), 0, 3, False),
    ("odd_total_two_over", (4, 1), 0, 4, True),
    ("odd_total_four_workers", (1, 2, 1, 1), 1, 2, False),
    ("four_workers_one_over", (1, 3, 1, 1), 1, 3, True),
    ("single_worker_never", (7,), 0, 7, False),
    ("single_worker_first_connection", (0,), 0, 1, False),
    ("others_zero_first_connection", (0, 0), 0, 1, False),
    ("others_zero_second_connection", (1, 0), 0, 2, True),
    ("stale_own_slot_ignored", (9, 1), 0, 1, False),
    ("stale_high_other_slot_holds_back", (2, 9), 0, 4, False),
    ("other_worker_restarted_slot_zeroed", (2, 0), 0, 2, True),
]


@pytest.mark.parametrize(
    ("slots", "index", "own", "end"),
    [c[1:] for c in POLICY_CASES],
    ids=[c[0] for c in POLICY_CASES],
)
def test_should_end(slots: tuple[int, ...], index: int, own: int, end: bool) -> None:
    assert should_end(slots, index=index, own=own) is end


@pytest.fixture
def board_file(tmp_path: Path) -> Path:
    path = board_path(str(tmp_path))
    create_board(path, count=3)
    return path


def test_a_new_board_is_zero_slots(board_file: Path) -> None:
    assert board_file.read_bytes() == bytes(3 * 8)


def test_boards_on_one_file_see_each_others_slots(board_file: Path) -> None:
    first, second = (Board(board_file, index=i, count=3) for i in (0, 2))
    first.publish(5)
    second.publish(2**40 + 1)
    assert first.slots() == second.slots() == (5, 0, 2**40 + 1)
    assert board_file.read_bytes()[:8] == (5).to_bytes(8, "little")  # little-endian uint64


# (id, slots written before a worker opens the board, its index, slots once it opened it)
OPEN_CASES = [
    ("zeroes_its_own_slot", (4, 5, 6), 1, (4, 0, 6)),
    ("first_slot", (4, 5, 6), 0, (0, 5, 6)),
    ("last_slot", (4, 5, 6), 2, (4, 5, 0)),
]


@pytest.mark.parametrize(
    ("before", "index", "after"), [c[1:] for c in OPEN_CASES], ids=[c[0] for c in OPEN_CASES]
)
def test_opening_zeroes_only_its_own_slot(
    board_file: Path, before: tuple[int, ...], index: int, after: tuple[int, ...]
) -> None:
    board_file.write_bytes(b"".join(v.to_bytes(8, "little") for v in before))
    assert Board(board_file, index=index, count=3).slots() == after


# (id, slot the supervisor zeroes, slots left)
CLEAR_CASES = [("middle", 1, (7, 0, 9)), ("first", 0, (0, 8, 9))]


@pytest.mark.parametrize(
    ("index", "after"), [c[1:] for c in CLEAR_CASES], ids=[c[0] for c in CLEAR_CASES]
)
def test_the_supervisor_zeroes_an_exited_workers_slot(
    board_file: Path, index: int, after: tuple[int, ...]
) -> None:
    workers = [Board(board_file, index=i, count=3) for i in range(3)]
    for worker, value in zip(workers, (7, 8, 9), strict=True):
        worker.publish(value)
    clear_slot(board_file, index)
    assert workers[2].slots() == after  # seen through the mapping of a running worker


def test_closing_a_board_zeroes_its_slot(board_file: Path) -> None:
    board, other = Board(board_file, index=0, count=3), Board(board_file, index=1, count=3)
    board.publish(3)
    board.close()
    assert other.slots() == (0, 0, 0)


def test_a_short_board_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "connections"
    create_board(path, count=1)
    with pytest.raises((OSError, ValueError)):
        Board(path, index=1, count=2)


class FakeConnection:
    """A transport: ``closing`` once the connection is lost or being closed."""

    def __init__(self) -> None:
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing


# (id, other worker's slot, requests by connection number (an ended connection's number is
# then a new connection: the sender reconnects), which of them end, count published at the end)
BALANCER_CASES = [
    ("other_idle_second_connection_ends", 0, [0, 1, 0, 1], [False, True, False, True], 1),
    ("balanced_none_ends", 2, [0, 1, 0, 1], [False] * 4, 2),
    ("odd_total_within_share", 1, [0, 1, 0, 1], [False] * 4, 2),
    ("one_excess_ends_one", 1, [0, 1, 2, 0, 1], [False, False, True, False, False], 2),
    ("same_connection_counts_once", 0, [0, 0, 0], [False] * 3, 1),
]


@pytest.mark.parametrize(
    ("other", "requests", "ended", "published"),
    [c[1:] for c in BALANCER_CASES],
    ids=[c[0] for c in BALANCER_CASES],
)
def test_balancer_ends_connections_over_its_share(
    tmp_path: Path, other: int, requests: list[int], ended: list[bool], published: int
) -> None:
    path = board_path(str(tmp_path))
    create_board(path, count=2)
    Board(path, index=1, count=2).publish(other)
    balancer = Balancer(Board(path, index=0, count=2))
    connections = [FakeConnection() for _ in range(max(requests) + 1)]
    answers = []
    for i in requests:
        if connections[i].closing:  # ended by an earlier answer: the sender reconnects
            connections[i] = FakeConnection()
        end = balancer.end_connection(connections[i])
        connections[i].closing = end  # aiohttp closes it after the answer
        answers.append(end)
    assert answers == ended
    assert balancer.board.slots() == (published, other)
    assert balancer.count() == published


def test_balancer_counts_only_open_connections(tmp_path: Path) -> None:
    path = board_path(str(tmp_path))
    create_board(path, count=2)
    Board(path, index=1, count=2).publish(5)
    balancer = Balancer(Board(path, index=0, count=2))
    connections = [FakeConnection() for _ in range(3)]
    for connection in connections:
        assert not balancer.end_connection(connection)
    connections[0].closing = True  # lost: no longer counted, the next request publishes it
    assert balancer.count() == 2
    assert not balancer.end_connection(connections[1])
    assert balancer.board.slots() == (2, 5)
    assert len(balancer._open) == 2  # the closed one is forgotten
    lost = FakeConnection()
    lost.closing = True  # the sender went away before its answer: not counted, not ended
    assert not balancer.end_connection(lost)
    assert len(balancer._open) == 2
