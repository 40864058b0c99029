"""The live set of a topic: every ledger its owner broker still references, parsed from ``internalStats``
(a topic some broker has loaded), or every ledger Pulsar's metadata store records for it (a topic no
broker has loaded, and a Pulsar 5.0 scalable topic's segment: :meth:`LiveSet.from_stored`). One parse for
the worker's in-use check, the scanner, ``purge-topic`` and the nightly audit.

``internalStats`` (Pulsar 4.0.8) names ``ledgers[].ledgerId``, ``cursors.<name>.cursorLedger`` (-1: none),
``schemaLedgers[].ledgerId``, and the compacted ledger twice: ``compactedLedger.ledgerId`` (the context the
broker has *loaded*) and the ``__compaction`` cursor's ``CompactedTopicLedger`` property (where it is
*persisted*); either naming a ledger keeps it. Why a stored read is safe even for a loaded topic, and why a
compacting topic holds every compacted ledger newer than the one it names (:func:`ledger_hold`):
docs/design.md, "A topic is never loaded to learn what it uses" and "Compacted topics".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.formats.managed_ledger_metadata import ManagedCursorInfo, ManagedLedgerInfo
from worker.formats.message import LedgerComponent, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

# ``owner_url`` of a live set read from the metadata store: no broker was asked.
STORED = "<metadata store>"

COMPACTION_CURSOR = "__compaction"  # Compactor.COMPACTION_SUBSCRIPTION
COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"  # Compactor.COMPACTED_TOPIC_LEDGER_PROPERTY


class UnreadableLiveState(ValueError):
    """``internalStats`` named a ledger in a form that is not a ledger id. The live set is then unknown, not
    smaller: dropping the entry would make a listed ledger look unreferenced, and deletable."""


def _ledger_id(value: Any) -> int | None:
    """A ledger id as ``internalStats`` gives it; None for -1 or null (no ledger). Anything else that is not
    an id raises :class:`UnreadableLiveState`: the caller's decision is transient."""
    if value is None:
        return None
    if isinstance(value, bool | float):
        raise UnreadableLiveState(f"ledger id {value!r} in internalStats is not an id")
    try:
        lid = int(value)
    except (TypeError, ValueError) as e:
        raise UnreadableLiveState(f"ledger id {str(value)[:64]!r} in internalStats is not an id") from e
    return lid if lid >= 0 else None


@dataclass(frozen=True, slots=True)
class LiveSet:
    """What the owner of ``topic`` references right now (as of ``fetched_at``), or, with ``owner_url``
    :data:`STORED`, what Pulsar's metadata store records for it then."""

    topic: TopicName
    ml_ledgers: frozenset[int]
    cursor_ledgers: dict[str, int]
    schema_ledgers: frozenset[int]
    # The topic's compacted ledger: the newest one it names (loaded, or in the ``__compaction`` cursor).
    compacted_ledger: int | None
    offloaded_ledgers: frozenset[int]
    owner_url: str
    epoch: int
    fetched_at: float
    partitions: tuple[TopicName, ...] = field(default=())
    # A base name's union: each partition's owner, in partition order (a move of any one partition
    # changes the base name's state).
    partition_owners: tuple[str, ...] = field(default=())
    # Every other compacted ledger named: the loaded one while a newer one is being switched to, and
    # the partitions' in a base name's union.
    other_compacted: frozenset[int] = field(default=frozenset())
    # None: the topic has no ``__compaction`` cursor. Otherwise compacted ledgers above this id may be
    # a compaction's output not committed yet (-1: the topic compacts but names no compacted ledger).
    compaction_floor: int | None = None
    # Every cursor the owner has open (``cursors``' names, with or without a ledger; non-durable ones too):
    # a subscription's delayed-delivery buckets may be referenced from its memory only
    # (``worker.core.bucket_in_use``). A base name's union prefixes each with its partition.
    cursor_names: frozenset[str] = field(default=frozenset())

    @property
    def stored(self) -> bool:
        """Read from the metadata store (no broker had the topic loaded), not from a broker's memory."""
        return self.owner_url == STORED

    @property
    def compacted_ledgers(self) -> frozenset[int]:
        return self.other_compacted | ({self.compacted_ledger} if self.compacted_ledger is not None else set())

    @property
    def all_ids(self) -> frozenset[int]:
        return self.ml_ledgers | frozenset(self.cursor_ledgers.values()) | self.schema_ledgers | self.compacted_ledgers

    @property
    def max_id(self) -> int:
        return max(self.all_ids, default=-1)

    def references(self, ledger_id: int) -> bool:
        return ledger_id in self.all_ids

    def covers(self, ledger_id: int) -> bool:
        """False when the id is newer than anything the snapshot saw (the stale-id rule)."""
        return ledger_id <= self.max_id

    @classmethod
    def from_internal_stats(
        cls, topic: TopicName, stats: Mapping[str, Any], owner_url: str, epoch: int, now: float
    ) -> LiveSet:
        ledgers: Sequence[Mapping[str, Any]] = stats.get("ledgers") or []
        ml = frozenset(lid for ld in ledgers if (lid := _ledger_id(ld.get("ledgerId"))) is not None)
        offloaded = frozenset(
            lid for ld in ledgers if ld.get("offloaded") and (lid := _ledger_id(ld.get("ledgerId"))) is not None
        )
        raw_cursors: Mapping[str, Mapping[str, Any]] = stats.get("cursors") or {}
        cursors = {
            str(name): lid for name, c in raw_cursors.items() if (lid := _ledger_id(c.get("cursorLedger"))) is not None
        }
        schema = frozenset(
            lid for s in stats.get("schemaLedgers") or [] if (lid := _ledger_id(s.get("ledgerId"))) is not None
        )
        named = set()
        loaded = _ledger_id((stats.get("compactedLedger") or {}).get("ledgerId"))
        if loaded is not None:
            named.add(loaded)
        compaction = raw_cursors.get(COMPACTION_CURSOR)
        floor = None
        if compaction is not None:
            persisted = _ledger_id((compaction.get("properties") or {}).get(COMPACTED_LEDGER_PROPERTY))
            if persisted is not None:
                named.add(persisted)
            floor = max(named, default=-1)
        newest = max(named, default=None)
        return cls(
            topic,
            ml,
            cursors,
            schema,
            newest,
            offloaded,
            owner_url,
            epoch,
            now,
            other_compacted=frozenset(named - {newest}) if newest is not None else frozenset(),
            compaction_floor=floor,
            cursor_names=frozenset(str(name) for name in raw_cursors),
        )

    @classmethod
    def from_stored(
        cls,
        topic: TopicName,
        managed_ledger: ManagedLedgerInfo,
        cursors: Mapping[str, ManagedCursorInfo],
        schema_ledgers: frozenset[int],
        epoch: int,
        now: float,
    ) -> LiveSet:
        """What the metadata store records for ``topic``: its managed-ledger znode, its cursor znodes (by
        znode name, the names ``internalStats`` shows) and its schema registry locator's ledgers."""
        ml = frozenset(ld.ledger_id for ld in managed_ledger.ledgers if ld.ledger_id >= 0)
        offloaded = frozenset(ld.ledger_id for ld in managed_ledger.ledgers if ld.offloaded and ld.ledger_id >= 0)
        cursor_ledgers = {name: c.cursors_ledger_id for name, c in cursors.items() if c.cursors_ledger_id >= 0}
        compaction = cursors.get(COMPACTION_CURSOR)
        named: int | None = None
        floor = None
        if compaction is not None:
            # The position's properties as of the cursor's last znode write: the compacted ledger it names
            # then, or an older one than the cursor ledger's entries name now (a compaction names newer
            # ledgers only), which the floor keeps.
            value = compaction.position_properties.get(COMPACTED_LEDGER_PROPERTY)
            named = value if value is not None and value >= 0 else None
            floor = -1 if named is None else named
        return cls(
            topic,
            ml,
            cursor_ledgers,
            frozenset(lid for lid in schema_ledgers if lid >= 0),
            named,
            offloaded,
            STORED,
            epoch,
            now,
            compaction_floor=floor,
            cursor_names=frozenset(cursors),
        )

    @classmethod
    def union(cls, topic: TopicName, parts: Sequence[LiveSet], epoch: int, now: float) -> LiveSet:
        """A partitioned topic named by its base name: its ledgers live in the partitions."""
        cursors: dict[str, int] = {}
        for p in parts:
            for name, lid in p.cursor_ledgers.items():
                cursors[f"{p.topic.local_name}/{name}"] = lid
        floors = [p.compaction_floor for p in parts if p.compaction_floor is not None]
        return cls(
            topic,
            frozenset().union(*(p.ml_ledgers for p in parts)),
            cursors,
            frozenset().union(*(p.schema_ledgers for p in parts)),
            None,
            frozenset().union(*(p.offloaded_ledgers for p in parts)),
            ",".join(sorted({p.owner_url for p in parts})),
            epoch,
            now,
            tuple(p.topic for p in parts),
            tuple(p.owner_url for p in parts),
            other_compacted=frozenset().union(*(p.compacted_ledgers for p in parts)),
            # Per partition floors do not survive a union: the lowest holds for all (the safe side).
            compaction_floor=min(floors) if floors else None,
            cursor_names=frozenset(f"{p.topic.local_name}/{name}" for p in parts for name in p.cursor_names),
        )


class Hold(enum.Enum):
    """Why a live topic keeps a ledger."""

    REFERENCED = "referenced by its topic"
    # Not proven in use, not proven unreferenced either: the scanner skips it, the worker keeps it.
    COMPACTION_UNNAMED = "its topic has a __compaction cursor but names no compacted ledger: no proof it is unused"
    COMPACTION_UNCOMMITTED = "newer than its topic's compacted ledger: a compaction may not have committed it yet"

    @property
    def proven(self) -> bool:
        """True when the topic names the ledger (an in-use verdict), False when it only may use it."""
        return self is Hold.REFERENCED


def ledger_hold(live: LiveSet, component: LedgerComponent, ledger_id: int) -> Hold | None:
    """Why the owner of ``live`` keeps the ledger ``ledger_id`` (of ``component``), or None: unreferenced.

    Any id the topic references is in use, whatever role the message or the ledger's metadata gives it.
    A compacted ledger is also kept while its topic compacts and names none at or above it (see above)."""
    if live.references(ledger_id):
        return Hold.REFERENCED
    floor = live.compaction_floor
    if component is LedgerComponent.COMPACTED_LEDGER and floor is not None and ledger_id > floor:
        return Hold.COMPACTION_UNNAMED if floor < 0 else Hold.COMPACTION_UNCOMMITTED
    return None


class TopicGone:
    """The topic does not exist, proven twice: the admin API said so and the metadata store has no
    managed ledger for it. No live state: storage verification alone decides (the direct route)."""

    def __init__(self, topic: TopicName, epoch: int) -> None:
        self.topic = topic
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"TopicGone({self.topic}, epoch={self.epoch})"


Snapshot = LiveSet | TopicGone


def in_use(snap: LiveSet, info: PendingDeleteLedgerInfo) -> bool:
    """Whether the owner keeps the ledger of ``info`` (BookKeeper copy): :func:`ledger_hold`'s rule, where a
    compacted ledger the topic may still use counts as in use (retried, never deleted)."""
    return ledger_hold(snap, info.ledger_component, info.ledger_id) is not None
