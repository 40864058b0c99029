"""An OPEN ledger is never deleted while something may still write it; one nothing names is recovered first.

BookKeeper's ``state`` is OPEN while a writer holds the ledger, IN_RECOVERY while another client fences
it; only CLOSED is final. Who may write a Pulsar ledger: its topic's owner (the current ledger, a cursor's
ledger), a compaction in progress (its compacted ledger, open until the compaction records it: a
compaction can run longer than the minimum age), the schema registry while it stores a version (Pulsar
accepts a schema for a name with no topic: that write lasts milliseconds, the minimum age covers it).
While the owning topic exists, any of them may; once the topic is proven gone (the admin API and the metadata
store agree, ``worker.broker.snapshot_cache.confirm_gone``), nothing writes for it any more and an open
ledger is one its writer left behind (a deleted topic's current or cursor ledger, a compaction cut
short): deletable like a closed one, once old enough.

A live topic's owner writes only the ledgers it names: a managed ledger adds a ledger to its list before it
writes to it, a cursor writes its new ledger's first entry and then switches to it, and neither ever names
again a ledger it dropped (``docs/design.md``, "Open ledgers nothing names"). So an OPEN data or cursor ledger
(:data:`RECOVERABLE`) that neither the owner's memory (the live set) nor the topic's record in the metadata
store names, and that is older than the minimum age (its creator names it within seconds, or deletes it),
has no writer: Pulsar 4.0 deletes a cursor's old ledger without closing it, and a crash between the
switch and that delete leaves one. Such a ledger is *recovered* (fenced and closed, as BookKeeper's
recovery open does: ``worker.core.ledger_recovery``), so that no writer could add to it any more, then judged
like a closed one. A compacted, schema or bucket ledger is never recovered on a live topic: its writer
(a compaction, the schema registry, a subscription's delayed-delivery tracker) names it only once it is
closed, so an open one may be in progress however old it is.

One rule for the worker (``worker.core.decision``: ``recover`` before the delete), the scanner
(``worker.operations.scanner``: reported as an orphan of its kind, or skipped with its kind) and, through the
scanner, the nightly audit.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.core.ledger_age import ledger_age
from worker.formats.message import LedgerComponent

# The ledgers of a live topic that may be recovered when nothing names them.
RECOVERABLE = frozenset({LedgerComponent.MANAGED_CURSOR, LedgerComponent.MANAGED_LEDGER})

_KIND = {
    LedgerComponent.MANAGED_LEDGER: "open data ledger",
    LedgerComponent.MANAGED_CURSOR: "open cursor ledger",
    LedgerComponent.COMPACTED_LEDGER: "open compacted ledger",
    LedgerComponent.SCHEMA_STORAGE: "open schema ledger",
    LedgerComponent.DELAYED_INDEX_BUCKET: "open delayed-delivery bucket ledger",
}


def may_be_written(state: str, *, topic_exists: bool) -> bool:
    """Whether a ledger in BookKeeper ``state`` may still be written: not CLOSED, and its topic exists.
    An unknown or empty state counts as not closed."""
    return topic_exists and state.upper() != "CLOSED"


def znode_name(name: str) -> bool:
    """Whether a cursor's name (its znode's name in the metadata store) can name a znode. One that cannot
    (".", "a/b") is never read, so its record is unknown, which holds the ledger."""
    return name not in ("", ".", "..") and "/" not in name


def open_kind(component: LedgerComponent) -> str:
    """What an open ledger of ``component`` is, in the words reports and logs use."""
    return _KIND[component]


@dataclass(frozen=True, slots=True)
class OpenHold:
    """Why an open ledger of a live topic is kept. ``too_young``: only its age keeps it (it may be being
    created), so it is looked at again once old enough."""

    reason: str
    too_young: bool = False


def recovery_hold(
    component: LedgerComponent,
    *,
    named: bool,
    recorded: bool | None,
    ctime_ms: int | None,
    now_ms: float,
    min_age_ms: float,
) -> OpenHold | None:
    """Why an OPEN (or IN_RECOVERY) ledger of a live topic may not be recovered, or None: recover it.

    ``named``: the owner's live state holds it (``worker.core.live_set.ledger_hold``); ``recorded``: the
    topic's record in Pulsar's metadata store names it (its managed ledger's list for a data ledger, its
    cursor's ``cursorsLedgerId`` for a cursor ledger), read after the live state; None when it was not read,
    which holds it."""
    kind = open_kind(component)
    if component not in RECOVERABLE:
        why = {
            LedgerComponent.COMPACTED_LEDGER: "a compaction may be writing it",
            LedgerComponent.SCHEMA_STORAGE: "the schema registry may be writing it",
            LedgerComponent.DELAYED_INDEX_BUCKET: "its subscription's delayed-delivery tracker may be writing it",
        }[component]
        return OpenHold(f"{kind} of a live topic: {why}")
    if named:
        return OpenHold(f"{kind} its topic names")
    if recorded is None:
        return OpenHold(f"{kind}: its topic's stored record was not read")
    if recorded:
        return OpenHold(f"{kind} its topic's stored record names")
    age = ledger_age(ctime_ms, now_ms=now_ms, min_age_ms=min_age_ms)
    if not age.known:
        return OpenHold(f"{kind} without a creation time: it may be being created", too_young=True)
    if not age.old_enough:
        return OpenHold(f"{kind} younger than the minimum age: it may be being created", too_young=True)
    return None
