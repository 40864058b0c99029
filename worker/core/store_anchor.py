"""BookKeeper's metadata store, anchored to Pulsar's.

A ``LAYOUT`` znode proves only that a ledgers root was once initialised there. A root left by
``initialize-cluster-metadata``, a second cluster's chroot on a shared ensemble, a root a migration left
behind: each has one, and a worker pointed at it would find every ledger it is asked about missing
(settled as already gone while the ledgers stay on the bookies), or, on another live cluster's root, find
a ledger of the same id and delete it. What proves the store is the one Pulsar's topics write to is a ledger
that Pulsar's store, proven on its own, says a topic owns: it must be there, and its metadata must name that
topic. The pending-deletions topic is the anchor of choice (the worker keeps it loaded, so it always has a
current ledger), with any other topic's ledger as a fallback for the operator commands.
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
