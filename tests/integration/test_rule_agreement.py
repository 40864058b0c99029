"""``scan`` and the worker agree about every ledger, on the real stack.

Both run the one decision (``worker.core.decision.decide``); this test holds them to it from the outside: real
orphans and live ledgers of several kinds, the scanner over their namespace, then the worker's own decider (dry
run) on the message ``scan`` would queue for each ledger the scanner judged. Both decide as of one instant (the
scan's clock), so a ledger's age is the same to both. Scanner orphan <=> the worker would delete (or recover,
then delete) it; in use <=> kept in use; too young <=> too young; skipped <=> never deleted.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from testkit.harness import create_ledgers, pulsar_ml_metadata
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import settings_of, worker_config
from tests.integration.test_scanner import build_scene
from worker.backends.bookie_http import BookieClient
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.broker.snapshot_cache import snapshot_cache
from worker.core.decision import Outcome
from worker.daemon.decider import open_decider
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.operations.scanner import Decision, Scanner, Verdict
from worker.settings import WorkerSettings

pytestmark = pytest.mark.integration

MIN_AGE_S = 15

# What the worker does (dry run) with a ledger the scanner reports so.
AGREES = {
    Verdict.ORPHAN: {Outcome.WOULD_DELETE},
    Verdict.IN_USE: {Outcome.IN_USE},
    Verdict.TOO_YOUNG: {Outcome.TOO_YOUNG},
    # Kept without proof of use, or not judged: never deleted, whatever else the worker says.
    Verdict.SKIPPED: {Outcome.IN_USE, Outcome.TOO_YOUNG, Outcome.TRANSIENT, Outcome.REJECTED},
}


def message(d: Decision) -> PendingDeleteLedgerInfo:
    """The message ``scan`` would queue for this ledger (built here, not by the scanner)."""
    assert d.component is not None and d.topic is not None
    component = LedgerComponent(d.component)
    return PendingDeleteLedgerInfo(d.topic, component, LedgerType.LEDGER, d.ledger_id, d.cursor, d.schema_id)


async def test_scan_and_the_worker_decide_every_ledger_alike(
    stack: Stack, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ns = f"public/ldw-agree-{unique}"
    await admin.ensure_namespace(ns)
    await admin.set_retention(ns, -1, -1)
    # Data ledgers dropped from a live topic and still listed; a deleted topic's data and cursor ledgers; a live
    # topic's data, cursor and schema ledgers; stray schema and compacted ledgers (testkit/orphans.py).
    scene = await build_scene(stack, admin, ns, unique)
    live = f"persistent://{ns}/live-{unique}"
    # A cursor's old ledger beside its current one, and an open data ledger nothing names (recovered, then deleted).
    [old_cursor] = create_ledgers(stack, 1, {**pulsar_ml_metadata(live), "pulsar/cursor": f"keep-{unique}"})
    [left_open] = create_ledgers(stack, 1, pulsar_ml_metadata(live), leave_open=True)
    made_at = time.time()
    await asyncio.sleep(MIN_AGE_S + 1)
    # Too young, both: a live topic's ledger, and one of a topic that never was (neither needs a live state).
    [young] = create_ledgers(stack, 1, pulsar_ml_metadata(live))
    [young_gone] = create_ledgers(stack, 1, pulsar_ml_metadata(f"persistent://{ns}/nosuch-{unique}"))
    now = time.time()
    assert now - made_at > MIN_AGE_S

    async with Stores(f"zk:{stack.zookeeper_hosts}") as stores:
        snapshots = snapshot_cache(admin, WorkerSettings(), stores, ttl_s=0)
        scanner = Scanner(bookie, snapshots, stores.pulsar, min_age_s=MIN_AGE_S, namespaces=[ns], clock=lambda: now)
        judged = (await scanner.scan()).decisions
    by_id = {d.ledger_id: d for d in judged}
    expected = {lid: Verdict.ORPHAN for lid in scene.orphans} | {old_cursor: Verdict.ORPHAN}
    expected |= {left_open: Verdict.ORPHAN, young: Verdict.TOO_YOUNG, young_gone: Verdict.TOO_YOUNG}
    expected |= {lid: Verdict.IN_USE for lid in scene.live}
    # (A live ledger the broker deleted since, e.g. a rolled cursor ledger, is simply not listed any more.)
    assert {lid: by_id[lid].verdict for lid in expected if lid in by_id} == {
        lid: v for lid, v in expected.items() if lid in by_id
    }
    assert set(scene.orphans) | {old_cursor, left_open, young, young_gone} <= set(by_id)

    h = worker_config(make_worker, f"agree-{unique}", worker={"min_ledger_age_s": MIN_AGE_S})
    disagreements = {}
    async with open_decider(settings_of(h), dry_run=True) as decider:
        decider.now_ms = lambda: int(now * 1000)  # the scan's instant: one age for both
        for d in judged:
            res = await decider.decide_info(message(d))
            if res.outcome not in AGREES[d.verdict]:
                disagreements[d.ledger_id] = (d.verdict.value, d.why, res.outcome.value, res.reason)
    assert disagreements == {}
    assert {d.verdict for d in judged} >= {Verdict.ORPHAN, Verdict.IN_USE, Verdict.TOO_YOUNG}
