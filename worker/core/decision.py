"""The decision: every rule of steps 2-5 as one pure function ``decide(message, facts) -> Result``.

The facts (the owner's live state or the proof the topic is gone, what storage holds, what the topic's
metadata records about an offload, what the schema registry lists) are gathered by
``worker.daemon.decider``; only a "delete" verdict leads to more I/O there. The nightly replay decides with
the same function.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from worker.core.bucket_in_use import CursorRecord, bucket_hold, cursor_znode_name
from worker.core.freed_bytes import freed_bytes
from worker.core.live_set import Hold, LiveSet, Snapshot, ledger_hold
from worker.core.offload_in_use import bookkeeper_copy_released, offloaded_copy_use
from worker.core.open_ledger import open_kind, recovery_hold
from worker.core.schema_in_use import schema_ledger_hold
from worker.core.stored import Missing, Refused, Stored, StoredLedger, StoredObjects
from worker.core.verification import Verdict, verify_bookkeeper, verify_offload_object_metadata
from worker.formats.managed_ledger_metadata import OffloadInfo
from worker.formats.message import LedgerComponent, PendingDeleteLedgerInfo
from worker.settings import WorkerSettings


class Outcome(enum.StrEnum):
    DELETED = "deleted"  # this worker removed it
    ALREADY_GONE = "already_gone"  # storage had nothing: success, idempotently
    REJECTED = "rejected"  # identity not proven: never deleted, dead-lettered with the reason
    IN_USE = "in_use"  # referenced by its topic, or open: retry later
    TOO_YOUNG = "too_young"  # may be a ledger being created: retry later
    TRANSIENT = "transient"  # a backend (or this worker) failed: retry with backoff
    INVALID = "invalid"  # undecodable: dead letter at once
    WOULD_DELETE = "would_delete"  # dry run: every check passed, nothing was deleted
    # An open ledger of a live topic that nothing names (``worker.core.open_ledger``): recover it (fence and
    # close), then decide again. Like DELETED, a verdict the decider carries out; it never reaches step 6.
    RECOVER = "recover"


FINAL = frozenset({Outcome.DELETED, Outcome.ALREADY_GONE, Outcome.REJECTED, Outcome.INVALID})


class Listing(enum.StrEnum):
    """How the topic's owner lists an in-use ledger, where that listing is one the broker drops again, and
    queues again with the extension (``worker.core.broker_marks``)."""

    CLOSED_LEDGER = "closed_ledger"  # a closed ledger of its managed ledger
    CURSOR_LEDGER = "cursor_ledger"  # the current ledger of the cursor the message names


class Route(enum.StrEnum):
    OWNER = "owner"
    DIRECT = "direct"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    route: Route = Route.NONE
    reason: str = ""
    stage: str = ""
    # DELETED only: the bytes this deletion frees (``worker.core.freed_bytes``), None when storage did
    # not record them. The one source of every per-deletion byte count (the freed-bytes counter, the
    # nightly replay's report): an already-gone ledger freed nothing here, whoever deleted it.
    freed_bytes: int | None = None
    # IN_USE only: the listing that keeps the ledger, when it is one the broker drops again (None otherwise).
    listed: Listing | None = None

    @property
    def final(self) -> bool:
        """Nothing more will ever happen to this ledger: the message can be acknowledged for good."""
        return self.outcome in FINAL


@dataclass(frozen=True, slots=True)
class Facts:
    live: Snapshot  # the owner's live state, or the proven absence of the topic
    stored: Stored  # what storage holds of the announced copy
    # A schema ledger's registry entry: the ledger ids of the schema's locator in the metadata store
    # (None: no entry, or not a schema ledger). ``worker.core.schema_in_use`` says why this, not the
    # admin API, is the proof.
    schema_registry: frozenset[int] | None = None
    # What the topic's managed-ledger metadata records about the offload of this ledger (None: nothing).
    offload: OffloadInfo | None = None
    # A delayed-delivery bucket ledger's subscription as the metadata store holds it (None: not read, which
    # holds the ledger): ``worker.core.bucket_in_use``.
    bucket_cursor: CursorRecord | None = None
    # An open data or cursor ledger of a live topic that its live set does not hold: whether the topic's
    # record in Pulsar's metadata store names it, read after the live state (None: not read, which holds it).
    recorded: bool | None = None


@dataclass(frozen=True, slots=True)
class Rules:
    min_ledger_age_ms: int

    @classmethod
    def of(cls, s: WorkerSettings) -> Rules:
        return cls(int(s.min_ledger_age_s * 1000))


def settled_by_storage(stored: Stored, route: Route = Route.NONE) -> Result | None:
    """The one verdict storage gives alone, whatever the route: nothing there is already gone (nothing is
    deleted, so no live state, identity or age can matter). The daemon's batch sweep
    (``worker.daemon.pipeline.Pipeline.settle_already_gone``) settles such messages before it reads any route; then the
    route is ``none``."""
    if isinstance(stored, Missing):
        return Result(Outcome.ALREADY_GONE, route)
    return None


def decide(info: PendingDeleteLedgerInfo, facts: Facts, *, now_ms: int, rules: Rules) -> Result:
    """Every rule of steps 2-5, pure. ``DELETED`` here means "delete it": the caller carries it out.

    Order matters: nothing to delete beats everything; a failed identity proof beats "in use" (a forged
    message must not wait for retries, and must not learn whether its target is live); then in use,
    open (while its topic exists: a compaction or the owner may be writing it; one nothing may write is
    ``RECOVER``ed, and decided again once closed), too young; only then delete.
    """
    live = facts.live
    route = Route.OWNER if isinstance(live, LiveSet) else Route.DIRECT
    stored = facts.stored
    settled = settled_by_storage(stored, route)
    if settled is not None:
        return settled
    if isinstance(stored, Refused):
        return Result(Outcome.REJECTED, route, stored.reason)

    if isinstance(stored, StoredLedger):
        v = verify_bookkeeper(
            info,
            stored.metadata,
            now_ms=now_ms,
            min_age_ms=rules.min_ledger_age_ms,
            writer_possible=isinstance(live, LiveSet),
        )
        if v.verdict is Verdict.REJECTED:
            return Result(Outcome.REJECTED, route, v.reason)
        hold = _bookkeeper_copy_hold(info, live, facts.offload) if isinstance(live, LiveSet) else None
        if hold is not None:
            assert isinstance(live, LiveSet)
            listed = _listing(info, live, stored.metadata.state) if hold is Hold.REFERENCED else None
            return Result(Outcome.IN_USE, route, hold.value, listed=listed)
        held = _schema_held(info, facts)
        if held is not None:
            return Result(Outcome.IN_USE, route, held)
        held = _bucket_held(info, facts)
        if held is not None:
            return Result(Outcome.IN_USE, route, held)
        if v.verdict is Verdict.OPEN:
            # Not held by its live topic (returned above): recovered first when nothing else may write it.
            kept = recovery_hold(
                info.ledger_component,
                named=False,
                recorded=facts.recorded,
                ctime_ms=stored.metadata.ctime_ms,
                now_ms=now_ms,
                min_age_ms=rules.min_ledger_age_ms,
            )
            if kept is None:
                return Result(Outcome.RECOVER, route, f"{open_kind(info.ledger_component)} nothing names")
            return Result(Outcome.TOO_YOUNG if kept.too_young else Outcome.IN_USE, route, f"{v.reason}: {kept.reason}")
        if v.verdict is Verdict.TOO_YOUNG:
            return Result(Outcome.TOO_YOUNG, route, v.reason)
        return Result(Outcome.DELETED, route, freed_bytes=freed_bytes(stored))

    assert isinstance(stored, StoredObjects)
    for md in stored.user_metadata or ():
        v = verify_offload_object_metadata(info, md)
        if v.verdict is Verdict.REJECTED:
            return Result(Outcome.REJECTED, route, v.reason)
    if isinstance(live, LiveSet) and _offloaded_copy_in_use(info, live, facts.offload):
        return Result(Outcome.IN_USE, route, "its ledger is listed with this offload")
    return Result(Outcome.DELETED, route, freed_bytes=freed_bytes(stored))


def _bookkeeper_copy_hold(info: PendingDeleteLedgerInfo, live: LiveSet, offload: OffloadInfo | None) -> Hold | None:
    """Why the topic keeps the BookKeeper copy (the compaction holds say so in their own words), or None."""
    hold = ledger_hold(live, info.ledger_component, info.ledger_id)
    # A listed ledger whose BookKeeper copy the broker marked deleted after its offload is read from tiered
    # storage: that copy is Pulsar's to delete, and when Pulsar failed to, it is a leak this worker closes.
    released = (
        info.ledger_component is LedgerComponent.MANAGED_LEDGER
        and info.ledger_id in live.offloaded_ledgers
        and bookkeeper_copy_released(offload)
    )
    return None if released else hold


def _listing(info: PendingDeleteLedgerInfo, live: LiveSet, state: str) -> Listing | None:
    if info.ledger_component is LedgerComponent.MANAGED_LEDGER:
        closed = state.upper() == "CLOSED"
        return Listing.CLOSED_LEDGER if closed and info.ledger_id in live.ml_ledgers else None
    if info.ledger_component is LedgerComponent.MANAGED_CURSOR and info.cursor_name is not None:
        return Listing.CURSOR_LEDGER if live.cursor_ledgers.get(info.cursor_name) == info.ledger_id else None
    return None


def _offloaded_copy_in_use(info: PendingDeleteLedgerInfo, live: LiveSet, offload: OffloadInfo | None) -> bool:
    ctx = info.offload_context
    return offloaded_copy_use(
        listed=info.ledger_id in live.ml_ledgers,
        recorded_uuid=offload.uuid if offload is not None else None,
        copy_uuid=ctx.uuid if ctx is not None else None,
    ).in_use


def _schema_held(info: PendingDeleteLedgerInfo, facts: Facts) -> str | None:
    if info.ledger_component is not LedgerComponent.SCHEMA_STORAGE:
        return None
    live = facts.live.schema_ledgers if isinstance(facts.live, LiveSet) else frozenset()
    return schema_ledger_hold(info.ledger_id, registry=facts.schema_registry, live=live)


def _bucket_held(info: PendingDeleteLedgerInfo, facts: Facts) -> str | None:
    """A bucket ledger of a live topic: held while its cursor names it or its subscription is live."""
    if info.ledger_component is not LedgerComponent.DELAYED_INDEX_BUCKET or not isinstance(facts.live, LiveSet):
        return None
    subscription_live = cursor_znode_name(info.cursor_name or "") in facts.live.cursor_names
    hold = bucket_hold(info.ledger_id, facts.bucket_cursor, subscription_live=subscription_live)
    return None if hold is None else hold.value
