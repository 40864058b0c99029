"""The decision: every rule of steps 2-5, composed once (:data:`RULE_ORDER`) in the pure ``decide``.

The worker (``worker.daemon.decider``) and its nightly replay, ``scan`` and the nightly audit
(``worker.operations.scanner``) all run :func:`decide` and map its one :class:`Result` to what they report,
so ``scan`` and the worker cannot disagree about a ledger. A fact not read yet is :data:`ASK`: the rule that
needs it raises :class:`Needed`, and the gatherer (``worker.broker.gatherer``) reads it and decides again, so
only what the rules ask for is read. A hold's fact left None was not read: its rule keeps the ledger. The schema
registry's None is "no entry", which releases a schema ledger, so that fact is :data:`ASK` unless given.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from worker.core.bucket_in_use import CursorRecord, bucket_hold, cursor_znode_name
from worker.core.freed_bytes import freed_bytes
from worker.core.ledger_age import ledger_age
from worker.core.live_set import Hold, LiveSet, Snapshot, ledger_hold
from worker.core.offload_in_use import bookkeeper_copy_released, offloaded_copy_use
from worker.core.open_ledger import RECOVERABLE, may_be_written, open_kind, recovery_hold, znode_name
from worker.core.schema_in_use import schema_ledger_hold
from worker.core.stored import Missing, Refused, Stored, StoredLedger, StoredObjects
from worker.core.verification import bookkeeper_rejection, offload_rejection
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
    # IN_USE and TOO_YOUNG: kept on a doubt, not on a proof of use or of youth (a compaction that may not have
    # committed, a live subscription, an open ledger, no creation time): the scanner reports it "skipped".
    unproven: bool = False

    @property
    def final(self) -> bool:
        """Nothing more will ever happen to this ledger: the message can be acknowledged for good."""
        return self.outcome in FINAL


Ask = enum.Enum("Ask", "ASK")  # a fact not read yet, that a rule may ask for (:class:`Needed`)
ASK: Final = Ask.ASK


class Need(enum.Enum):
    """A fact a rule asks for; its name, lower-cased, is the :class:`Facts` field it fills."""

    LIVE = "its topic's live state"
    SCHEMA_REGISTRY = "the schema registry"
    OFFLOAD = "its topic's record of the offload"
    BUCKET_CURSOR = "its cursor's properties"
    RECORDED = "its topic's stored record"

    @property
    def field(self) -> str:
        return self.name.lower()


class Needed(Exception):
    """A rule needs a fact that is still :data:`ASK`: read it (after the live state), then decide again."""

    def __init__(self, need: Need) -> None:
        super().__init__(need.value)
        self.need = need


@dataclass(frozen=True, slots=True)
class Facts:
    live: Snapshot | Ask  # the owner's live state, or the proven absence of the topic
    stored: Stored  # what storage holds of the announced copy
    # A schema ledger's registry entry: the ledger ids of the schema's locator in the metadata store
    # (None: no entry). ``worker.core.schema_in_use`` says why this, not the admin API, is the proof.
    schema_registry: frozenset[int] | Ask | None = ASK
    # What the topic's managed-ledger metadata records about the offload of this ledger (None: nothing).
    offload: OffloadInfo | Ask | None = None
    # A delayed-delivery bucket ledger's subscription as the metadata store holds it (None: not read, which
    # holds the ledger): ``worker.core.bucket_in_use``.
    bucket_cursor: CursorRecord | Ask | None = None
    # An open data or cursor ledger of a live topic that its live set does not hold: whether the topic's
    # record in Pulsar's metadata store names it (None: not read, which holds it).
    recorded: bool | Ask | None = None

    @classmethod
    def asking(cls, stored: Stored, live: Snapshot | Ask = ASK) -> Facts:
        """What storage holds (and the live state, once read); every other fact asked for when a rule needs it."""
        return cls(live, stored, ASK, ASK, ASK, ASK)


@dataclass(frozen=True, slots=True)
class Rules:
    min_ledger_age_ms: int

    @classmethod
    def of(cls, s: WorkerSettings) -> Rules:
        return cls(int(s.min_ledger_age_s * 1000))


_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Case:
    info: PendingDeleteLedgerInfo
    facts: Facts
    now_ms: int
    rules: Rules

    def ask(self, value: _T | Ask, need: Need) -> _T:
        if isinstance(value, Ask):
            raise Needed(need)
        return value

    def live(self) -> Snapshot:
        return self.ask(self.facts.live, Need.LIVE)  # type: ignore[return-value]

    def result(self, outcome: Outcome, reason: str = "", **kw: object) -> Result:
        live = self.facts.live
        route = Route.NONE if isinstance(live, Ask) else Route.OWNER if isinstance(live, LiveSet) else Route.DIRECT
        return Result(outcome, route, reason, **kw)  # type: ignore[arg-type]

    @property
    def ledger(self) -> StoredLedger | None:  # the BookKeeper ledger storage holds, if it does
        return self.facts.stored if isinstance(self.facts.stored, StoredLedger) else None


Rule = Callable[[_Case], Result | None]


def settled_by_storage(stored: Stored, route: Route = Route.NONE) -> Result | None:
    """The one verdict storage gives alone: nothing there is already gone (no live state, identity or age can
    matter). The daemon's batch sweep (``worker.daemon.pipeline``) settles such messages before any route read."""
    if isinstance(stored, Missing):
        return Result(Outcome.ALREADY_GONE, route)
    return None


def _nothing_stored(c: _Case) -> Result | None:
    return c.result(Outcome.ALREADY_GONE) if settled_by_storage(c.facts.stored) else None


def _refused(c: _Case) -> Result | None:
    return c.result(Outcome.REJECTED, c.facts.stored.reason) if isinstance(c.facts.stored, Refused) else None


def _identity_unproven(c: _Case) -> Result | None:
    """A failed identity proof beats everything but "nothing there": a forged message must not wait for
    retries, nor learn whether its target is live (``worker.core.verification``)."""
    stored = c.facts.stored
    if isinstance(stored, StoredLedger):
        why = bookkeeper_rejection(c.info, stored.metadata)
    else:
        assert isinstance(stored, StoredObjects)
        why = next((w for md in stored.user_metadata or () if (w := offload_rejection(c.info, md))), None)
    return None if why is None else c.result(Outcome.REJECTED, why)


def _too_young(c: _Case) -> Result | None:
    """A ledger younger than the minimum age may be one its topic does not list yet: kept, and never recovered
    (an open one may be being created)."""
    if c.ledger is None:
        return None
    age = ledger_age(c.ledger.metadata.ctime_ms, now_ms=c.now_ms, min_age_ms=c.rules.min_ledger_age_ms)
    if not age.known:
        return c.result(Outcome.TOO_YOUNG, "without a creation time: it may be being created", unproven=True)
    if not age.old_enough:
        return c.result(Outcome.TOO_YOUNG, "younger than the minimum age: it may be being created")
    return None


def _referenced(c: _Case) -> Result | None:
    """The BookKeeper copy its live topic holds (the compaction holds say so in their own words)."""
    live = c.live()
    if c.ledger is None or not isinstance(live, LiveSet):
        return None
    info = c.info
    hold = ledger_hold(live, info.ledger_component, info.ledger_id)
    if hold is None:
        return None
    # A listed ledger whose BookKeeper copy the broker marked deleted after its offload is read from tiered
    # storage: that copy is Pulsar's to delete, and when Pulsar failed to, it is a leak this worker closes.
    listed_offloaded = info.ledger_id in live.offloaded_ledgers and info.ledger_id in live.ml_ledgers
    if info.ledger_component is LedgerComponent.MANAGED_LEDGER and listed_offloaded:
        if bookkeeper_copy_released(c.ask(c.facts.offload, Need.OFFLOAD)):
            return None
    listed = _listing(info, live, c.ledger.metadata.state) if hold is Hold.REFERENCED else None
    return c.result(Outcome.IN_USE, hold.value, listed=listed, unproven=not hold.proven)


def _offloaded_copy_listed(c: _Case) -> Result | None:
    live = c.live()
    if not isinstance(c.facts.stored, StoredObjects) or not isinstance(live, LiveSet):
        return None
    listed = c.info.ledger_id in live.ml_ledgers
    offload = c.ask(c.facts.offload, Need.OFFLOAD) if listed else None
    ctx = c.info.offload_context
    use = offloaded_copy_use(
        listed=listed,
        recorded_uuid=offload.uuid if offload is not None else None,
        copy_uuid=ctx.uuid if ctx is not None else None,
    )
    return c.result(Outcome.IN_USE, "its ledger is listed with this offload") if use.in_use else None


def _schema_registered(c: _Case) -> Result | None:
    """Whether its topic exists or not: the registry outlives topics (``worker.core.schema_in_use``)."""
    if c.ledger is None or c.info.ledger_component is not LedgerComponent.SCHEMA_STORAGE:
        return None
    live = c.live()
    registry = c.ask(c.facts.schema_registry, Need.SCHEMA_REGISTRY)
    listed = live.schema_ledgers if isinstance(live, LiveSet) else frozenset()
    held = schema_ledger_hold(c.info.ledger_id, registry=registry, live=listed)
    return None if held is None else c.result(Outcome.IN_USE, held)


def _bucket_held(c: _Case) -> Result | None:
    """A bucket ledger of a live topic: held while its cursor names it or its subscription is live."""
    live = c.live()
    bucket = c.info.ledger_component is LedgerComponent.DELAYED_INDEX_BUCKET
    if c.ledger is None or not bucket or not isinstance(live, LiveSet):  # a gone topic holds no bucket
        return None
    subscription = c.info.cursor_name or ""
    cursor = cursor_znode_name(subscription)
    if cursor in ("", ".", ".."):  # no znode can have that name, and no subscription does: nothing to read
        return c.result(Outcome.IN_USE, f"no cursor can be named {subscription!r}", unproven=True)
    record = c.ask(c.facts.bucket_cursor, Need.BUCKET_CURSOR)
    hold = bucket_hold(c.info.ledger_id, record, subscription_live=cursor in live.cursor_names)
    return None if hold is None else c.result(Outcome.IN_USE, hold.value, unproven=not hold.proven)


def _open(c: _Case) -> Result | None:
    """An open ledger of a live topic that no rule above holds: recovered first when nothing may write it
    (``worker.core.open_ledger``), else kept."""
    live = c.live()
    if c.ledger is None or not may_be_written(c.ledger.metadata.state, topic_exists=isinstance(live, LiveSet)):
        return None
    component, state = c.info.ledger_component, c.ledger.metadata.state
    recorded = None
    if component in RECOVERABLE:
        cursor = c.info.cursor_name or "" if component is LedgerComponent.MANAGED_CURSOR else None
        if cursor is None or znode_name(cursor):  # a name no znode can have is never read: kept
            recorded = c.ask(c.facts.recorded, Need.RECORDED)
    kept = recovery_hold(component, recorded=recorded)
    if kept is None:
        return c.result(Outcome.RECOVER, f"{open_kind(component)} nothing names (state {state})")
    return c.result(Outcome.IN_USE, f"ledger_{state.lower() or 'state_unknown'}: {kept}", unproven=True)


def _unreferenced(c: _Case) -> Result:
    """Every rule passed: delete it, saying why nothing uses it (the scanner reports the same words)."""
    live, info = c.live(), c.info
    if isinstance(c.facts.stored, StoredObjects):
        why = "not listed with this offload" if isinstance(live, LiveSet) else "topic gone"
    elif info.ledger_component is LedgerComponent.SCHEMA_STORAGE:
        entry = "no schema registry entry" if c.facts.schema_registry is None else "not in the schema registry entry"
        why = "not in its topic's schema ledger list" if isinstance(live, LiveSet) else f"schemaId topic gone, {entry}"
    elif not isinstance(live, LiveSet):
        why = "topic gone"
    elif info.ledger_id in live.ml_ledgers:  # listed, but the broker released its BookKeeper copy (offloaded)
        why = "its BookKeeper copy was released after its offload"
    else:
        why = {
            LedgerComponent.MANAGED_LEDGER: "not in its topic's ledger list",
            LedgerComponent.MANAGED_CURSOR: f"not the ledger of cursor {info.cursor_name!r}",
            LedgerComponent.COMPACTED_LEDGER: "not its topic's compacted ledger",
            LedgerComponent.DELAYED_INDEX_BUCKET: f"not named by cursor {info.cursor_name!r}, which its topic no"
            " longer has",
        }[info.ledger_component]
    return c.result(Outcome.DELETED, why, freed_bytes=freed_bytes(c.facts.stored))


# The order, written once. Nothing to delete beats everything; a failed identity proof beats "in use" (a
# forged message must not wait, nor learn whether its target is live); then in use (the topic's live state,
# an offload, the schema registry, a bucket's cursor: a listed ledger is in use however young, which the
# broker's marks rely on), too young, open (one nothing may write is RECOVERed, and decided again once
# closed); only then delete.
RULE_ORDER: tuple[Rule, ...] = (
    _nothing_stored,
    _refused,
    _identity_unproven,
    _referenced,
    _offloaded_copy_listed,
    _schema_registered,
    _bucket_held,
    _too_young,
    _open,
    _unreferenced,
)


def decide(info: PendingDeleteLedgerInfo, facts: Facts, *, now_ms: int, rules: Rules) -> Result:
    """Every rule of steps 2-5, pure, in :data:`RULE_ORDER`: the first answer wins. ``DELETED`` here means
    "delete it": the caller carries it out. Raises :class:`Needed` for a fact still :data:`ASK`."""
    case = _Case(info, facts, now_ms, rules)
    for rule in RULE_ORDER:
        if (result := rule(case)) is not None:
            return result
    raise AssertionError("the last rule always answers")


def _listing(info: PendingDeleteLedgerInfo, live: LiveSet, state: str) -> Listing | None:
    if info.ledger_component is LedgerComponent.MANAGED_LEDGER:
        closed = state.upper() == "CLOSED"
        return Listing.CLOSED_LEDGER if closed and info.ledger_id in live.ml_ledgers else None
    if info.ledger_component is LedgerComponent.MANAGED_CURSOR and info.cursor_name is not None:
        return Listing.CURSOR_LEDGER if live.cursor_ledgers.get(info.cursor_name) == info.ledger_id else None
    return None
