"""OFFLOAD_LEDGER deletions against ledgers Pulsar's own offloader (jcloud, aws-s3) put in the S3 server."""

from __future__ import annotations

import uuid

import pytest

from testkit.orphans import drop_ledgers_from_metadata, edit_offload
from testkit.topics import count_from_earliest, eventually, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.offload_helpers import keys_of, offload_contexts, offload_msg, offload_topic
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


def exists(s3, bucket: str, key: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except s3.exceptions.ClientError:
        return False


async def test_offloaded_ledger_in_use_then_deleted_and_forgeries_rejected(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, s3, make_worker: WorkerFactory
) -> None:
    topic = f"persistent://{test_namespace}/off-{unique}"
    t = TopicName.parse(topic)
    produce(stack.service_url, topic, 16)
    offloaded = await offload_topic(admin, t)
    assert len(offloaded) >= 2
    ctxs = await offload_contexts(stack, t)
    victim, keeper = offloaded[0], offloaded[1]
    ctx = ctxs[victim]
    assert ctx.driver_name == "aws-s3" and ctx.driver_metadata["bucket"] == stack.s3_bucket
    for key in keys_of(ctx, victim):
        assert exists(s3, stack.s3_bucket, key), key

    # A failed earlier offload attempt of `keeper`: objects under another uuid, laid out and tagged the
    # way the offloader does. The topic records a different uuid for `keeper`, so this copy is garbage.
    stale = OffloadContext.from_uuid(uuid.uuid4(), ctx.driver_name, dict(ctx.driver_metadata))
    for key in keys_of(stale, keeper):
        s3.put_object(
            Bucket=stack.s3_bucket, Key=key, Body=b"partial", Metadata={"ManagedLedgerName": t.managed_ledger_name}
        )

    w = make_worker(f"off-{unique}", worker={"in_use_retry_s": 3, "max_attempts": 200})
    w.send(offload_msg(topic, victim, ctx))  # listed with this very uuid: in use
    w.send(offload_msg(topic, keeper, stale))  # listed, but under another uuid: deletable
    # Forgeries (for a topic that does not exist, so nothing is in use): a bucket the worker is not
    # configured for, and another topic's name on this topic's objects.
    foreign = OffloadContext(ctx.uid_msb, ctx.uid_lsb, ctx.driver_name, {**ctx.driver_metadata, "bucket": "elsewhere"})
    other = f"persistent://{test_namespace}/other-{unique}"  # no such topic: direct route
    w.send(offload_msg(other, victim, foreign))
    w.send(offload_msg(other, victim, ctx))

    async def first_round() -> bool:
        return (
            w.metric("ledger_deletion_in_use_total") >= 1
            and w.metric("ledger_deletion_rejected_total") >= 2
            and w.metric("ledger_deletion_deleted_total") >= 1
        )

    await eventually(first_round, timeout=60, what="in-use, two rejections and the stale copy deleted")
    assert w.metric("ledger_deletion_rejected_total", reason="unknown_offload_target") == 1
    assert w.metric("ledger_deletion_rejected_total", reason="topic_mismatch") == 1
    for key in keys_of(stale, keeper):
        assert not exists(s3, stack.s3_bucket, key), f"stale copy {key} survived"
    for key in keys_of(ctxs[keeper], keeper) + keys_of(ctx, victim):
        assert exists(s3, stack.s3_bucket, key), f"live offloaded object {key} was deleted"

    # Phase 1 completes for `victim`: its topic forgets it; the retried message now deletes both objects.
    await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, [victim])

    async def objects_gone() -> bool:
        return not any(exists(s3, stack.s3_bucket, k) for k in keys_of(ctx, victim))

    await eventually(objects_gone, timeout=60, what="both objects of the offloaded ledger deleted")
    assert w.metric("ledger_deletion_deleted_total", ledger_type="OFFLOAD_LEDGER", result="deleted") == 2
    for key in keys_of(ctxs[keeper], keeper):
        assert exists(s3, stack.s3_bucket, key)


async def test_bookkeeper_copy_of_an_offloaded_ledger_is_reclaimed_once_the_broker_marked_it_deleted(
    stack: Stack, unique: str, admin: PulsarAdmin, bookie: BookieClient, s3, make_worker: WorkerFactory
) -> None:
    """The broker deletes the BookKeeper copy of an offloaded ledger in two steps: it marks the copy
    ``bookkeeperDeleted`` in the topic's metadata once the topic's own offload deletion lag passed (its
    namespace's ``offloadDeletionLagMs``, else the broker's 4 h), then deletes it; a broker that dies between
    them leaves a copy nothing reads. Until the mark, the copy may still be read: here the namespace's lag is
    48 h and the offload is dated 5 h ago, past the broker's default lag (a worker with a lag of its own
    deleted this copy). The worker keeps it; once the broker's mark is there, it reclaims it while the topic
    still lists the ledger; the offloaded copy is never touched, and the topic reads back every message (from
    tiered storage)."""
    import time

    ns = f"public/offbk-{unique}"
    await admin.ensure_namespace(ns)
    await admin.set_retention(ns, -1, -1)
    # The namespace's own offload policies, the broker's but for a 48 h lag (a lag alone, without the
    # driver's settings, leaves the namespace without an offloader on 4.0.8).
    broker = await admin.broker_runtime_config()
    policies = {
        "offloadersDirectory": broker["offloadersDirectory"],
        "managedLedgerOffloadDriver": "aws-s3",
        "s3ManagedLedgerOffloadBucket": stack.s3_bucket,
        "s3ManagedLedgerOffloadRegion": "us-east-1",
        "s3ManagedLedgerOffloadServiceEndpoint": stack.s3_endpoint,
        "managedLedgerOffloadDeletionLagInMillis": 48 * 3_600_000,
    }
    await admin.set_namespace_policy(ns, "offloadPolicies", policies)
    topic = f"persistent://{ns}/offbk-{unique}"
    t = TopicName.parse(topic)
    produce(stack.service_url, topic, 16)
    offloaded = await offload_topic(admin, t)
    assert len(offloaded) >= 2
    ctxs = await offload_contexts(stack, t)
    for lid in offloaded:
        assert await bookie.get_metadata(lid) is not None, "the broker deleted the copy itself: no leak to test"
    await edit_offload(admin, stack.zookeeper_hosts, t, offloaded, timestamp_ms=int(time.time() * 1000) - 5 * 3_600_000)

    # Offloaded long ago, within its namespace's lag, not marked by the broker: in use, until attempts run out.
    strict = make_worker(f"offbk-strict-{unique}", worker={"max_attempts": 2, "in_use_retry_s": 0.5})
    strict.send(PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, offloaded[0]))

    async def parked() -> bool:
        return strict.metric("ledger_deletion_dlq_total", reason="in_use") == 1

    await eventually(parked, timeout=60, what="the copy judged in use until the broker marks it deleted")
    assert await bookie.get_metadata(offloaded[0]) is not None
    strict.stop()

    # The broker's first step, without its second (a crash in between).
    await edit_offload(admin, stack.zookeeper_hosts, t, offloaded, bookkeeper_deleted=True)
    w = make_worker(f"offbk-{unique}")
    for lid in offloaded:
        w.send(PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, lid))

    async def reclaimed() -> bool:
        return all([await bookie.get_metadata(lid) is None for lid in offloaded])

    await eventually(reclaimed, timeout=90, what="every BookKeeper copy the broker marked deleted reclaimed")
    assert w.metric("ledger_deletion_deleted_total", ledger_type="LEDGER", route="owner", result="deleted") == len(
        offloaded
    )
    stats = await admin.internal_stats(t)
    assert set(offloaded) <= {int(ld["ledgerId"]) for ld in stats["ledgers"] if ld.get("offloaded")}
    for lid in offloaded:
        for key in keys_of(ctxs[lid], lid):
            assert exists(s3, stack.s3_bucket, key), f"offloaded object {key} was touched"
    await admin.unload(t)  # readers opened afresh must find every entry in tiered storage
    assert count_from_earliest(stack.service_url, topic) == 16
