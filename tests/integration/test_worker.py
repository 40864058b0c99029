"""The deletion worker daemon end to end, against the real stack (one test per behaviour)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pulsar
import pytest

from testkit.harness import create_ledgers, ml_info, pulsar_ml_metadata
from testkit.topics import count_from_earliest, eventually, ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import TcpProxy, quiet_logger
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


async def gone(bookie: BookieClient, *ids: int) -> bool:
    return all([await bookie.get_metadata(i) is None for i in ids])


async def test_forged_and_foreign_ledgers_are_rejected_and_kept(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    topic_a = f"persistent://{test_namespace}/a-{unique}"
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    consumer = client.subscribe(topic_a, "sub", consumer_type=pulsar.ConsumerType.Shared)
    produce(stack.service_url, topic_a, 12)
    for _ in range(12):  # acknowledgements give the subscription its cursor ledger
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    client.close()
    a_ledger = ml_ledger_ids(await admin.internal_stats(TopicName.parse(topic_a)))[0]
    [foreign] = create_ledgers(stack, 1, {"application": "not-pulsar", "owner": "someone-else"})
    [bare] = create_ledgers(stack, 1, {})

    w = make_worker(f"forged-{unique}", start=False).start()
    # Topic A's ledger announced as belonging to (absent) topic B: direct route, identity mismatch.
    w.send(ml_info(f"persistent://{test_namespace}/b-{unique}", a_ledger))
    # A data ledger of a gone topic announced with the right topic but as a cursor ledger.
    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    [ghost_ledger] = create_ledgers(stack, 1, pulsar_ml_metadata(ghost))
    w.send(
        PendingDeleteLedgerInfo(ghost, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, ghost_ledger, cursor_name="s")
    )
    w.send(ml_info(f"persistent://{test_namespace}/c-{unique}", foreign))
    w.send(ml_info(f"persistent://{test_namespace}/c-{unique}", bare))

    # A live topic's own cursor ledger announced as one of its data ledgers: rejected at once (identity is
    # judged before use), not retried for hours as "in use".
    cursor_ledger = await eventually(lambda: _cursor_ledger(admin, topic_a), timeout=30, what="topic A's cursor ledger")
    w.send(ml_info(topic_a, cursor_ledger))

    async def settled() -> bool:
        return w.metric("ledger_deletion_rejected_total") >= 5

    await eventually(settled, timeout=60, what="5 rejections")
    for lid in (a_ledger, ghost_ledger, foreign, bare, cursor_ledger):
        assert await bookie.get_metadata(lid) is not None, f"ledger {lid} must survive a forged message"
    assert w.metric("ledger_deletion_rejected_total", reason="topic_mismatch") == 1
    assert w.metric("ledger_deletion_rejected_total", reason="component_mismatch") == 2
    assert w.metric("ledger_deletion_rejected_total", reason="not_pulsar") == 2
    assert w.metric("ledger_deletion_in_use_total") == 0
    assert w.metric("ledger_deletion_retried_total") == 0
    assert w.metric("ledger_deletion_deleted_total") == 0
    # Rejections are dead-lettered with their reason, so a systematic misread leaves a trace.
    assert w.metric("ledger_deletion_dlq_total", reason="rejected") == 5
    assert w.metric("ledger_deletion_acked_total") == 5
    dead = w.read_dlq()
    assert sorted(m.properties()["last_error"] for m in dead) == sorted(
        ["topic_mismatch", "component_mismatch", "component_mismatch", "not_pulsar", "not_pulsar"]
    )
    assert {m.properties()["reason"] for m in dead} == {"rejected"}
    assert {m.properties()["RECONSUMETIMES"] for m in dead} == {"1"}
    warnings = [json.loads(line) for line in w.log_text().splitlines() if '"deletion rejected' in line]
    assert len(warnings) == 5 and all(x["level"] == "warning" and "payload" in x for x in warnings)


async def _cursor_ledger(admin: PulsarAdmin, topic: str) -> int | None:
    """The ledger of a cursor of ``topic`` (a subscription's first acknowledgement creates it)."""
    stats = await admin.internal_stats(TopicName.parse(topic))
    for c in (stats.get("cursors") or {}).values():
        if int(c.get("cursorLedger", -1)) >= 0:
            return int(c["cursorLedger"])
    return None


async def test_duplicates_delete_once_and_ack_all(
    stack: Stack, test_namespace: str, unique: str, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(ghost))
    w = make_worker(f"dup-{unique}", start=False).start()
    for _ in range(3):
        w.send(ml_info(ghost, lid))

    async def settled() -> bool:
        # Settled for good, not only acknowledged: a copy still too young is acknowledged too, after its
        # retry copy is published.
        return w.metric("ledger_deletion_deleted_total") >= 3

    await eventually(settled, timeout=60, what="three settled copies")
    assert await bookie.get_metadata(lid) is None
    assert w.metric("ledger_deletion_deleted_total", result="deleted", route="direct") == 1
    assert w.metric("ledger_deletion_deleted_total", result="already_gone") == 2
    assert w.metric("ledger_deletion_failed_total") == 0
    assert w.metric("ledger_deletion_dlq_total") == 0


async def test_already_deleted_ledger_is_acked(
    stack: Stack, test_namespace: str, unique: str, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(ghost))
    await bookie.delete_ledger(lid)
    w = make_worker(f"gone-{unique}", start=False).start()
    w.send(ml_info(ghost, lid))

    async def acked() -> bool:
        return w.metric("ledger_deletion_acked_total") >= 1

    await eventually(acked, timeout=60, what="the ack")
    assert w.metric("ledger_deletion_deleted_total", result="already_gone") == 1
    assert w.metric("ledger_deletion_retried_total") == 0


async def test_malformed_payload_goes_to_dlq_and_worker_continues(
    stack: Stack, test_namespace: str, unique: str, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata(ghost))
    w = make_worker(f"bad-{unique}", start=False).start()
    w.send(ml_info(ghost, 0), raw=b"\x02\x00definitely not avro\xff")
    w.send(ml_info(ghost, 0), raw=b"")
    w.send(ml_info(ghost, lid))

    async def done() -> bool:
        # Settled for good: the valid one may be acknowledged first as too young (its retry copy published).
        settled = w.metric("ledger_deletion_deleted_total", result="deleted")
        return settled >= 1 and w.metric("ledger_deletion_dlq_total", reason="invalid") >= 2

    await eventually(done, timeout=60, what="three settled messages")
    assert w.metric("ledger_deletion_dlq_total", reason="invalid") == 2
    assert await bookie.get_metadata(lid) is None
    dead = w.read_dlq()
    assert len(dead) == 2
    for m in dead:
        props = m.properties()
        assert props["reason"] == "invalid"
        assert props["last_error"]
        assert props["REAL_TOPIC"].startswith(w.topics["pending"])
        assert props["ORIGIN_MESSAGE_ID"]
    assert w.proc is not None and w.proc.poll() is None


async def test_storage_outage_retries_then_dlq_or_recovers(
    stack: Stack, test_namespace: str, unique: str, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    doomed, survivor = create_ledgers(stack, 2, pulsar_ml_metadata(ghost))
    host, port = stack.bookie_http_url.removeprefix("http://").split(":")
    proxy = TcpProxy(host, int(port))
    try:
        # Outage that outlasts the attempts: the message ends in the DLQ with its reason, never acked
        # before that, and the ledger is untouched.
        w = make_worker(
            f"outage-{unique}",
            bookkeeper={"http_url": proxy.url, "request_timeout_s": 2},
            worker={"max_attempts": 3, "backoff_initial_s": 0.5, "backoff_max_s": 1},
            start=False,
        ).start()
        w.send(ml_info(ghost, doomed))

        async def parked() -> bool:
            return w.metric("ledger_deletion_dlq_total") >= 1

        await eventually(parked, timeout=90, what="the dead letter")
        assert w.metric("ledger_deletion_dlq_total", reason="transient") == 1
        assert w.metric("ledger_deletion_retried_total") == 2
        assert w.metric("ledger_deletion_failed_total", stage="bookkeeper") == 3
        [dead] = w.read_dlq()
        assert dead.properties()["RECONSUMETIMES"] == "3"
        assert "attempts exhausted" in dead.properties()["last_error"]
        assert await bookie.get_metadata(doomed) is not None

        # Outage that heals before the attempts run out: retried with backoff, then deleted.
        w.stop()
        w2 = make_worker(
            f"heal-{unique}",
            bookkeeper={"http_url": proxy.url, "request_timeout_s": 2},
            worker={"max_attempts": 10, "backoff_initial_s": 1, "backoff_max_s": 2},
            start=False,
        ).start()
        w2.send(ml_info(ghost, survivor))

        async def retried() -> bool:
            return w2.metric("ledger_deletion_retried_total") >= 2

        await eventually(retried, timeout=60, what="retries during the outage")
        assert await bookie.get_metadata(survivor) is not None
        proxy.up()

        async def deleted() -> bool:
            return await gone(bookie, survivor)

        await eventually(deleted, timeout=90, what="deletion after recovery")
        assert w2.metric("ledger_deletion_deleted_total", result="deleted") == 1
        assert w2.metric("ledger_deletion_dlq_total") == 0
    finally:
        proxy.close()


async def test_sigterm_drains_and_metrics_match(
    stack: Stack, test_namespace: str, unique: str, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    ids = create_ledgers(stack, 12, pulsar_ml_metadata(ghost))
    # A slow storage budget (2 deletes/s) so SIGTERM lands while messages are in flight.
    w1 = make_worker(
        f"drain-{unique}", worker={"deletes_per_second": 2, "delete_burst": 1, "max_inflight": 4}, start=False
    )
    w1.start()
    for lid in ids:
        w1.send(ml_info(ghost, lid))

    async def some() -> bool:
        return w1.metric("ledger_deletion_deleted_total") >= 3

    await eventually(some, timeout=60, what="the first deletions")
    before = w1.metrics()
    assert w1.stop(signal.SIGTERM) == 0
    log = w1.log_text()
    assert "draining" in log or "stop requested" in log
    assert "worker stopped" in log
    by_w1 = _deleted_ids(log)
    deleted_by_w1 = len(by_w1)
    assert len(set(by_w1)) == deleted_by_w1 and set(by_w1) <= set(ids)
    # Everything w1 counted before the signal was logged, and what it logged as deleted is gone.
    assert (
        deleted_by_w1
        >= before[
            ("ledger_deletion_deleted_total", (("ledger_type", "LEDGER"), ("result", "deleted"), ("route", "direct")))
        ]
    )
    assert await gone(bookie, *by_w1)
    assert deleted_by_w1 < len(ids), "SIGTERM landed after the whole batch: the drain was not exercised"

    # A second worker finishes the rest; together they deleted each ledger exactly once.
    w2 = make_worker(f"drain-{unique}", start=False)
    w2.start()

    async def all_gone() -> bool:
        return await gone(bookie, *ids)

    await eventually(all_gone, timeout=90, what="every ledger deleted")

    async def settled() -> bool:
        return w2.metric("ledger_deletion_deleted_total") + deleted_by_w1 >= len(ids)

    await eventually(settled, timeout=30, what="w2's counters")
    assert w2.metric("ledger_deletion_deleted_total", result="deleted") + deleted_by_w1 == len(ids)
    # Both workers write one log (same name): each ledger deleted exactly once, by one of them.
    assert sorted(_deleted_ids(w2.log_text())) == sorted(ids)
    assert w2.metric("ledger_deletion_received_total") == w2.metric("ledger_deletion_acked_total")


def _events(log: str) -> list[dict]:
    """The worker's structlog JSON lines (the Pulsar client's own log lines are skipped)."""
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def _deleted_ids(log: str) -> list[int]:
    return [int(e["ledger_id"]) for e in _events(log) if e.get("event") == "ledger deleted"]


def _in_use_ids(*logs: str) -> set[int]:
    return {
        int(e["ledger_id"])
        for log in logs
        for e in _events(log)
        if e.get("event") == "retry scheduled" and e.get("reason") == "in_use"
    }


async def test_kill9_mid_batch_loses_nothing_and_spares_in_use(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    orphans = create_ledgers(stack, 20, pulsar_ml_metadata(ghost))
    live_topic = f"persistent://{test_namespace}/live-{unique}"
    produce(stack.service_url, live_topic, 15)
    live = ml_ledger_ids(await admin.internal_stats(TopicName.parse(live_topic)))
    name = f"kill-{unique}"
    w1 = make_worker(name, worker={"deletes_per_second": 3, "delete_burst": 1}, start=False)
    w1.start()
    for lid in orphans:
        w1.send(ml_info(ghost, lid))
    for lid in live:
        w1.send(ml_info(live_topic, lid))

    async def midway() -> bool:
        return w1.metric("ledger_deletion_deleted_total") >= 4

    await eventually(midway, timeout=60, what="some deletions before the crash")
    w1.kill9()

    w2 = make_worker(name, start=False)
    w2.start()

    async def drained() -> bool:
        return await gone(bookie, *orphans)

    await eventually(drained, timeout=120, what="every pending deletion completed after the crash")

    async def every_live_ledger_judged_in_use() -> bool:
        return _in_use_ids(w1.log_text(), w2.log_text()) >= set(live)

    # Every live ledger that was sent is judged in use (by w1 before the crash or by w2 after), not just one.
    await eventually(every_live_ledger_judged_in_use, timeout=60, what="each live ledger judged in use")
    for lid in live:
        assert await bookie.get_metadata(lid) is not None, f"in-use ledger {lid} was deleted"
    # The live topic still lists its ledgers and reads back every message.
    stats = await admin.internal_stats(TopicName.parse(live_topic))
    assert set(live) <= set(ml_ledger_ids(stats))
    assert count_from_earliest(stack.service_url, live_topic) == 15


async def test_a_broker_queued_ledger_still_listed_is_released_not_dead_lettered(
    stack: Stack,
    test_namespace: str,
    unique: str,
    admin: PulsarAdmin,
    bookie: BookieClient,
    tmp_path: Path,
    make_worker: WorkerFactory,
) -> None:
    """The broker extension queues a ledger before the metadata write that drops it; when that write fails
    the ledger stays listed. Its message must not end in the DLQ as noise (the broker queues the ledger
    again when it really drops it). What makes it the broker's is the extension's signature under the key
    the brokers and the worker share, not a property: the informational ``source`` property alone, and a
    signature under another key, are dead-lettered as before. (The extension's own signed messages, from a
    metadata write that really failed: tests/extension/test_broker_marks.py.)"""
    from worker.core.broker_marks import MARK_PROPERTY, signature
    from worker.formats.message import encode

    topic = f"persistent://{test_namespace}/kept-{unique}"
    produce(stack.service_url, topic, 12)
    live = ml_ledger_ids(await admin.internal_stats(TopicName.parse(topic)))[0]
    key = tmp_path / "broker-mark.key"
    key.write_bytes(b"the-brokers-secret\n")
    w = make_worker(
        f"kept-{unique}",
        worker={
            "max_attempts": 2,
            "in_use_retry_s": 0.5,
            "min_ledger_age_s": 8,
            "broker_mark_key_file": str(key),
        },
        start=False,
    ).start()
    raw = encode(ml_info(topic, live))
    w.send(ml_info(topic, live), properties={MARK_PROPERTY: signature(b"the-brokers-secret", raw)})
    forged = {"source": "broker-extension", "broker": "127.0.0.1:8080"}
    w.send(ml_info(topic, live), properties=forged)
    w.send(ml_info(topic, live), properties={MARK_PROPERTY: signature(b"another-key", raw)})

    async def settled() -> bool:
        released = "still listed by its topic: released" in w.log_text()
        return released and w.metric("ledger_deletion_dlq_total", reason="in_use") >= 2

    await eventually(settled, timeout=60, what="one message released, the two others dead-lettered")
    assert await bookie.get_metadata(live) is not None, "a listed ledger must never be deleted"
    assert w.metric("ledger_deletion_deleted_total") == 0
    dead = w.read_dlq()
    assert len(dead) == 2 and {d.properties()["reason"] for d in dead} == {"in_use"}
    assert w.log_text().count("still listed by its topic: released") == 1
    assert w.metric("ledger_deletion_dlq_total", reason="in_use") == 2
