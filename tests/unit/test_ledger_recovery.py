"""The ledger recovery's arithmetic without I/O (``worker.core.ledger_recovery``), as BookKeeper's ReadLastConfirmedOp,
RRQuorumCoverageSet and PendingReadOp do it."""

from __future__ import annotations

import pytest

from worker.core.ledger_recovery import (
    Answer,
    Entry,
    Fenced,
    Read,
    RecoveryRefused,
    Reply,
    close_point,
    covered,
    entry_read,
    fenced,
    write_set,
)

F, M, X = Answer(Reply.FAILED), Answer(Reply.MISSING), None


def found(entry_id: int, lac: int, length: int) -> Answer:
    return Answer(Reply.FOUND, Entry(entry_id, lac, length))


def test_write_sets_are_round_robin() -> None:
    assert write_set(0, 3, 2) == (0, 1)
    assert write_set(2, 3, 2) == (2, 0)
    assert write_set(7, 5, 3) == (2, 3, 4)


@pytest.mark.parametrize(
    ("answers", "wq", "aq", "ok"),
    [
        ([M], 1, 1, True),
        ([X], 1, 1, False),
        ([M, X, X], 2, 2, False),  # write set (1, 2): both unknown, and two acks confirm an add
        ([M, M, X], 2, 2, True),  # every write set keeps at most one unknown bookie
        ([M, F, M], 3, 2, True),  # one unknown of three: no two acks without a fenced bookie
        ([F, F, M], 3, 2, False),
        ([M, X, M, X], 2, 1, False),  # ack quorum 1: any unknown bookie could have confirmed an add
    ],
)
def test_fencing_covers_every_write_quorum(answers: list[Answer | None], wq: int, aq: int, ok: bool) -> None:
    assert covered(answers, wq, aq) is ok


def test_the_recovery_starts_at_the_largest_last_add_confirmed() -> None:
    start = fenced([found(6, 5, 60), found(5, 4, 50), M], write_quorum=2, ack_quorum=2, first_entry_id=0)
    assert start == Fenced(5, 60)
    # An empty ledger: nothing to recover, closed at -1 with no bytes.
    assert fenced([M, M], write_quorum=2, ack_quorum=2, first_entry_id=0) == Fenced(-1, 0)
    # Never before the last ensemble: the earlier ones are closed and confirmed.
    assert fenced([M], write_quorum=1, ack_quorum=1, first_entry_id=10) == Fenced(9, 0)
    # Not enough answers yet, or none valid.
    assert fenced([found(6, 5, 60), X, X], write_quorum=2, ack_quorum=2, first_entry_id=0) is None
    assert fenced([F], write_quorum=1, ack_quorum=1, first_entry_id=0) is None
    with pytest.raises(RecoveryRefused):
        fenced([M, Answer(Reply.REFUSED)], write_quorum=2, ack_quorum=2, first_entry_id=0)


def test_an_entry_after_the_last_add_confirmed_is_found_or_missing() -> None:
    assert entry_read([M, found(6, 5, 60)], write_quorum=2, ack_quorum=2) is Read.FOUND
    # A confirmed entry has ack-quorum copies: missing on wq - aq + 1 bookies means never confirmed.
    assert entry_read([M, F, F], write_quorum=3, ack_quorum=2) is Read.UNKNOWN
    assert entry_read([M, M, F], write_quorum=3, ack_quorum=2) is Read.MISSING
    assert entry_read([M], write_quorum=1, ack_quorum=1) is Read.MISSING


def test_the_close_is_the_last_entry_found() -> None:
    start = Fenced(5, 50)
    assert close_point(start, []) == (5, 50)
    assert close_point(start, [Entry(6, 5, 60), Entry(7, 6, 72)]) == (7, 72)
