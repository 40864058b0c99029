"""What a load of an idle topic lets its message TTL expire (``worker.core.ttl_expiry``): the effective TTL's order,
each ledger placed in time by its close (and its predecessor's), the unacknowledged entries after each cursor's
mark-delete position, the last ledger read from BookKeeper's record, what is not known."""

from __future__ import annotations

from worker.core.ttl_expiry import (
    LedgerRecord,
    MessageTtl,
    any_ttl_expiry,
    effective_ttl,
    ttl_expiry,
)
from worker.formats.managed_ledger_metadata import LedgerInfo, ManagedCursorInfo, ManagedLedgerInfo

NOW = 1_800_000_000_000
MINUTE = 60_000
TTL = MessageTtl(600, "namespace")  # 10 minutes


def topic(*closed_minutes_ago: int, last_entries: int | None = None) -> ManagedLedgerInfo:
    """Ledgers 1..n of 5 entries closed that many minutes ago, then the last one (n+1), which the znode records
    nothing of (as for a topic no broker has loaded)."""
    ledgers = [LedgerInfo(i + 1, 5, 500, NOW - m * MINUTE) for i, m in enumerate(closed_minutes_ago)]
    ledgers.append(LedgerInfo(len(ledgers) + 1, last_entries, None, 0))
    return ManagedLedgerInfo(tuple(ledgers))


def cursor(ledger: int | None, entry: int | None) -> ManagedCursorInfo:
    return ManagedCursorInfo(-1, ledger, entry)


def closed(entries: int, minutes_ago: int, created_minutes_ago: int | None = None) -> LedgerRecord:
    created = None if created_minutes_ago is None else NOW - created_minutes_ago * MINUTE
    return LedgerRecord(entries, created, NOW - minutes_ago * MINUTE)


def test_the_effective_ttl_is_the_topics_else_the_namespaces_else_the_brokers() -> None:
    assert effective_ttl(None, None, 0) == MessageTtl(0, "broker")
    assert effective_ttl(None, 300, 60) == MessageTtl(300, "namespace")
    assert effective_ttl(30, 300, 60) == MessageTtl(30, "topic")
    # A topic's own 0 is a value: it switches its namespace's TTL off.
    assert effective_ttl(0, 300, 60) == MessageTtl(0, "topic")
    assert effective_ttl(None, 0, 60) == MessageTtl(0, "namespace")


def test_no_ttl_expires_nothing() -> None:
    ml = topic(120, 110, 100)
    for ttl in (MessageTtl(0, "broker"), MessageTtl(-1, "topic")):
        got = ttl_expiry(ml, {"s": cursor(1, -1)}, ttl, NOW, {4: closed(5, 100)})
        assert not got.at_risk and got.entries == got.at_most == 0 and got.subscriptions == {}


def test_a_topic_idle_longer_than_its_ttl_loses_every_unacknowledged_entry() -> None:
    ml = topic(120, 110, 100, 90, 80, 70)  # ledgers 1-6, then 7
    # The subscription acknowledged ledgers 1-3 (mark-delete on ledger 3's last entry): 15 entries left in 4-6,
    # and the last ledger, empty in BookKeeper.
    got = ttl_expiry(ml, {"s": cursor(3, 4)}, TTL, NOW, {7: closed(0, 70), 1: closed(5, 120, 121)})
    assert got.entries == got.at_most == 15 and got.uncounted == ()
    assert got.ledgers == (4, 5, 6) and got.at_risk
    assert got.subscriptions["s"].entries == 15
    assert got.describe() == "15 unacknowledged entries" and got.count() == "15"


def test_the_mark_delete_ledgers_rest_counts_and_so_does_the_last_ledger_bookkeeper_closed() -> None:
    ml = topic(120, 110)  # ledgers 1, 2, then 3
    # Mark-delete on entry 1 of ledger 2: 3 entries left there, and the last ledger's 4 (lastEntryId 3).
    got = ttl_expiry(ml, {"s": cursor(2, 1)}, TTL, NOW, {3: closed(4, 100)})
    assert got.entries == got.at_most == 7 and got.ledgers == (2, 3)
    # A mark-delete position before a ledger's first entry (-1) leaves all of it.
    got = ttl_expiry(ml, {"s": cursor(2, -1)}, TTL, NOW, {3: closed(4, 100)})
    assert got.entries == 9


def test_a_fully_acknowledged_subscription_loses_nothing() -> None:
    ml = topic(120, 110)
    assert not ttl_expiry(ml, {"s": cursor(3, 3)}, TTL, NOW, {3: closed(4, 100)}).at_risk
    assert not ttl_expiry(ml, {"s": cursor(2, 4)}, TTL, NOW, {3: closed(0, 100)}).at_risk


def test_a_ledger_straddling_the_cutoff_may_lose_some_and_a_younger_one_none() -> None:
    # Ledger 1 closed 20 min ago, 2 closed 5 min ago (opened 20 min ago: before the 10 min cutoff), 3 closed
    # 2 min ago (opened 5 min ago: after it), then 4, opened 2 min ago.
    ml = topic(20, 5, 2)
    got = ttl_expiry(ml, {"s": cursor(1, -1)}, TTL, NOW, {4: closed(5, 1)})
    assert got.entries == 5  # ledger 1: closed before the cutoff, all of it
    assert got.at_most == 10  # ... and ledger 2's, some of which may be older than the TTL
    assert got.ledgers == (1, 2)
    assert got.describe() == "5 to 10 unacknowledged entries" and got.count() == "5-10"


def test_the_last_ledger_without_bookkeepers_close_is_uncounted_when_it_may_hold_old_entries() -> None:
    ml = topic(120, 110)
    # Not closed in BookKeeper (its broker died): its entries are counted by the load's recovery only.
    got = ttl_expiry(ml, {"s": cursor(2, 4)}, TTL, NOW, {3: LedgerRecord(None, None, None)})
    assert got.entries == got.at_most == 0 and got.uncounted == (3,) and got.at_risk
    assert got.describe() == "the uncounted unacknowledged entries of ledger 3" and got.count() == "?"
    # No record at all: the same.
    assert ttl_expiry(ml, {"s": cursor(2, 4)}, TTL, NOW, {}).uncounted == (3,)
    # Opened (its predecessor closed) after the cutoff: nothing in it can be older than the TTL.
    young = topic(5)
    assert not ttl_expiry(young, {"s": cursor(1, 4)}, TTL, NOW, {}).at_risk


def test_the_first_ledger_is_placed_by_its_bookkeeper_creation_time() -> None:
    ml = topic(3)  # ledger 1 closed 3 min ago, then 2
    records = {2: closed(2, 1)}
    # Created 8 min ago: every entry is younger than the 10 min TTL.
    assert not ttl_expiry(ml, {"s": cursor(1, -1)}, TTL, NOW, {**records, 1: closed(5, 3, 8)}).at_risk
    # Created 30 min ago: some of it may be older.
    got = ttl_expiry(ml, {"s": cursor(1, -1)}, TTL, NOW, {**records, 1: closed(5, 3, 30)})
    assert (got.entries, got.at_most) == (0, 5)
    # Creation time not known: it may be older too.
    assert ttl_expiry(ml, {"s": cursor(1, -1)}, TTL, NOW, records).at_most == 5


def test_a_ledger_without_a_close_time_may_hold_old_entries() -> None:
    ml = ManagedLedgerInfo((LedgerInfo(1, 5, 500, NOW - 60 * MINUTE), LedgerInfo(2, 5, 500, 0), LedgerInfo(3)))
    got = ttl_expiry(ml, {"s": cursor(1, 4)}, TTL, NOW, {3: closed(0, 30)})
    # Ledger 2's close is not recorded: counted as possibly expiring, not surely.
    assert (got.entries, got.at_most) == (0, 5)


def test_every_subscription_counts_but_the_compaction_cursor() -> None:
    ml = topic(120, 110, 100)
    cursors = {
        "a": cursor(1, 4),  # 10 entries in 2-3
        "b": cursor(3, 4),  # none
        "c": cursor(3, 1),  # 3 entries
        "__compaction": cursor(1, -1),
        "pulsar.repl.east": cursor(2, 4),  # a replicator's cursor expires too: 5 entries
    }
    got = ttl_expiry(ml, cursors, TTL, NOW, {4: closed(0, 100)})
    assert set(got.subscriptions) == {"a", "c", "pulsar.repl.east"}
    assert got.entries == got.at_most == 18
    assert got.to_dict()["subscriptions"]["c"] == {"entries": 3, "entries_at_most": 3, "uncounted_ledgers": []}


def test_a_cursor_without_a_recorded_position_counts_everything_as_possibly_expiring() -> None:
    ml = topic(120, 110)
    got = ttl_expiry(ml, {"s": cursor(None, None)}, TTL, NOW, {3: closed(1, 100)})
    assert (got.entries, got.at_most) == (0, 11)


def test_any_ttl_expiry_counts_every_unacknowledged_entry_written_before_now() -> None:
    # Young ledgers a 10 min TTL spares: a TTL the topic may set itself could still take them.
    ml = topic(3, 2)
    spared = ttl_expiry(ml, {"s": cursor(1, 4)}, TTL, NOW, {3: closed(2, 1)})
    assert not spared.at_risk
    got = any_ttl_expiry(ml, {"s": cursor(1, 4)}, NOW, {3: closed(2, 1)})
    assert got.at_most == 7 and got.at_risk
