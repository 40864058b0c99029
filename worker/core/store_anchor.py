"""BookKeeper's metadata store, anchored to Pulsar's (docs/design.md, "Two metadata stores, never confused").

A ``LAYOUT`` znode proves only that a ledgers root was once initialised there; a worker pointed at a stale
root would settle every ledger as already gone, or delete another cluster's ledger of the same id. The proof
is a ledger Pulsar's store says a topic owns: it must be there, its metadata naming that topic. The
pending-deletions topic is the anchor of choice (always loaded, so always with a current ledger), any other
topic's ledger a fallback for the operator commands.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.core.ledger_owner import Unmapped, owner_of
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.message import LedgerComponent
from worker.formats.topic_name import TopicName


@dataclass(frozen=True, slots=True)
class Anchor:
    """A ledger Pulsar's store says ``topic`` owns (the newest it lists)."""

    topic: TopicName
    ledger_id: int


def anchor_refusal(anchor: Anchor, metadata: LedgerMetadata | None) -> str | None:
    """Why BookKeeper's store is not the one ``anchor`` was written to (None: it is). ``metadata`` is what
    the store holds for the anchor's ledger, None when it holds nothing."""
    if metadata is None:
        return f"it has no ledger {anchor.ledger_id}, the current ledger of {anchor.topic} in Pulsar's metadata store"
    try:
        owner = owner_of(metadata.custom_metadata)
    except Unmapped as e:
        owner, why = None, str(e)
    else:
        why = "not a Pulsar ledger" if owner is None else f"a ledger of {owner.topic} ({owner.component.value})"
    if owner is None or owner.component is not LedgerComponent.MANAGED_LEDGER or owner.topic != anchor.topic:
        return (
            f"its ledger {anchor.ledger_id} is {why}, not the current ledger of {anchor.topic} that Pulsar's "
            "metadata store lists (another cluster's ledgers, or none of Pulsar's)"
        )
    return None
