"""The bytes a deletion frees, end to end on the real stack: Pulsar rolls real ledgers (and offloads them
with its own offloader to the S3 server), the topic forgets them, the worker deletes them, and
``ledger_deletion_freed_bytes_total`` grows by exactly what was stored, read independently before the
delete: the bookie's own metadata JSON (``length``), the broker's ``internalStats`` (each ledger's
``size``) and S3's HEAD (``Content-Length``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from testkit.harness import ml_info as ml
from testkit.orphans import delete_topic_metadata_keep_ledgers, drop_ledgers_from_metadata
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import bookie_length
from tests.integration.offload_helpers import keys_of, offload_contexts, offload_msg, offload_topic, settings
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.core.decision import Outcome
from worker.daemon.decider import open_decider
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration

COUNTER = "ledger_deletion_freed_bytes_total"


async def broker_sizes(admin: PulsarAdmin, t: TopicName) -> dict[int, int]:
    """Each listed ledger's ``size`` as the owner broker records it (internalStats)."""
    stats = await admin.internal_stats(t)
    return {int(ld["ledgerId"]): int(ld.get("size") or 0) for ld in stats["ledgers"]}


async def test_owner_route_counts_each_deleted_ledgers_metadata_length(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    topic = f"persistent://{test_namespace}/bytes-{unique}"
    t = TopicName.parse(topic)
    produce(stack.service_url, topic, 16, payload=b"y" * 3000)  # ledgers of 5 entries: ~15 KB each
    ids = ml_ledger_ids(await admin.internal_stats(t))
    victims = ids[:2]
    sizes = await broker_sizes(admin, t)
    lengths = {lid: bookie_length(stack, lid) for lid in victims}
    assert all(n > 15_000 for n in lengths.values()), lengths
    assert lengths == {lid: sizes[lid] for lid in victims}, "the broker and the bookie disagree on the length"
    await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, victims)

    w = make_worker(f"bytes-{unique}")
    for lid in victims:
        w.send(ml(topic, lid))
    w.send(ml(topic, victims[0]))  # a duplicate: already gone, frees nothing more

    async def settled() -> bool:
        # Acks alone do not say it: a too-young ledger's message is acked once its retry copy is durable.
        return w.metric("ledger_deletion_deleted_total") >= 3

    await eventually(settled, timeout=60, what="both ledgers deleted and the duplicate acked")
    assert all([await bookie.get_metadata(lid) is None for lid in victims])
    assert w.metric("ledger_deletion_deleted_total", result="deleted") == 2
    assert w.metric("ledger_deletion_deleted_total", result="already_gone") == 1
    assert w.metric(COUNTER, ledger_type="LEDGER", route="owner") == sum(lengths.values())
    assert w.metric(COUNTER) == sum(lengths.values())


async def test_direct_route_through_zookeeper_counts_the_serialized_metadata_length(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    """``bookkeeper.delete_via: zookeeper`` reads the metadata znode (BookKeeper's protobuf record) instead
    of the bookie's JSON: the same length."""
    topic = f"persistent://{test_namespace}/bytesdead-{unique}"
    t = TopicName.parse(topic)
    produce(stack.service_url, topic, 11, payload=b"z" * 2000)
    ids = ml_ledger_ids(await admin.internal_stats(t))
    sizes = await broker_sizes(admin, t)
    closed = [lid for lid in ids if lid in sizes and lid != ids[-1]]  # the current ledger is still open
    lengths = {lid: bookie_length(stack, lid) for lid in closed}
    assert lengths == {lid: sizes[lid] for lid in closed}
    await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, topic)

    w = make_worker(f"bytesdead-{unique}", bookkeeper={"delete_via": "zookeeper"})
    for lid in closed:
        w.send(ml(topic, lid))

    async def gone() -> bool:
        return all([await bookie.get_metadata(lid) is None for lid in closed])

    await eventually(gone, timeout=60, what="the dead topic's closed ledgers deleted")

    async def counted() -> bool:
        return w.metric("ledger_deletion_deleted_total") >= len(closed)

    await eventually(counted, timeout=30, what="every deletion settled")
    assert w.metric("ledger_deletion_deleted_total", route="direct", result="deleted") == len(closed)
    assert w.metric(COUNTER, ledger_type="LEDGER", route="direct") == sum(lengths.values())


async def test_offloaded_copy_counts_its_objects_sizes(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, s3: Any, make_worker: WorkerFactory
) -> None:
    topic = f"persistent://{test_namespace}/bytesoff-{unique}"
    t = TopicName.parse(topic)
    produce(stack.service_url, topic, 16, payload=b"o" * 1500)
    offloaded = await offload_topic(admin, t)
    assert offloaded
    ctxs = await offload_contexts(stack, t)
    victim = offloaded[0]
    ctx = ctxs[victim]
    sizes = {k: int(s3.head_object(Bucket=stack.s3_bucket, Key=k)["ContentLength"]) for k in keys_of(ctx, victim)}
    assert len(sizes) == 2 and all(n > 0 for n in sizes.values()), sizes
    # Phase 1 for the offloaded ledger: its topic forgets it; its offloaded copy is garbage.
    await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, topic, [victim])

    w = make_worker(f"bytesoff-{unique}")
    w.send(offload_msg(topic, victim, ctx))

    async def deleted() -> bool:
        return w.metric("ledger_deletion_deleted_total", ledger_type="OFFLOAD_LEDGER", result="deleted") == 1

    await eventually(deleted, timeout=60, what="the offloaded copy deleted")
    assert w.metric(COUNTER, ledger_type="OFFLOAD_LEDGER", route="owner") == sum(sizes.values())
    assert w.metric(COUNTER, ledger_type="LEDGER") == 0


async def test_filesystem_offloaded_copy_counts_the_files_under_its_directory(
    stack: Stack, test_namespace: str, unique: str, tmp_path: Path
) -> None:
    """The filesystem offloader's copy is a directory (Hadoop's MapFile: ``data`` and ``index``); the local
    stack's broker offloads to S3 only, so the copy is laid out here, for a topic that does not exist
    (direct route), and decided by the worker's own decider."""
    base = tmp_path / "offload"
    topic = f"persistent://{test_namespace}/bytesfs-{unique}"
    ctx = OffloadContext.from_uuid(uuid.uuid4(), "filesystem", {})
    copy = base / TopicName.parse(topic).managed_ledger_name / f"7-{ctx.uuid}"
    copy.mkdir(parents=True)
    (copy / "data").write_bytes(b"d" * 12_345)
    (copy / "index").write_bytes(b"i" * 678)
    info = PendingDeleteLedgerInfo(
        topic, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, 7, offload_context=ctx
    )
    async with open_decider(settings(stack, filesystem_base_path=str(base))) as decider:
        res = await decider.decide_info(info)
        assert res.outcome is Outcome.DELETED and res.freed_bytes == 12_345 + 678, res
        assert not copy.exists()
        again = await decider.decide_info(info)
        assert again.outcome is Outcome.ALREADY_GONE and again.freed_bytes is None, again
