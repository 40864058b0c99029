"""The decision core without I/O: ``decide(message, facts)`` for every combination of facts, and the
settle table. The integration tests drive the same function through the real stack."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.fakes import BUCKET_KEY, BUCKET_T, bucket_info, bucket_stored
from worker.broker.snapshot_cache import LiveSet
from worker.core.bucket_in_use import BUCKET_KEY_PREFIX, CursorRecord, bucket_ledgers
from worker.core.decision import ASK, RULE_ORDER, Facts, Need, Needed, Outcome, Result, Route, Rules, decide
from worker.core.live_set import TopicGone
from worker.core.stored import Missing, Refused, StoredLedger, StoredObjects
from worker.core.verification import bookkeeper_rejection
from worker.errors import BackendError
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.managed_ledger_metadata import OffloadInfo
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.settings import WorkerSettings

NOW = 1_800_000_000_000
RULES = Rules(min_ledger_age_ms=600_000)
DAY_MS = 86_400_000
TOPIC = "persistent://t/ns/x"
T = TopicName.parse(TOPIC)
ML = T.managed_ledger_name
U1 = uuid.UUID("2e5c4ca4-e0a2-448e-b586-2c30268e1b3b")
U2 = uuid.UUID("fab46231-621c-4a30-b193-54e322bd6dce")
CTX = OffloadContext.from_uuid(U1, "aws-s3", {"bucket": "b"})

ML_CM = {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": ML}
CUSTOMS = [
    ML_CM,
    {**ML_CM, "pulsar/cursor": "sub"},
    {**ML_CM, "pulsar/cursor": "other"},
    {**ML_CM, "pulsar/managed-ledger": "t/ns/persistent/y"},
    {"application": "pulsar", "component": "schema", "pulsar/schemaId": "t/ns/x"},
    {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": TOPIC},
    {
        "application": "pulsar",
        "component": "delayed-index-bucket",
        "pulsar/delayedIndexTopic": TOPIC,
        "pulsar/delayedIndexCursor": "sub",
    },
    {"application": "other"},
    {},
]


def live(
    ml: set[int],
    *,
    cursors: dict[str, int] | None = None,
    schema: frozenset[int] = frozenset(),
    compacted: int | None = None,
    offloaded: frozenset[int] = frozenset(),
    epoch: int = 0,
) -> LiveSet:
    return LiveSet(
        T, frozenset(ml), cursors or {}, frozenset(schema), compacted, frozenset(offloaded), "http://a", epoch, 0.0
    )


def ledger_info(component: LedgerComponent, lid: int = 7) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(
        TOPIC,
        component,
        LedgerType.LEDGER,
        lid,
        cursor_name="sub"
        if component in (LedgerComponent.MANAGED_CURSOR, LedgerComponent.DELAYED_INDEX_BUCKET)
        else None,
        schema_id="t/ns/x" if component is LedgerComponent.SCHEMA_STORAGE else None,
    )


def stored(
    cm: dict[str, str], *, lid: int = 7, state: str = "CLOSED", ctime: int | None = NOW - 3_600_000
) -> StoredLedger:
    return StoredLedger(LedgerMetadata(lid, dict(cm), ctime, 100, state), token=3)


# ---- the rules that defects broke ------------------------------------------------------------------------


def test_a_forged_component_is_rejected_at_once_not_retried_as_in_use() -> None:
    # Defect: a cursor ledger announced as a MANAGED_LEDGER ledger of the same topic waited 10 x 600 s as
    # "in use" before the DLQ. Identity is judged before use: rejected, with the reason.
    cursor_md = stored({**ML_CM, "pulsar/cursor": "sub"})
    res = decide(
        ledger_info(LedgerComponent.MANAGED_LEDGER),
        Facts(live({1}, cursors={"sub": 7}), cursor_md),
        now_ms=NOW,
        rules=RULES,
    )
    assert (res.outcome, res.reason) == (Outcome.REJECTED, "component_mismatch")


def test_an_open_ledger_is_never_deleted() -> None:
    # Defect: a compaction longer than the minimum age has an OPEN, old enough, unlisted ledger.
    md = stored(
        {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": TOPIC}, state="OPEN"
    )
    res = decide(
        ledger_info(LedgerComponent.COMPACTED_LEDGER), Facts(live({1, 2, 9}, compacted=5), md), now_ms=NOW, rules=RULES
    )
    assert res.outcome is Outcome.IN_USE and res.reason.startswith("ledger_open: open compacted ledger")
    in_recovery = stored(ML_CM, state="IN_RECOVERY")
    res = decide(
        ledger_info(LedgerComponent.MANAGED_LEDGER), Facts(live({1, 2, 9}), in_recovery), now_ms=NOW, rules=RULES
    )
    assert res.outcome is Outcome.IN_USE


CURSOR_CM = {**ML_CM, "pulsar/cursor": "sub"}
OLD, YOUNG = NOW - RULES.min_ledger_age_ms, NOW - RULES.min_ledger_age_ms + 1


@pytest.mark.parametrize("state", ["OPEN", "IN_RECOVERY"])
@pytest.mark.parametrize(
    ("component", "cm"), [(LedgerComponent.MANAGED_CURSOR, CURSOR_CM), (LedgerComponent.MANAGED_LEDGER, ML_CM)]
)
def test_an_open_data_or_cursor_ledger_nothing_names_is_recovered_first(
    state: str, component: LedgerComponent, cm: dict[str, str]
) -> None:
    # Pulsar 4.0 deletes a cursor's old ledger without closing it: a crash after the switch leaves an OPEN
    # ledger no cursor names, kept as "ledger_open" for as long as its topic lived. Nothing named by the
    # owner's memory nor by the stored record, old enough: recover it, then decide again.
    res = decide(
        ledger_info(component),
        Facts(live({1, 9}, cursors={"sub": 8}), stored(cm, state=state, ctime=OLD), recorded=False),
        now_ms=NOW,
        rules=RULES,
    )
    assert (res.outcome, res.route) == (Outcome.RECOVER, Route.OWNER)
    assert res.reason.startswith("open cursor ledger" if component is LedgerComponent.MANAGED_CURSOR else "open data")


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        # The cursor's current ledger, or the topic's: named by the owner's memory.
        (
            Facts(live({1, 9}, cursors={"sub": 7}), stored(CURSOR_CM, state="OPEN", ctime=OLD), recorded=False),
            "referenced",
        ),
        # Named by the cursor's znode (a topic not loaded, a cursor recovering): its owner may write it.
        (Facts(live({1, 9}), stored(CURSOR_CM, state="OPEN", ctime=OLD), recorded=True), "stored record names"),
        # The stored record was not read: no proof nothing names it.
        (Facts(live({1, 9}), stored(CURSOR_CM, state="OPEN", ctime=OLD)), "was not read"),
        # A ledger being created is unnamed for a moment: the minimum age.
        (Facts(live({1, 9}), stored(CURSOR_CM, state="OPEN", ctime=YOUNG), recorded=False), "younger than"),
        (Facts(live({1, 9}), stored(CURSOR_CM, state="OPEN", ctime=None), recorded=False), "without a creation"),
    ],
)
def test_an_open_cursor_ledger_that_may_be_written_is_never_recovered(facts: Facts, why: str) -> None:
    res = decide(ledger_info(LedgerComponent.MANAGED_CURSOR), facts, now_ms=NOW, rules=RULES)
    young = why in ("younger than", "without a creation")
    assert res.outcome is (Outcome.TOO_YOUNG if young else Outcome.IN_USE) and why in res.reason, res


@pytest.mark.parametrize(
    ("component", "cm"),
    [
        (
            LedgerComponent.COMPACTED_LEDGER,
            {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": TOPIC},
        ),
        (LedgerComponent.SCHEMA_STORAGE, {"application": "pulsar", "component": "schema", "pulsar/schemaId": "t/ns/x"}),
    ],
)
def test_an_open_compacted_or_schema_ledger_of_a_live_topic_is_never_recovered(
    component: LedgerComponent, cm: dict[str, str]
) -> None:
    # Their writers (a compaction, the schema registry) name them only once closed: an old open one may be
    # in progress, whatever names it.
    res = decide(
        ledger_info(component),
        Facts(live({1, 9}), stored(cm, state="OPEN", ctime=OLD), schema_registry=frozenset(), recorded=False),
        now_ms=NOW,
        rules=RULES,
    )
    assert res.outcome is Outcome.IN_USE and "may be writing it" in res.reason, res


def test_an_open_ledger_of_a_gone_topic_is_deleted() -> None:
    # The topic is proven gone (no managed ledger in the metadata store): nothing writes for it, and its
    # open ledgers (the current ledger, every cursor ledger of a deleted topic) are what its writer left.
    for state in ("OPEN", "IN_RECOVERY"):
        res = decide(
            ledger_info(LedgerComponent.MANAGED_CURSOR),
            Facts(TopicGone(T, 0), stored({**ML_CM, "pulsar/cursor": "sub"}, state=state)),
            now_ms=NOW,
            rules=RULES,
        )
        assert res.outcome is Outcome.DELETED


def test_the_bookkeeper_copy_of_an_offloaded_ledger_is_reclaimed_once_the_broker_marked_it_deleted() -> None:
    # Defect: a LEDGER message for a ledger its topic lists as offloaded was "in use" forever.
    i = ledger_info(LedgerComponent.MANAGED_LEDGER)
    snap = live({7, 8}, offloaded=frozenset({7}))
    deleted_flag = OffloadInfo(1, 2, complete=True, bookkeeper_deleted=True, timestamp=NOW)
    assert (
        decide(i, Facts(snap, stored(ML_CM), offload=deleted_flag), now_ms=NOW, rules=RULES).outcome is Outcome.DELETED
    )
    for still_needed in (
        None,  # the topic records no offload
        OffloadInfo(1, 2, complete=False, bookkeeper_deleted=True, timestamp=NOW - DAY_MS),  # not complete
        # Complete long ago, not marked: a namespace with a longer lag, or bookkeeper-first reads, still
        # read this copy (a lag of the worker's own used to delete it).
        OffloadInfo(1, 2, complete=True, timestamp=NOW - 30 * DAY_MS),
        OffloadInfo(1, 2, complete=True, timestamp=None),
    ):
        res = decide(i, Facts(snap, stored(ML_CM), offload=still_needed), now_ms=NOW, rules=RULES)
        assert res.outcome is Outcome.IN_USE, still_needed
    # Only a managed-ledger ledger listed as offloaded qualifies: the current ledger never does.
    assert (
        decide(i, Facts(live({7, 8}), stored(ML_CM), offload=deleted_flag), now_ms=NOW, rules=RULES).outcome
        is Outcome.IN_USE
    )


def test_offloaded_copy_in_use_unless_the_topic_records_another_uuid() -> None:
    i = PendingDeleteLedgerInfo(
        TOPIC, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, 7, offload_context=CTX
    )
    objs = StoredObjects("s3", None, ({"ManagedLedgerName": ML}, {"managedledgername": ML}))
    same = OffloadInfo(*_halves(U1), complete=True)
    other = OffloadInfo(*_halves(U2), complete=True)
    assert decide(i, Facts(live({7}), objs, offload=same), now_ms=NOW, rules=RULES).outcome is Outcome.IN_USE
    assert decide(i, Facts(live({7}), objs, offload=None), now_ms=NOW, rules=RULES).outcome is Outcome.IN_USE
    assert decide(i, Facts(live({7}), objs, offload=other), now_ms=NOW, rules=RULES).outcome is Outcome.DELETED
    assert decide(i, Facts(live({8}), objs), now_ms=NOW, rules=RULES).outcome is Outcome.DELETED
    assert decide(i, Facts(TopicGone(T, 0), objs), now_ms=NOW, rules=RULES).outcome is Outcome.DELETED
    forged = StoredObjects("s3", None, ({"ManagedLedgerName": "t/ns/persistent/y"},))
    assert decide(i, Facts(live({7}), forged, offload=other), now_ms=NOW, rules=RULES).reason == "topic_mismatch"
    assert (
        decide(i, Facts(live({7}), Refused("unknown_offload_target")), now_ms=NOW, rules=RULES).outcome
        is Outcome.REJECTED
    )


def _halves(u: uuid.UUID) -> tuple[int, int]:
    ctx = OffloadContext.from_uuid(u, "aws-s3", {})
    return ctx.uid_msb, ctx.uid_lsb


def test_a_schema_ledger_stays_while_the_registry_references_it() -> None:
    i = ledger_info(LedgerComponent.SCHEMA_STORAGE)  # ledger 7
    md = stored({"application": "pulsar", "component": "schema", "pulsar/schemaId": "t/ns/x"})

    def outcome(snap: LiveSet | TopicGone, registry: frozenset[int] | None) -> Result:
        return decide(i, Facts(snap, md, schema_registry=registry), now_ms=NOW, rules=RULES)

    held = outcome(TopicGone(T, 0), frozenset({3, 7}))
    assert (held.outcome, held.reason) == (Outcome.IN_USE, "referenced by the schema registry")
    # A live topic's registry entry counts too, beyond its owner's list.
    assert outcome(live({1}), frozenset({7})).outcome is Outcome.IN_USE
    # No entry, or an entry (a registered schema) that does not list this ledger: garbage. Held on "the
    # schema is registered", it was queued by every scan and dead-lettered by the worker.
    assert outcome(TopicGone(T, 0), None).outcome is Outcome.DELETED
    assert outcome(TopicGone(T, 0), frozenset({3})).outcome is Outcome.DELETED
    assert outcome(live({1}), frozenset({3})).outcome is Outcome.DELETED


def test_routes() -> None:
    i = ledger_info(LedgerComponent.MANAGED_LEDGER)
    assert decide(i, Facts(live({1}), stored(ML_CM)), now_ms=NOW, rules=RULES).route is Route.OWNER
    assert decide(i, Facts(TopicGone(T, 0), Missing()), now_ms=NOW, rules=RULES).route is Route.DIRECT


# ---- every combination of facts: the safety invariants ---------------------------------------------------

ids = st.integers(min_value=1, max_value=9)
id_sets = st.frozensets(ids, max_size=4)


@st.composite
def bookkeeper_cases(draw: st.DrawFn) -> tuple[PendingDeleteLedgerInfo, Facts]:
    component = draw(st.sampled_from(list(LedgerComponent)))
    lid = draw(ids)
    info = ledger_info(component, lid)
    snap: LiveSet | TopicGone
    if draw(st.booleans()):
        snap = TopicGone(T, 0)
    else:
        snap = live(
            set(draw(id_sets)),
            cursors=draw(st.dictionaries(st.sampled_from(["sub", "other"]), ids, max_size=2)),
            schema=draw(id_sets),
            compacted=draw(st.none() | ids),
            offloaded=draw(id_sets),
        )
        snap = dataclasses.replace(snap, cursor_names=draw(st.frozensets(st.sampled_from(["sub", "other"]))))
    s = draw(st.sampled_from(["missing", "refused", "stored"]))
    if s == "missing":
        fact: Missing | Refused | StoredLedger = Missing()
    elif s == "refused":
        fact = Refused("unknown_offload_target")
    else:
        fact = stored(
            draw(st.sampled_from(CUSTOMS)),
            lid=lid,
            state=draw(st.sampled_from(["CLOSED", "OPEN", "IN_RECOVERY"])),
            ctime=draw(st.none() | st.integers(min_value=NOW - 10 * DAY_MS, max_value=NOW)),
        )
    offload = draw(
        st.none()
        | st.builds(
            OffloadInfo,
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-(2**63), 2**63 - 1),
            st.booleans(),
            st.booleans(),
            st.none() | st.integers(min_value=NOW - 2 * DAY_MS, max_value=NOW),
        )
    )
    bucket_props = st.dictionaries(
        st.sampled_from([f"{BUCKET_KEY_PREFIX}_1_2", f"{BUCKET_KEY_PREFIX}_3_4"]), ids.map(str)
    )
    bucket_cursor = draw(st.none() | st.builds(CursorRecord, st.none() | bucket_props))
    return info, Facts(
        snap, fact, schema_registry=draw(st.none() | id_sets), offload=offload, bucket_cursor=bucket_cursor
    )


@settings(max_examples=3000, deadline=None)
@given(bookkeeper_cases())
def test_bookkeeper_decisions_are_safe(case: tuple[PendingDeleteLedgerInfo, Facts]) -> None:
    info, facts = case
    res = decide(info, facts, now_ms=NOW, rules=RULES)
    assert res.outcome in (set(Outcome) - {Outcome.WOULD_DELETE, Outcome.TRANSIENT, Outcome.INVALID})
    if isinstance(facts.stored, Missing):
        assert res.outcome is Outcome.ALREADY_GONE
        return
    if isinstance(facts.stored, Refused):
        assert res.outcome is Outcome.REJECTED
        return
    assert isinstance(facts.stored, StoredLedger)
    # Identity first: a rejection never hides behind "in use", and nothing unproven is deleted.
    assert (res.outcome is Outcome.REJECTED) == (bookkeeper_rejection(info, facts.stored.metadata) is not None)
    if res.outcome is not Outcome.DELETED:
        return
    md = facts.stored.metadata
    assert md.state == "CLOSED" or isinstance(facts.live, TopicGone), "an open ledger of a live topic was deleted"
    assert md.ctime_ms is not None and NOW - md.ctime_ms >= RULES.min_ledger_age_ms, "a young ledger was deleted"
    if info.ledger_component is LedgerComponent.SCHEMA_STORAGE:
        assert info.ledger_id not in (facts.schema_registry or ()), "a schema ledger the registry lists was deleted"
    if info.ledger_component is LedgerComponent.DELAYED_INDEX_BUCKET and isinstance(facts.live, LiveSet):
        c = facts.bucket_cursor
        assert c is not None, "a bucket ledger was deleted without reading its cursor"
        assert info.ledger_id not in bucket_ledgers(c.properties or {}), "a bucket its cursor names was deleted"
        assert "sub" not in facts.live.cursor_names, "a bucket of a live subscription was deleted"
    if not isinstance(facts.live, TopicGone):
        snap = facts.live
        if snap.references(info.ledger_id):
            # The one exception: the BookKeeper copy of a listed ledger whose offload is complete and whose
            # copy the broker marked deleted.
            o = facts.offload
            assert info.ledger_component is LedgerComponent.MANAGED_LEDGER
            assert info.ledger_id in snap.offloaded_ledgers and info.ledger_id in snap.ml_ledgers
            assert o is not None and o.complete and o.bookkeeper_deleted


# ---- one order, facts read only when a rule asks ------------------------------------------------------------


def test_the_rule_order_is_written_once() -> None:
    # The order the worker, the replay, scan and the audit all run: changing it is changing this tuple.
    assert [r.__name__ for r in RULE_ORDER] == [
        "_nothing_stored",
        "_refused",
        "_identity_unproven",
        "_referenced",
        "_offloaded_copy_listed",
        "_schema_registered",
        "_bucket_held",
        "_too_young",
        "_open",
        "_unreferenced",
    ]


def lazily(info: PendingDeleteLedgerInfo, facts: Facts) -> tuple[Result, list[Need]]:
    """``decide`` starting from storage alone, each fact it asks for answered from ``facts``: the result, and
    the facts asked for, in order."""
    asked: list[Need] = []
    lazy = Facts.asking(facts.stored)
    while True:
        try:
            return decide(info, lazy, now_ms=NOW, rules=RULES), asked
        except Needed as n:
            assert n.need not in asked, f"{n.need} asked twice"
            asked.append(n.need)
            lazy = dataclasses.replace(lazy, **{n.need.field: getattr(facts, n.need.field)})


@settings(max_examples=500, deadline=None)
@given(bookkeeper_cases())
def test_a_decision_asking_for_its_facts_is_the_decision_on_all_of_them(
    case: tuple[PendingDeleteLedgerInfo, Facts],
) -> None:
    info, facts = case
    res, asked = lazily(info, facts)
    eager = decide(info, facts, now_ms=NOW, rules=RULES)
    # The same result; its route is known once the live state was read (the worker always reads it).
    assert dataclasses.replace(res, route=eager.route) == eager
    assert res.route is (eager.route if Need.LIVE in asked else Route.NONE)
    # The live state is always the first fact asked for: every other read comes after it.
    assert asked[:1] in ([], [Need.LIVE]), asked
    if Need.SCHEMA_REGISTRY in asked:
        assert info.ledger_component is LedgerComponent.SCHEMA_STORAGE
        assert not (isinstance(facts.live, LiveSet) and facts.live.references(info.ledger_id)), "a listed one"
    if Need.BUCKET_CURSOR in asked:
        assert info.ledger_component is LedgerComponent.DELAYED_INDEX_BUCKET and isinstance(facts.live, LiveSet)
    if Need.RECORDED in asked:
        assert isinstance(facts.stored, StoredLedger) and facts.stored.metadata.state != "CLOSED"


def test_a_listed_ledger_is_in_use_however_young_and_a_forged_one_rejected_without_its_live_state() -> None:
    # In use before too young: a young ledger its topic lists keeps its listing (the broker's marks rely on it).
    ml = ledger_info(LedgerComponent.MANAGED_LEDGER)
    young = stored(ML_CM, ctime=NOW - 1)
    assert decide(ml, Facts(live({7}), young), now_ms=NOW, rules=RULES).outcome is Outcome.IN_USE
    res = decide(ml, Facts(live({1}), young), now_ms=NOW, rules=RULES)
    assert (res.outcome, res.unproven) == (Outcome.TOO_YOUNG, False)
    res = decide(ml, Facts(live({1}), stored(ML_CM, ctime=None)), now_ms=NOW, rules=RULES)
    assert (res.outcome, res.unproven) == (Outcome.TOO_YOUNG, True)  # no proof of youth: the scanner skips it
    with pytest.raises(Needed) as asked:
        decide(ml, Facts.asking(young), now_ms=NOW, rules=RULES)
    assert asked.value.need is Need.LIVE
    # Identity needs no live state: the scanner decides a forged ledger before reading any topic.
    forged = decide(ml, Facts.asking(stored({**ML_CM, "pulsar/cursor": "sub"})), now_ms=NOW, rules=RULES)
    assert (forged.outcome, forged.route) == (Outcome.REJECTED, Route.NONE)


def test_a_hold_that_proves_no_use_says_so() -> None:
    # What the worker keeps without proof of use is marked, so that the scanner reports it skipped, not in use.
    compacting = dataclasses.replace(live({1, 9}), compaction_floor=-1)
    cm = {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": TOPIC}
    res = decide(ledger_info(LedgerComponent.COMPACTED_LEDGER), Facts(compacting, stored(cm)), now_ms=NOW, rules=RULES)
    assert (res.outcome, res.unproven) == (Outcome.IN_USE, True)
    res = decide(ledger_info(LedgerComponent.MANAGED_LEDGER), Facts(live({7}), stored(ML_CM)), now_ms=NOW, rules=RULES)
    assert (res.outcome, res.unproven) == (Outcome.IN_USE, False)
    kept_open = Facts(live({1}), stored(ML_CM, state="OPEN"), recorded=True)
    res = decide(ledger_info(LedgerComponent.MANAGED_LEDGER), kept_open, now_ms=NOW, rules=RULES)
    assert (res.outcome, res.unproven) == (Outcome.IN_USE, True)
    assert Facts.asking(Missing()).schema_registry is ASK


# ---- the Decider's I/O discipline, on scripted collaborators -------------------------------------------------


class _Snapshots:
    """One topic's live state; ``bump`` moves the epoch the way a 307 seen elsewhere would."""

    def __init__(self, snap: LiveSet | TopicGone) -> None:
        self.snap = snap
        self.current = snap.epoch
        self.reads = 0

    async def get(
        self, topic: TopicName, ledger_id: int | None = None, *, vouches: object = None, since: object = None
    ) -> LiveSet | TopicGone:
        self.reads += 1
        return self.snap if self.reads == 1 else _reepoch(self.snap, self.current)

    def is_current(self, snap: LiveSet | TopicGone) -> bool:
        return snap.epoch == self.current


def _reepoch(snap: LiveSet | TopicGone, epoch: int) -> LiveSet | TopicGone:
    import dataclasses

    return TopicGone(snap.topic, epoch) if isinstance(snap, TopicGone) else dataclasses.replace(snap, epoch=epoch)


class _Copy:
    stage = "bookkeeper"

    def __init__(self, fact: StoredLedger | Missing) -> None:
        self.fact = fact
        self.deleted: list[int] = []

    async def inspect(self, info: PendingDeleteLedgerInfo, dispatch: object = None) -> StoredLedger | Missing:
        return self.fact

    async def delete(self, info: PendingDeleteLedgerInfo, stored: object) -> bool:
        self.deleted.append(info.ledger_id)
        return True


class _BumpingLimiter:
    """The storage rate limit; while a decision waits for its token, another decision sees a 307."""

    def __init__(self, snapshots: _Snapshots, bumps: int) -> None:
        self.snapshots = snapshots
        self.bumps = bumps

    async def acquire(self) -> None:
        if self.bumps > 0:
            self.bumps -= 1
            self.snapshots.current += 1


def _decider(snapshots: _Snapshots, copy: _Copy, limiter: object, **kw: object):  # type: ignore[no-untyped-def]
    from worker.daemon.decider import Decider
    from worker.metrics import Metrics

    return Decider(
        admin=None,  # type: ignore[arg-type]
        snapshots=snapshots,  # type: ignore[arg-type]
        copies={LedgerType.LEDGER: copy},  # type: ignore[dict-item]
        pulsar=None,  # type: ignore[arg-type]
        bookkeeper=None,  # type: ignore[arg-type]
        limiter=limiter,  # type: ignore[arg-type]
        settings=WorkerSettings(min_ledger_age_s=600, snapshot_ttl_s=60),
        metrics=Metrics(),
        wall_clock_ms=lambda: NOW,
        **kw,  # type: ignore[arg-type]
    )


async def test_the_epoch_is_checked_after_the_rate_limit_wait_right_before_the_delete() -> None:
    # Defect: the epoch was checked before the rate-limiter wait; a 307 during the wait went unnoticed.
    snapshots = _Snapshots(TopicGone(T, 0))
    copy = _Copy(stored(ML_CM))
    d = _decider(snapshots, copy, _BumpingLimiter(snapshots, bumps=1))
    res = await d.decide_info(ledger_info(LedgerComponent.MANAGED_LEDGER))
    assert res.outcome is Outcome.DELETED
    assert snapshots.reads == 2  # re-taken from step 2 after the bump, then deleted on the current epoch
    assert copy.deleted == [7]
    assert d.metrics.reevaluations._value.get() == 1


async def test_an_epoch_that_keeps_moving_is_transient_and_deletes_nothing() -> None:
    snapshots = _Snapshots(TopicGone(T, 0))
    copy = _Copy(stored(ML_CM))
    d = _decider(snapshots, copy, _BumpingLimiter(snapshots, bumps=100))
    res = await d.decide_info(ledger_info(LedgerComponent.MANAGED_LEDGER))
    assert (res.outcome, res.stage) == (Outcome.TRANSIENT, "route")
    assert copy.deleted == []


async def test_dry_run_decides_and_deletes_nothing() -> None:
    snapshots = _Snapshots(TopicGone(T, 0))
    copy = _Copy(stored(ML_CM))
    d = _decider(snapshots, copy, _BumpingLimiter(snapshots, bumps=0), dry_run=True)
    res = await d.decide_info(ledger_info(LedgerComponent.MANAGED_LEDGER))
    assert res.outcome is Outcome.WOULD_DELETE and copy.deleted == []


async def test_an_unforeseen_exception_is_a_transient_outcome_with_its_stage() -> None:
    class Broken(_Copy):
        async def inspect(self, info: PendingDeleteLedgerInfo, dispatch: object = None) -> StoredLedger | Missing:
            raise AttributeError("'str' object has no attribute 'get'")

    snapshots = _Snapshots(TopicGone(T, 0))
    d = _decider(snapshots, Broken(Missing()), _BumpingLimiter(snapshots, bumps=0))
    res = await d.decide_info(ledger_info(LedgerComponent.MANAGED_LEDGER))
    assert (res.outcome, res.stage) == (Outcome.TRANSIENT, "bookkeeper")
    assert "AttributeError" in res.reason


class _VouchingSnapshots(_Snapshots):
    """Asks the decider's ``vouches`` about a read that started at ``read_started_ms``."""

    def __init__(self, snap: LiveSet | TopicGone, read_started_ms: int) -> None:
        super().__init__(snap)
        self.read_started_ms = read_started_ms
        self.answers: list[bool] = []

    async def get(
        self, topic: TopicName, ledger_id: int | None = None, *, vouches: object = None, since: object = None
    ) -> LiveSet | TopicGone:
        assert callable(vouches)
        self.answers.append(await vouches(self.read_started_ms))
        return await super().get(topic, ledger_id)


CREATED = NOW - 3_600_000


@pytest.mark.parametrize(
    ("fact", "read_started_ms", "vouched"),
    [
        (stored(ML_CM, ctime=CREATED), CREATED + 600_000, True),  # old enough when the read started
        (stored(ML_CM, ctime=CREATED), CREATED + 599_999, False),  # not yet: the topic might list it later
        (stored(ML_CM, ctime=None), NOW, False),  # no creation time proves nothing
        (Missing(), 1, True),  # nothing to delete: the live state does not matter
    ],
    ids=["old-enough", "one-ms-too-young", "no-ctime", "missing"],
)
async def test_a_snapshot_vouches_for_a_newer_ledger_only_once_the_ledger_was_old_enough(
    fact: StoredLedger | Missing, read_started_ms: int, vouched: bool
) -> None:
    snapshots = _VouchingSnapshots(live({1}), read_started_ms)
    d = _decider(snapshots, _Copy(fact), _BumpingLimiter(snapshots, bumps=0))
    await d.decide_info(ledger_info(LedgerComponent.MANAGED_LEDGER))
    assert snapshots.answers == [vouched]


async def test_an_inspection_that_failed_vouches_for_nothing_and_is_the_failure_reported() -> None:
    class Broken(_Copy):
        async def inspect(self, info: PendingDeleteLedgerInfo, dispatch: object = None) -> StoredLedger | Missing:
            raise BackendError("zookeeper", "connection lost")

    snapshots = _VouchingSnapshots(live({1}), NOW)
    d = _decider(snapshots, Broken(Missing()), _BumpingLimiter(snapshots, bumps=0))
    res = await d.decide_info(ledger_info(LedgerComponent.MANAGED_LEDGER))
    assert snapshots.answers == [False]
    assert (res.outcome, res.stage) == (Outcome.TRANSIENT, "zookeeper")


# ---- a delayed-delivery bucket ledger: in use while its cursor names it or its subscription lives ---------------


def bucket_live(cursor_names: frozenset[str] = frozenset(), ml: frozenset[int] = frozenset({40})) -> LiveSet:
    return LiveSet(BUCKET_T, ml, {}, frozenset(), None, frozenset(), "http://a", 0, 0.0, cursor_names=cursor_names)


@pytest.mark.parametrize(
    ("facts", "outcome", "route"),
    [
        (
            Facts(bucket_live(), bucket_stored(), bucket_cursor=CursorRecord({BUCKET_KEY: "31"})),
            Outcome.IN_USE,
            Route.OWNER,
        ),
        (
            Facts(bucket_live(frozenset({"my+sub"})), bucket_stored(), bucket_cursor=CursorRecord({})),
            Outcome.IN_USE,
            Route.OWNER,
        ),
        (
            Facts(bucket_live(), bucket_stored(), bucket_cursor=CursorRecord({BUCKET_KEY: "32"})),
            Outcome.DELETED,
            Route.OWNER,
        ),
        (Facts(bucket_live(), bucket_stored(), bucket_cursor=CursorRecord(None)), Outcome.DELETED, Route.OWNER),
        # The cursor was not read: never a delete.
        (Facts(bucket_live(), bucket_stored()), Outcome.IN_USE, Route.OWNER),
        # Any id the topic's owner lists is in use, whatever the message calls it.
        (
            Facts(bucket_live(ml=frozenset({31})), bucket_stored(), bucket_cursor=CursorRecord(None)),
            Outcome.IN_USE,
            Route.OWNER,
        ),
        (Facts(TopicGone(BUCKET_T, 0), bucket_stored()), Outcome.DELETED, Route.DIRECT),
        (
            Facts(bucket_live(), Missing(), bucket_cursor=CursorRecord({BUCKET_KEY: "31"})),
            Outcome.ALREADY_GONE,
            Route.OWNER,
        ),
        (
            Facts(bucket_live(), bucket_stored(state="OPEN"), bucket_cursor=CursorRecord(None)),
            Outcome.IN_USE,
            Route.OWNER,
        ),
    ],
)
def test_bucket_decision(facts: Facts, outcome: Outcome, route: Route) -> None:
    r = decide(bucket_info(), facts, now_ms=NOW, rules=RULES)
    assert (r.outcome, r.route) == (outcome, route)
