"""An OPEN ledger is never deleted while something may still write it; one nothing names is recovered first.

Only CLOSED is final in BookKeeper. Once the owning topic is proven gone
(``worker.broker.snapshot_cache.confirm_gone``) nothing writes for it, so an open ledger is deletable like a
closed one once old enough. On a live topic, an OPEN data or cursor ledger (:data:`RECOVERABLE`) that neither
the live set nor the topic's records name, older than the minimum age, has no writer: it is recovered
(``worker.core.ledger_recovery``), then judged like a closed one. A compacted, schema or bucket ledger is
never recovered on a live topic: its writer names it only once closed. Why: docs/design.md, "Open ledgers
nothing names". One rule, in the decision's order (``worker.core.decision``), for the worker and the scanner.
"""

from __future__ import annotations

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


def recovery_hold(component: LedgerComponent, *, recorded: bool | None) -> str | None:
    """Why an OPEN (or IN_RECOVERY) ledger of a live topic may not be recovered, or None: recover it. Asked only
    of a ledger old enough and not named by the live state (``worker.core.decision.RULE_ORDER``). ``recorded``:
    the topic's record in Pulsar's metadata store names it (read after the live state); None, not read: held."""
    kind = open_kind(component)
    if component not in RECOVERABLE:
        why = {
            LedgerComponent.COMPACTED_LEDGER: "a compaction may be writing it",
            LedgerComponent.SCHEMA_STORAGE: "the schema registry may be writing it",
            LedgerComponent.DELAYED_INDEX_BUCKET: "its subscription's delayed-delivery tracker may be writing it",
        }[component]
        return f"{kind} of a live topic: {why}"
    if recorded is None:
        return f"{kind}: its topic's stored record was not read"
    if recorded:
        return f"{kind} its topic's stored record names"
    return None
