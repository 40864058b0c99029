"""The decision core's hard cases on the real stack: when a topic is gone, what an unforeseen failure
does, what an ambiguous bookie answer costs, and open ledgers.

Where a broker or bookie must answer something it would not answer by itself (a 404 that is not
Pulsar's, a lookup that is not JSON), a loopback HTTP proxy sits in front of the real server and replaces
exactly that answer; everything else is the real server's.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from testkit.harness import create_ledgers, ml_info, pulsar_ml_metadata
from testkit.topics import count_from_earliest, eventually, ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import HttpProxy
from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


def admin_call(stack: Stack, method: str, path: str, body: object | None = None) -> None:
    req = urllib.request.Request(
        f"{stack.admin_url}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=30).close()


def answer_listing(proxy: HttpProxy, namespace: str, answer: tuple[int, str]) -> None:
    """The admin API's topic list of ``namespace`` (its half of a "gone" proof for a topic no broker has
    loaded) answered with ``answer``; every other request passes through."""

    def fault(method: str, path: str) -> tuple[int, str] | None:
        return answer if path.split("?")[0] == f"/admin/v2/persistent/{namespace}" else None

    proxy.fault(fault)


@pytest.fixture
def admin_proxy(stack: Stack) -> Iterator[HttpProxy]:
    p = HttpProxy(stack.admin_url)
    yield p
    p.close()


# ---- "gone" = the admin API says so AND the metadata store confirms it ---------------------------------------


async def test_ledgers_of_a_deleted_namespace_are_deleted(
    stack: Stack, unique: str, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    # Defect: the lookup's "Namespace not found" was TRANSIENT: never cleaned, dead-lettered after 10 tries.
    topic = f"persistent://public/deleted-ns-{unique}/t"
    ids = create_ledgers(stack, 3, pulsar_ml_metadata(topic))
    w = make_worker(f"nons-{unique}")
    for lid in ids:
        w.send(ml_info(topic, lid))

    async def all_deleted() -> bool:
        return w.metric("ledger_deletion_deleted_total", result="deleted", route="direct") == 3

    await eventually(all_deleted, timeout=60, what="the deleted namespace's ledgers deleted")
    for lid in ids:
        assert await bookie.get_metadata(lid) is None
    assert w.metric("ledger_deletion_dlq_total") == 0
    assert w.metric("ledger_deletion_failed_total") == 0


async def test_deleted_topic_is_cleaned_where_auto_creation_is_off(
    stack: Stack, unique: str, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    # allowAutoTopicCreation=false (common in production) made the lookup of a deleted topic a 404 too. No
    # lookup is made any more: the topic has no managed ledger, and its namespace's topic list does not name it.
    ns = f"public/noauto-{unique}"
    admin_call(stack, "PUT", f"/admin/v2/namespaces/{ns}")
    admin_call(stack, "POST", f"/admin/v2/namespaces/{ns}/autoTopicCreation", {"allowAutoTopicCreation": False})
    topic = f"persistent://{ns}/deleted-{unique}"
    ids = create_ledgers(stack, 2, pulsar_ml_metadata(topic))
    w = make_worker(f"noauto-{unique}")
    for lid in ids:
        w.send(ml_info(topic, lid))

    async def all_deleted() -> bool:
        return w.metric("ledger_deletion_deleted_total", result="deleted", route="direct") == 2

    await eventually(all_deleted, timeout=60, what="the deleted topic's ledgers deleted")
    assert w.metric("ledger_deletion_admin_requests_total", endpoint="topics", outcome="ok") >= 1
    assert w.metric("ledger_deletion_admin_requests_total", endpoint="lookup", outcome="ok") == 0
    for lid in ids:
        assert await bookie.get_metadata(lid) is None


async def test_a_404_without_pulsars_reason_deletes_nothing(
    stack: Stack, unique: str, bookie: BookieClient, admin_proxy: HttpProxy, make_worker: WorkerFactory
) -> None:
    # Defect: any 404 made a topic "gone", and the direct route then deleted on identity and age alone.
    ns = f"public/html404-{unique}"
    admin_call(stack, "PUT", f"/admin/v2/namespaces/{ns}")
    topic = f"persistent://{ns}/t"
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(topic))
    answer_listing(admin_proxy, ns, (404, "<html><body>Not Found</body></html>"))
    w = make_worker(
        f"w-h404-{unique}",
        pulsar={"admin_url": admin_proxy.url},
        worker={"max_attempts": 2, "backoff_initial_s": 0.5, "backoff_max_s": 1},
    )
    w.send(ml_info(topic, lid))

    async def parked() -> bool:
        return w.metric("ledger_deletion_dlq_total", reason="transient") == 1

    await eventually(parked, timeout=60, what="the dead letter")
    assert await bookie.get_metadata(lid) is not None
    assert w.metric("ledger_deletion_failed_total", stage="route") == 2
    [dead] = w.read_dlq()
    assert "without Pulsar's reason" in dead.properties()["last_error"]


async def test_the_two_stores_disagreeing_deletes_nothing(
    stack: Stack,
    unique: str,
    admin: PulsarAdmin,
    bookie: BookieClient,
    admin_proxy: HttpProxy,
    make_worker: WorkerFactory,
) -> None:
    # The admin API (wrongly, here through the proxy) lists one topic that has no managed ledger, and not the
    # live one. The live topic's managed ledger in ZooKeeper decides: its old ledger, which identity and age
    # alone would let go, stays in use. The listed topic is not proven gone either: its ledger stays, and the
    # message is dead-lettered as transient.
    ns = f"public/lying-{unique}"
    admin_call(stack, "PUT", f"/admin/v2/namespaces/{ns}")
    admin_call(
        stack, "POST", f"/admin/v2/namespaces/{ns}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    )
    live = f"persistent://{ns}/live"
    produce(stack.service_url, live, 12)
    old = ml_ledger_ids(await admin.internal_stats(TopicName.parse(live)))[0]
    await admin.unload(TopicName.parse(live))
    phantom = f"persistent://{ns}/phantom"
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(phantom))
    answer_listing(admin_proxy, ns, (200, json.dumps([phantom])))
    w = make_worker(
        f"w-lie-{unique}",
        pulsar={"admin_url": admin_proxy.url},
        worker={"max_attempts": 2, "backoff_initial_s": 0.5, "backoff_max_s": 1, "in_use_retry_s": 0.5},
    )
    w.send(ml_info(live, old))
    w.send(ml_info(phantom, lid))

    async def parked() -> bool:
        return w.metric("ledger_deletion_dlq_total", reason="transient") == 1

    await eventually(parked, timeout=60, what="the dead letter")
    assert w.metric("ledger_deletion_in_use_total") >= 1
    for ledger in (old, lid):
        assert await bookie.get_metadata(ledger) is not None
    assert w.metric("ledger_deletion_deleted_total") == 0
    # (The live ledger, in use for max_attempts deliveries, is dead-lettered as in_use.)
    [dead] = [m for m in w.read_dlq() if m.properties()["reason"] == "transient"]
    assert "the admin API lists it, but the metadata store has no managed ledger" in dead.properties()["last_error"]
    assert count_from_earliest(stack.service_url, live) == 12


# ---- every failure is an attempt: counted, retried, dead-lettered ---------------------------------------------


async def test_unforeseen_admin_answers_are_counted_retried_and_dead_lettered(
    stack: Stack, unique: str, bookie: BookieClient, admin_proxy: HttpProxy, make_worker: WorkerFactory
) -> None:
    # Defect: an exception the pipeline did not map (an admin answer in plain text, an odd value) reached the
    # daemon, whose un-awaited negative_acknowledge parked the message forever. And a topic list that is not a
    # list of names must never read as one that does not name the topic.
    plain_ns, odd_ns = f"public/plain-{unique}", f"public/odd-{unique}"
    for ns in (plain_ns, odd_ns):
        admin_call(stack, "PUT", f"/admin/v2/namespaces/{ns}")
    plain, odd = f"persistent://{plain_ns}/t", f"persistent://{odd_ns}/t"
    [plain_ledger] = create_ledgers(stack, 1, pulsar_ml_metadata(plain))
    [odd_ledger] = create_ledgers(stack, 1, pulsar_ml_metadata(odd))
    answer_listing(admin_proxy, plain_ns, (200, "the topics are a and b"))
    answer_listing(admin_proxy, odd_ns, (200, json.dumps({"topics": []})))
    w = make_worker(
        f"poison-{unique}",
        pulsar={"admin_url": admin_proxy.url},
        worker={"max_attempts": 3, "backoff_initial_s": 0.5, "backoff_max_s": 1},
    )
    w.send(ml_info(plain, plain_ledger))
    w.send(ml_info(odd, odd_ledger))

    async def parked() -> bool:
        return w.metric("ledger_deletion_dlq_total", reason="transient") == 2

    await eventually(parked, timeout=90, what="both messages dead-lettered")
    assert w.metric("ledger_deletion_failed_total", stage="route") == 6  # 3 attempts each
    assert w.metric("ledger_deletion_retried_total") == 4
    assert w.metric("ledger_deletion_received_total") == 6
    assert {m.properties()["RECONSUMETIMES"] for m in w.read_dlq()} == {"3"}
    for lid in (plain_ledger, odd_ledger):
        assert await bookie.get_metadata(lid) is not None
    assert "was never awaited" not in w.log_text()


# ---- an ambiguous bookie answer is settled per ledger, never by listing the cluster -----------------------------


async def test_an_already_gone_ledger_costs_no_listing_of_every_ledger(
    stack: Stack, unique: str, test_namespace: str, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    ids = create_ledgers(stack, 3, pulsar_ml_metadata(ghost))
    for lid in ids:
        await bookie.delete_ledger(lid)
    proxy = HttpProxy(stack.bookie_http_url)
    try:
        w = make_worker(f"ambig-{unique}", bookkeeper={"http_url": proxy.url})
        for lid in ids:
            w.send(ml_info(ghost, lid))

        async def settled() -> bool:
            return w.metric("ledger_deletion_deleted_total", result="already_gone") == 3

        await eventually(settled, timeout=60, what="three already-gone ledgers settled")
        # The worker's batch sweep found them missing in BookKeeper's metadata store: no bookie was asked.
        assert w.metric("ledger_deletion_deleted_total", result="already_gone", route="none") == 3
        assert proxy.paths("/api/v1/ledger/metadata/") == []
        # A ledger that goes missing between the sweep and its inspection reaches the bookie, which answers
        # 500 for it; the metadata store settles it, one ledger each, never by a listing.
        async with new_session(30) as s, Stores(f"zk:{stack.zookeeper_hosts}") as zk:
            client = BookieClient(proxy.url, s, zk.bookkeeper.ledger_metadata_exists)
            assert [await client.get_metadata(lid) for lid in ids] == [None] * 3
        assert len(proxy.paths("/api/v1/ledger/metadata/")) == 3
        assert proxy.paths("/api/v1/ledger/list") == []
    finally:
        proxy.close()


# ---- an open ledger is never deleted -----------------------------------------------------------------------------


async def test_an_open_ledger_of_a_live_topic_is_never_deleted_and_one_of_a_gone_topic_is(
    stack: Stack, unique: str, test_namespace: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    # Defect: verification ignored the ledger's state. A compaction running longer than min_ledger_age_s
    # has an OPEN ledger of a live topic that is old enough, not yet its compacted ledger, and below the
    # snapshot's largest id. While the topic exists such a ledger is never deleted; once the topic is proven
    # gone (no managed ledger left to write for), its open ledgers are what a dead writer left behind.
    live_topic = f"persistent://{test_namespace}/compacting-{unique}"
    produce(stack.service_url, live_topic, 6)
    compacted_md = {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": live_topic}
    [compacting] = create_ledgers(stack, 1, compacted_md, leave_open=True)
    ghost = f"persistent://{test_namespace}/crashed-{unique}"
    [left_open] = create_ledgers(stack, 1, pulsar_ml_metadata(ghost), leave_open=True)
    for lid in (compacting, left_open):
        md = await bookie.get_metadata(lid)
        assert md is not None and md.state == "OPEN"
    assert max(ml_ledger_ids(await admin.internal_stats(TopicName.parse(live_topic)))) < compacting
    produce(stack.service_url, live_topic, 6)  # the topic's ledger ids now pass the compaction's
    assert max(ml_ledger_ids(await admin.internal_stats(TopicName.parse(live_topic)))) > compacting

    w = make_worker(f"open-{unique}", worker={"max_attempts": 3, "in_use_retry_s": 0.5})
    w.send(PendingDeleteLedgerInfo(live_topic, LedgerComponent.COMPACTED_LEDGER, LedgerType.LEDGER, compacting))
    w.send(ml_info(ghost, left_open))

    async def settled() -> bool:
        return (
            w.metric("ledger_deletion_dlq_total", reason="in_use") == 1 and await bookie.get_metadata(left_open) is None
        )

    await eventually(settled, timeout=60, what="the live topic's open ledger parked, the gone topic's deleted")
    assert await bookie.get_metadata(compacting) is not None
    assert w.metric("ledger_deletion_deleted_total", route="direct", result="deleted") == 1
    [dead] = w.read_dlq()
    assert "ledger_open" in dead.properties()["last_error"]


# ---- the age guard, exercised ---------------------------------------------------------------------------------


async def test_a_young_ledger_waits_for_the_minimum_age_then_is_deleted(
    stack: Stack, unique: str, test_namespace: str, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    # Every integration test used to run with min_ledger_age_s: 0, so the guard itself was never exercised.
    ghost = f"persistent://{test_namespace}/young-{unique}"
    w = make_worker(f"young-{unique}", worker={"min_ledger_age_s": 6, "snapshot_ttl_s": 1})
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(ghost))
    md = await bookie.get_metadata(lid)
    assert md is not None and md.ctime_ms is not None
    w.send(ml_info(ghost, lid))

    async def deleted() -> bool:
        return await bookie.get_metadata(lid) is None

    await eventually(deleted, timeout=60, what="the ledger deleted once old enough")
    events = [json.loads(line) for line in w.log_text().splitlines() if line.startswith("{")]
    young = [e for e in events if e.get("event") == "retry scheduled" and e.get("reason") == "too_young"]
    assert young, "the ledger was never judged too young"
    [done] = [e for e in events if e.get("event") == "ledger deleted"]
    from datetime import datetime

    deleted_ms = datetime.fromisoformat(done["timestamp"]).timestamp() * 1000
    assert deleted_ms - md.ctime_ms >= 6000, "deleted before it reached the minimum age"
