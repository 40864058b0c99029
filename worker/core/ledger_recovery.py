"""BookKeeper's recovery of an open ledger, as arithmetic: which answers fence it (:func:`fenced`), when an
entry is missing (:func:`entry_read`), and where it closes (:func:`close_point`), following
``ReadOnlyLedgerHandle.recover`` / ``LedgerRecoveryOp`` (bookkeeper-server 4.17; docs/design.md, "Open
ledgers nothing names"). BookKeeper's recovery add (re-writing the entries read) is skipped: the worker
deletes what it recovers right after, and its close has the same ``lastEntryId`` and ``length``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class Reply(enum.Enum):
    """A bookie's answer to one read, as the recovery counts it."""

    FOUND = "found"  # the entry, with a valid digest
    MISSING = "missing"  # no such entry, or no such ledger: a valid answer (a writer may have written nothing)
    REFUSED = "refused"  # unauthorized (a wrong master key): the recovery stops
    FAILED = "failed"  # anything else, an invalid entry, or no answer


@dataclass(frozen=True, slots=True)
class Entry:
    """An entry's header, once its digest was verified."""

    entry_id: int
    last_add_confirmed: int
    length: int  # the ledger's length once this entry is added


@dataclass(frozen=True, slots=True)
class Answer:
    reply: Reply
    entry: Entry | None = None  # FOUND only


class RecoveryRefused(Exception):
    """A bookie refused the master key: the ledger cannot be recovered by this worker (never retried into
    success: a wrong password in its metadata, or a bookie that knows the ledger under another key)."""


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """The bookies (indexes in the ensemble) an entry is written to: round robin from ``entry_id``
    (``RoundRobinDistributionSchedule.WriteSetImpl``)."""
    return tuple((entry_id + i) % ensemble_size for i in range(write_quorum))


def covered(answers: Sequence[Answer | None], write_quorum: int, ack_quorum: int) -> bool:
    """Whether no write quorum has ``ack_quorum`` bookies whose answer is unknown (no answer yet, or a failure):
    then no add of the old writer can be confirmed (``RRQuorumCoverageSet.checkCovered``). ``answers``: one
    per bookie of the ensemble, in ensemble order (None: none yet)."""
    n = len(answers)
    for first in range(n):
        unknown = sum(
            1
            for j in range(write_quorum)
            if (a := answers[(first + j) % n]) is None or a.reply not in (Reply.FOUND, Reply.MISSING)
        )
        if unknown >= ack_quorum:
            return False
    return True


@dataclass(frozen=True, slots=True)
class Fenced:
    """What the fencing reads established: the last-add-confirmed to recover from, and its length."""

    last_add_confirmed: int
    length: int


def fenced(
    answers: Sequence[Answer | None], *, write_quorum: int, ack_quorum: int, first_entry_id: int
) -> Fenced | None:
    """The outcome of step 2 once enough bookies answered (``ReadLastConfirmedOp``), or None while no
    valid answer covers every write quorum. Raises :class:`RecoveryRefused` on a refusal."""
    if any(a is not None and a.reply is Reply.REFUSED for a in answers):
        raise RecoveryRefused("a bookie refused the ledger's master key")
    valid = [a for a in answers if a is not None and a.reply in (Reply.FOUND, Reply.MISSING)]
    if not valid or not covered(answers, write_quorum, ack_quorum):
        return None
    lac, length = -1, 0  # LedgerHandle.INVALID_ENTRY_ID, and no bytes
    for a in valid:
        if a.entry is not None and a.entry.last_add_confirmed > lac:
            lac, length = a.entry.last_add_confirmed, a.entry.length
    # Earlier ensembles are closed and confirmed: recovery never starts before the last one.
    return Fenced(max(lac, first_entry_id - 1), length)


class Read(enum.Enum):
    FOUND = "found"
    MISSING = "missing"
    UNKNOWN = "unknown"  # neither, yet: more answers are needed, or the recovery fails


def entry_read(answers: Sequence[Answer], *, write_quorum: int, ack_quorum: int) -> Read:
    """One entry after the last-add-confirmed, from the answers of its write set: found if any bookie has it,
    missing once ``write_quorum - ack_quorum + 1`` say they do not (``PendingReadOp``'s recovery read)."""
    if any(a.reply is Reply.REFUSED for a in answers):
        raise RecoveryRefused("a bookie refused the ledger's master key")
    if any(a.reply is Reply.FOUND for a in answers):
        return Read.FOUND
    if sum(1 for a in answers if a.reply is Reply.MISSING) >= write_quorum - ack_quorum + 1:
        return Read.MISSING
    return Read.UNKNOWN


def close_point(start: Fenced, found: Sequence[Entry]) -> tuple[int, int]:
    """``(lastEntryId, length)`` of the close: the last entry found after the last-add-confirmed, with its
    length, or the last-add-confirmed with the length its answer carried (``LedgerRecoveryOp``)."""
    if found:
        return found[-1].entry_id, found[-1].length
    return start.last_add_confirmed, start.length
