"""``purge-topic`` against the real stack: every ledger queued first, the topic deleted only then."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testkit.harness import WorkerHarness
from testkit.orphans import quiesce
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import cli, live_topic_with_schema_and_cursor, read_pending, settings_of, worker_config
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin, TopicNotFound
from worker.core.verification import bookkeeper_rejection
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


Key = tuple[str, str, int]  # (ledger type, component, ledger id)


def key(i: PendingDeleteLedgerInfo) -> Key:
    return (i.ledger_type.value, i.ledger_component.value, i.ledger_id)


async def owned_ledgers(admin: PulsarAdmin, topic: TopicName) -> set[Key]:
    """What the broker says ``topic`` (one partition or a plain topic) owns, read independently of purge."""
    st = await admin.internal_stats(topic)
    out: set[Key] = {("LEDGER", "MANAGED_LEDGER", lid) for lid in ml_ledger_ids(st)}
    out |= {
        ("LEDGER", "MANAGED_CURSOR", int(c["cursorLedger"])) for c in st["cursors"].values() if c["cursorLedger"] >= 0
    }
    out |= {("LEDGER", "SCHEMA_STORAGE", int(s["ledgerId"])) for s in st["schemaLedgers"]}
    return out


def purge(config: Path, topic: str, *extra: str) -> tuple[dict[str, Any], str]:
    r = cli(config, "purge-topic", topic, "--json", *extra)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stdout


async def topic_gone(admin: PulsarAdmin, topic: TopicName) -> bool:
    try:
        await admin.internal_stats(topic)
        return False
    except TopicNotFound:
        return await admin.partitions(topic) == 0


async def test_interrupted_purge_is_finished_by_a_rerun_and_the_worker_cleans_up(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/purge-{unique}")
    live_topic_with_schema_and_cursor(stack.service_url, str(topic), f"sub-{unique}")
    await quiesce(admin, topic)
    owned = await owned_ledgers(admin, topic)
    assert {k[1] for k in owned} == {"MANAGED_LEDGER", "MANAGED_CURSOR", "SCHEMA_STORAGE"}, owned
    h = worker_config(make_worker, f"purge-{unique}")

    # First run stops after the sends, as a crash between the sends and the delete would.
    first, out = purge(h.config_path, str(topic), "--no-delete-topic")
    assert first["existed"] and not first["topic_deleted"] and first["failed"] == 0
    assert "ledgers to queue" in out
    assert not await topic_gone(admin, topic)
    queued = {key(i) for i in read_pending(stack, settings_of(h))}
    assert owned <= queued, sorted(owned - queued)

    # The re-run re-collects, re-sends (harmless: the worker is idempotent) and deletes the topic.
    second, out = purge(h.config_path, str(topic))
    assert second["topic_deleted"] and second["queued"] >= len(owned)
    assert await topic_gone(admin, topic)
    assert f"purged {topic}" in out
    messages = read_pending(stack, settings_of(h))
    assert owned <= {key(i) for i in messages}
    schema = [i for i in messages if i.ledger_component is LedgerComponent.SCHEMA_STORAGE]
    assert {i.schema_id for i in schema} == {topic.schema_name}
    assert {i.cursor_name for i in messages if i.ledger_component is LedgerComponent.MANAGED_CURSOR} == {
        f"sub-{unique}"
    }

    # A third run finds nothing: everything was queued before the delete.
    third, _ = purge(h.config_path, str(topic))
    assert not third["existed"] and third["queued"] == 0

    pytest.importorskip("worker.daemon.daemon", reason="needs the phase-2 daemon")
    h.start()

    async def all_gone() -> bool:
        return all([await bookie.get_metadata(lid) is None for _, _, lid in owned])

    await eventually(all_gone, timeout=120, interval=1, what="every ledger of the purged topic gone")

    async def drained() -> bool:
        r = cli(h.config_path, "inflight", "--json", timeout=60)
        return bool(json.loads(r.stdout)["total"] == 0)

    await eventually(drained, timeout=120, interval=1, what="the worker to settle every purge message")


async def test_purge_of_a_partitioned_topic_queues_every_partition_then_deletes_it(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/ppurge-{unique}")
    await admin.create_partitioned_topic(topic, 2)
    live_topic_with_schema_and_cursor(stack.service_url, str(topic), f"sub-{unique}")
    owned: set[Key] = set()
    for i in range(2):
        await quiesce(admin, topic.partition(i))
        owned |= await owned_ledgers(admin, topic.partition(i))
    h = worker_config(make_worker, f"ppurge-{unique}")

    res, out = purge(h.config_path, str(topic))
    assert "partitioned (2 partitions)" in out
    assert res["topic_deleted"]
    assert await topic_gone(admin, topic)
    messages = read_pending(stack, settings_of(h))
    assert owned <= {key(i) for i in messages}
    by_component = {i.ledger_component: i for i in messages}
    # Data and cursor ledgers are announced under their partition, the shared schema under the base name.
    assert TopicName.parse(by_component[LedgerComponent.MANAGED_LEDGER].topic_name).partition_index is not None
    assert by_component[LedgerComponent.SCHEMA_STORAGE].topic_name == str(topic)


def test_purge_refuses_the_workers_own_topics_and_bad_names(tmp_path: Path, stack: Stack, unique: str) -> None:
    h = WorkerHarness(stack, tmp_path, f"purge-own-{unique}")
    r = cli(h.config_path, "purge-topic", h.topics["pending"])
    assert r.returncode == 1 and "worker's own topics" in r.stderr
    r = cli(h.config_path, "purge-topic", "persistent://a/../b")
    assert r.returncode == 2 and "relative segment" in r.stderr


def s3_keys(s3: Any, bucket: str, prefix: str) -> set[str]:
    got = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {o["Key"] for o in got.get("Contents", [])}


async def offload_or_skip(admin: PulsarAdmin, topic: TopicName) -> None:
    current = max(ml_ledger_ids(await admin.internal_stats(topic)))
    await admin.trigger_offload(topic, current, 0)

    async def finished() -> dict[str, Any] | None:
        st = await admin.offload_status(topic)
        return st if st.get("status") in ("SUCCESS", "ERROR") else None

    st = await eventually(finished, timeout=180, what="the offload")
    if st["status"] == "ERROR" and "NullLedgerOffloader" in str(st.get("lastError")):
        pytest.skip("the broker has no offloader configured (deploy/local/OFFLOAD.md)")
    assert st["status"] == "SUCCESS", st


async def test_purge_of_an_offloaded_topic_removes_its_objects_too(
    stack: Stack,
    test_namespace: str,
    unique: str,
    admin: PulsarAdmin,
    bookie: BookieClient,
    s3: Any,
    make_worker: WorkerFactory,
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/opurge-{unique}")
    produce(stack.service_url, str(topic), 16)
    await offload_or_skip(admin, topic)
    info = await admin.internal_info(topic)
    uuids = {int(ld["ledgerId"]): ld["offloadedContextUuid"] for ld in info["ledgers"] if ld.get("isOffloaded")}
    assert len(uuids) >= 2
    for lid, u in uuids.items():
        assert s3_keys(s3, stack.s3_bucket, f"{u}-ledger-{lid}") == {f"{u}-ledger-{lid}", f"{u}-ledger-{lid}-index"}
    owned = await owned_ledgers(admin, topic)
    h = worker_config(make_worker, f"opurge-{unique}")

    res, _ = purge(h.config_path, str(topic))
    assert res["topic_deleted"] and res["counts"]["offloaded"] == len(uuids)
    messages = read_pending(stack, settings_of(h))
    offload_msgs = {i.ledger_id: i for i in messages if i.ledger_type is LedgerType.OFFLOAD_LEDGER}
    assert set(offload_msgs) == set(uuids)
    for lid, u in uuids.items():
        ctx = offload_msgs[lid].offload_context
        assert ctx is not None and str(ctx.uuid) == u
        assert ctx.driver_name == "aws-s3" and ctx.driver_metadata["bucket"] == stack.s3_bucket
    # The BookKeeper copies (kept for managedLedgerOffloadDeletionLagMs) are announced as well.
    assert owned <= {key(i) for i in messages}

    pytest.importorskip("worker.daemon.daemon", reason="needs the phase-2 daemon")
    h.start()

    async def all_gone() -> bool:
        objects = [s3_keys(s3, stack.s3_bucket, f"{u}-ledger-{lid}") for lid, u in uuids.items()]
        ledgers = [await bookie.get_metadata(lid) for _, _, lid in owned]
        return not any(objects) and all(md is None for md in ledgers)

    await eventually(all_gone, timeout=180, interval=1, what="every object and ledger of the purged topic gone")


async def test_schema_ids_of_a_topic_name_that_needs_encoding(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    # ':', ' ', '%', '+' and non-ASCII all reach Pulsar's schema id URL-encoded (TopicName.getSchemaName).
    topic = TopicName.parse(f"persistent://{test_namespace}/enc:a b%c+é-{unique}")
    live_topic_with_schema_and_cursor(stack.service_url, str(topic), f"sub-{unique}")
    await quiesce(admin, topic)
    schema_ledgers = {int(s["ledgerId"]) for s in (await admin.internal_stats(topic))["schemaLedgers"]}
    assert schema_ledgers
    unencoded = f"{topic.tenant}/{topic.namespace}/{topic.local_name}"
    assert topic.schema_name != unencoded
    h = worker_config(make_worker, f"encpurge-{unique}")

    res, _ = purge(h.config_path, str(topic), "--no-delete-topic")
    assert res["counts"]["schema"] == len(schema_ledgers)
    schema_msgs = [
        i for i in read_pending(stack, settings_of(h)) if i.ledger_component is LedgerComponent.SCHEMA_STORAGE
    ]
    assert {i.ledger_id for i in schema_msgs} == schema_ledgers
    for msg in schema_msgs:
        # The verifier, against the ledger's real metadata from the bookie, accepts what purge queued.
        md = await bookie.get_metadata(msg.ledger_id)
        assert md is not None
        assert md.custom_metadata["pulsar/schemaId"] == topic.schema_name
        got = bookkeeper_rejection(msg, md)
        assert got is None, (msg.schema_id, got)

    lid = str(min(schema_ledgers))
    send = ["send", "--topic", str(topic), "--ledger-id", lid, "--component", "SCHEMA_STORAGE"]
    ok = cli(h.config_path, *send, "--schema-id", topic.schema_name)
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = cli(h.config_path, *send, "--schema-id", unencoded)
    assert bad.returncode == 2, bad.stdout
    assert f"--schema-id must be the topic's schema id {topic.schema_name!r}" in bad.stderr
    assert "URL-encoded" in bad.stderr and "Traceback" not in bad.stderr


async def test_delete_topic_says_whether_the_topic_existed(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/del-{unique}")
    await admin.create_topic(topic)
    assert await admin.delete_topic(topic) is True
    assert await topic_gone(admin, topic)
    assert await admin.delete_topic(topic) is False  # 404: nothing was there
    assert await admin.delete_topic(TopicName.parse(f"persistent://public/no-such-ns-{unique}/x")) is False
