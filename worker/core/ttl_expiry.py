"""Which unacknowledged entries of a topic no broker has loaded its message TTL expires once a broker loads it.

A topic's message TTL runs only while a broker has it loaded, so ``trim-idle --apply``'s load turns it on and
the broker acknowledges the old backlog. The rule is Pulsar 4.0.8's (``PersistentMessageExpiryMonitor``), and
how each ledger is placed against ``cutoff = now - ttl`` from records alone (no entry read) is in
docs/cli.md, "What a load lets the message TTL expire". ``entries`` counts what a load expires for sure,
``at_most`` what it may; a ledger at risk whose entry count is not known is ``uncounted``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from worker.core.policy_hierarchy import applied
from worker.formats.managed_ledger_metadata import ManagedCursorInfo, ManagedLedgerInfo

# PersistentTopic.isCompactionSubscription: the compactor's cursor is never expired.
COMPACTION_CURSOR = "__compaction"


@dataclass(frozen=True, slots=True)
class MessageTtl:
    """A topic's effective message TTL in seconds (``<= 0``: none) and where it comes from."""

    seconds: int
    source: str  # "topic", "namespace" or "broker"

    @property
    def active(self) -> bool:
        return self.seconds > 0

    def __str__(self) -> str:
        return f"{self.seconds} s, {self.source}" if self.active else f"none, {self.source}"

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "from": self.source}


def effective_ttl(topic: int | None, namespace: int | None, broker_default: int) -> MessageTtl:
    """The TTL the broker applies: the topic's own (its local policy, else its global one: the caller's), else
    its namespace's, else the broker default. Any value set wins, 0 included."""
    return MessageTtl(*applied(topic, namespace, broker_default))


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """What BookKeeper's metadata store says of a ledger: its entries (``lastEntryId + 1``) and its close time
    (the metadata's last write) once it is ``CLOSED``, None before; its creation time."""

    entries: int | None
    created_ms: int | None
    closed_ms: int | None


class _Age(Enum):
    ALL = "all"  # every entry is older than the TTL
    SOME = "some"  # some may be
    NONE = "none"


@dataclass(frozen=True, slots=True)
class SubscriptionExpiry:
    """One subscription's unacknowledged entries a load expires: for sure, at most, and the ledgers at risk
    whose entries are not counted."""

    entries: int
    at_most: int
    uncounted: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"entries": self.entries, "entries_at_most": self.at_most, "uncounted_ledgers": list(self.uncounted)}


@dataclass(frozen=True, slots=True)
class TtlExpiry:
    """What a load of the topic lets its TTL expire, per subscription (only those that lose something)."""

    ttl: MessageTtl
    subscriptions: Mapping[str, SubscriptionExpiry] = field(default_factory=dict)
    # The ledgers holding unacknowledged entries that may expire.
    ledgers: tuple[int, ...] = ()

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.subscriptions.values())

    @property
    def at_most(self) -> int:
        return sum(s.at_most for s in self.subscriptions.values())

    @property
    def uncounted(self) -> tuple[int, ...]:
        return tuple(sorted({lid for s in self.subscriptions.values() for lid in s.uncounted}))

    @property
    def at_risk(self) -> bool:
        """Whether a load may expire any unacknowledged entry."""
        return self.at_most > 0 or bool(self.uncounted)

    def count(self) -> str:
        """The entries it expires, short: ``15``, ``10-15`` (for sure, at most), ``15+?`` or ``?`` when some
        are not counted."""
        n = str(self.entries) if self.entries == self.at_most else f"{self.entries}-{self.at_most}"
        if self.uncounted:
            return f"{n}+?" if self.at_most else "?"
        return n

    def describe(self) -> str:
        """The entries it expires, in words: ``15 unacknowledged entries``, ``10 to 15 ...``, ``... and the
        uncounted ones of ledger 7``."""
        n = str(self.entries) if self.entries == self.at_most else f"{self.entries} to {self.at_most}"
        ledgers = f"ledger{'s' if len(self.uncounted) > 1 else ''} {', '.join(map(str, self.uncounted))}"
        if not self.uncounted:
            return f"{n} unacknowledged entries"
        if not self.at_most:
            return f"the uncounted unacknowledged entries of {ledgers}"
        return f"{n} unacknowledged entries and the uncounted ones of {ledgers}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "entries_at_most": self.at_most,
            "uncounted_ledgers": list(self.uncounted),
            "ledgers": list(self.ledgers),
            "subscriptions": {name: s.to_dict() for name, s in sorted(self.subscriptions.items())},
        }


def ttl_expiry(
    managed_ledger: ManagedLedgerInfo,
    cursors: Mapping[str, ManagedCursorInfo],
    ttl: MessageTtl,
    now_ms: int,
    bookkeeper: Mapping[int, LedgerRecord],
) -> TtlExpiry:
    """The unacknowledged entries the topic's TTL expires once a broker loads it (see the module's notes).
    ``bookkeeper``: the records of its first and last ledgers (the others are not needed); a missing one is not
    known."""
    if not ttl.active:
        return TtlExpiry(ttl)
    return _expiry(managed_ledger, cursors, ttl, now_ms - ttl.seconds * 1000, bookkeeper)


def any_ttl_expiry(
    managed_ledger: ManagedLedgerInfo,
    cursors: Mapping[str, ManagedCursorInfo],
    now_ms: int,
    bookkeeper: Mapping[int, LedgerRecord],
    source: str = "unread",
) -> TtlExpiry:
    """What the shortest TTL could expire: the unacknowledged entries written before now (for a topic whose own
    TTL could not be read: one set there could be any)."""
    return _expiry(managed_ledger, cursors, MessageTtl(1, source), now_ms, bookkeeper)


def _expiry(
    managed_ledger: ManagedLedgerInfo,
    cursors: Mapping[str, ManagedCursorInfo],
    ttl: MessageTtl,
    cutoff_ms: int,
    bookkeeper: Mapping[int, LedgerRecord],
) -> TtlExpiry:
    ledgers = sorted(managed_ledger.ledgers, key=lambda ld: ld.ledger_id)
    spans: list[tuple[int, int | None, _Age]] = []
    previous_closed: int | None = None
    for i, ld in enumerate(ledgers):
        record = bookkeeper.get(ld.ledger_id)
        entries: int | None
        closed: int | None
        if i < len(ledgers) - 1:
            entries, closed = ld.entries, ld.timestamp or None  # an unset timestamp is not known
        elif record is not None:
            entries, closed = record.entries, record.closed_ms
        else:
            # The last ledger's record in the znode is usually blank before a load: 0 means not recorded.
            entries, closed = ld.entries or None, ld.timestamp or None
        opened = previous_closed if i > 0 else record.created_ms if record is not None else None
        if closed is not None and closed < cutoff_ms:
            age = _Age.ALL
        elif opened is None or opened < cutoff_ms:
            age = _Age.SOME
        else:
            age = _Age.NONE
        spans.append((ld.ledger_id, entries, age))
        previous_closed = closed
    subscriptions: dict[str, SubscriptionExpiry] = {}
    at_risk: set[int] = set()
    for name in sorted(cursors):
        if name == COMPACTION_CURSOR:
            continue
        c = cursors[name]
        if c.mark_delete_ledger_id is not None and c.mark_delete_entry_id is not None:
            known, md_ledger, md_entry = True, c.mark_delete_ledger_id, c.mark_delete_entry_id
        else:
            known, md_ledger, md_entry = False, -1, -1  # not recorded: every entry may be unacknowledged
        sure = most = 0
        uncounted: list[int] = []
        for ledger_id, entries, age in spans:
            if age is _Age.NONE or ledger_id < md_ledger:
                continue
            if entries is None:
                uncounted.append(ledger_id)
                at_risk.add(ledger_id)
                continue
            unacknowledged = entries - (md_entry + 1) if ledger_id == md_ledger else entries
            if unacknowledged <= 0:
                continue
            at_risk.add(ledger_id)
            most += unacknowledged
            if age is _Age.ALL and known:
                sure += unacknowledged
        if most or uncounted:
            subscriptions[name] = SubscriptionExpiry(sure, most, tuple(uncounted))
    return TtlExpiry(ttl, subscriptions, tuple(sorted(at_risk)))
