"""The broker's trim rule on an idle topic's records (worker.core.retention): every retention form, the
slowest cursor, and the ledgers it never counts."""

from __future__ import annotations

from worker.core.retention import MEGABYTE, Retention, effective_retention, past_retention
from worker.formats.managed_ledger_metadata import LedgerInfo, ManagedCursorInfo, ManagedLedgerInfo

NOW = 10_000_000_000
MIN = 60_000


def ml(*sizes_ages: tuple[int, int], entries: int = 5) -> ManagedLedgerInfo:
    """Ledgers 1, 2, ... with (size in bytes, age in minutes); the last one is the topic's last ledger."""
    return ManagedLedgerInfo(
        tuple(
            LedgerInfo(i, entries=entries, size=size, timestamp=NOW - age * MIN)
            for i, (size, age) in enumerate(sizes_ages, 1)
        )
    )


def cursor(ledger: int, entry: int, cursors_ledger: int = -1) -> ManagedCursorInfo:
    return ManagedCursorInfo(cursors_ledger, mark_delete_ledger_id=ledger, mark_delete_entry_id=entry)


FOUR_OLD = ml((MEGABYTE, 90), (MEGABYTE, 80), (MEGABYTE, 70), (MEGABYTE, 60))


def ids(r: object) -> tuple[int, ...]:
    return r.ledger_ids  # type: ignore[attr-defined,no-any-return]


def test_effective_retention_topic_then_namespace_then_broker() -> None:
    broker, ns, topic = Retention(0, 0), Retention(60, -1), Retention(-1, 10)
    assert effective_retention(topic, ns, broker).retention == topic
    assert effective_retention(topic, ns, broker).source == "topic"
    assert effective_retention(None, ns, broker).source == "namespace"
    e = effective_retention(None, None, broker)
    assert (e.retention, e.source) == (broker, "broker")


def test_retention_from_policy() -> None:
    assert Retention.from_policy({"retentionTimeInMinutes": 5, "retentionSizeInMB": -1}) == Retention(5, -1)
    assert Retention.from_policy(None) is None
    assert Retention.from_policy({}) is None
    assert Retention.from_policy({"retentionTimeInMinutes": True, "retentionSizeInMB": 1}) is None


def test_zero_retention_keeps_nothing_but_the_last_ledger() -> None:
    r = past_retention(FOUR_OLD, {}, Retention(0, 0), NOW)
    assert ids(r) == (1, 2, 3)
    assert r.size == 3 * MEGABYTE


def test_infinite_retention_keeps_everything() -> None:
    r = past_retention(FOUR_OLD, {}, Retention(-1, -1), NOW)
    assert ids(r) == ()
    assert "within retention" in r.kept_because


def test_time_retention_takes_only_the_expired_prefix() -> None:
    # Ages 90, 80, 70 minutes; 75 minutes of retention: 1 and 2 expired, 3 is not, the walk stops there.
    assert ids(past_retention(FOUR_OLD, {}, Retention(75, -1), NOW)) == (1, 2)
    # Strictly older than the retention: a ledger exactly 70 minutes old is kept by 70 minutes.
    assert ids(past_retention(FOUR_OLD, {}, Retention(70, -1), NOW)) == (1, 2)


def test_the_walk_stops_at_the_first_kept_ledger() -> None:
    # Ledger 2 is young, ledger 3 old: the broker never skips over a kept ledger.
    m = ml((MEGABYTE, 90), (MEGABYTE, 1), (MEGABYTE, 90), (MEGABYTE, 1))
    assert ids(past_retention(m, {}, Retention(60, -1), NOW)) == (1,)


def test_size_retention_keeps_at_least_the_quota() -> None:
    # 4 MB in all; a 2 MB quota: dropping 1 leaves 3 MB, dropping 2 leaves 2 MB (still >= the quota: goes),
    # dropping 3 would leave 1 MB: kept.
    assert ids(past_retention(FOUR_OLD, {}, Retention(-1, 2), NOW)) == (1, 2)
    assert ids(past_retention(FOUR_OLD, {}, Retention(-1, 4), NOW)) == ()
    assert ids(past_retention(FOUR_OLD, {}, Retention(-1, 0), NOW)) == (1, 2, 3)


def test_time_or_size_either_one_trims() -> None:
    # Time alone keeps all (infinite-ish 1000 minutes), size alone takes 1 and 2.
    assert ids(past_retention(FOUR_OLD, {}, Retention(1000, 2), NOW)) == (1, 2)
    # Size alone keeps all (10 MB), time takes the two older than 75 minutes.
    assert ids(past_retention(FOUR_OLD, {}, Retention(75, 10), NOW)) == (1, 2)


def test_a_backlogged_cursor_keeps_every_ledger_it_has_not_acknowledged() -> None:
    # Mark-delete in the middle of ledger 2: ledgers 2 and later are still needed.
    r = past_retention(FOUR_OLD, {"sub": cursor(2, 1)}, Retention(0, 0), NOW)
    assert ids(r) == (1,)
    assert r.slowest_cursor == "sub"
    assert "sub" in r.kept_because
    # A fresh subscription at the start (mark-delete before the first entry of ledger 1): nothing goes.
    assert ids(past_retention(FOUR_OLD, {"sub": cursor(1, -1)}, Retention(0, 0), NOW)) == ()


def test_a_mark_delete_on_a_ledgers_last_entry_frees_that_ledger() -> None:
    assert ids(past_retention(FOUR_OLD, {"sub": cursor(2, 4)}, Retention(0, 0), NOW)) == (1, 2)


def test_the_slowest_of_several_cursors_bounds_the_trim() -> None:
    cursors = {"fast": cursor(3, 4), "slow": cursor(1, 2)}
    r = past_retention(FOUR_OLD, cursors, Retention(0, 0), NOW)
    assert ids(r) == ()
    assert r.slowest_cursor == "slow"


def test_a_cursor_without_a_recorded_position_keeps_everything() -> None:
    cursors = {"sub": ManagedCursorInfo(7)}
    r = past_retention(FOUR_OLD, cursors, Retention(0, 0), NOW)
    assert ids(r) == ()
    assert "no mark-delete position" in r.kept_because


def test_the_last_ledger_is_never_counted() -> None:
    assert ids(past_retention(ml((MEGABYTE, 90)), {}, Retention(0, 0), NOW)) == ()
    assert ids(past_retention(ManagedLedgerInfo(), {}, Retention(0, 0), NOW)) == ()
    # A cursor that has acknowledged everything (on the last ledger) does not change that.
    assert ids(past_retention(FOUR_OLD, {"sub": cursor(4, 4)}, Retention(0, 0), NOW)) == (1, 2, 3)


def test_unsorted_ledger_lists_are_walked_oldest_first() -> None:
    m = ManagedLedgerInfo(tuple(reversed(FOUR_OLD.ledgers)))
    assert ids(past_retention(m, {}, Retention(-1, 2), NOW)) == (1, 2)
