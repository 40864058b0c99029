"""Compacted and schema ledgers queued at the source: the broker's compaction service
(``compactionServiceFactoryClassName``) and schema storage (``schemaRegistryStorageClassName``) are the extension's
on this instance (deploy/local/stack.sh sets both with the extension).

- Compaction: a second compaction replaces the first one's compacted ledger. A poller reads the topic's
  ``internalStats`` every 50 ms and notes when the topic stopped naming that ledger (neither the loaded compacted
  ledger nor the ``__compaction`` cursor's ``CompactedTopicLedger`` property); its queue message, signed, was
  published no later. The worker settles it; ``scan --dry-run`` then finds no orphan.
- A compacted topic deleted: Pulsar removes its ``__compaction`` cursor and then deletes the compacted ledger; the
  extension queued that ledger before the cursor's removal (a poller reads its BookKeeper metadata every 50 ms).
- Schemas: a schema of two versions (two ledgers) deleted with ``force`` through the admin API, and a topic with a
  schema deleted (Pulsar deletes its schema with it). A poller reads each schema ledger's BookKeeper metadata and
  the registry's locator every 50 ms: every ledger was queued, signed, before Pulsar deleted it (and before the
  locator went). The worker settles each; ``scan --dry-run`` finds no orphan.
- A compaction that keeps failing (a ledger it must read deleted under it) queues the compacted ledger it would
  replace once, not once per try.
- Topics whose names encode (``a:b``, ``k=v w``, ``été``): their schema ledgers are queued under the topic's name
  as Pulsar writes it, which the ledger's own metadata proves (its ``pulsar/schemaId`` is the encoded schema id).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient

from testkit.harness import WorkerHarness
from testkit.topics import eventually, ml_ledger_ids
from tests.extension.conftest import ExtStack, worker_on_extension_queue
from tests.extension.helpers import (
    SETTLED,
    assert_signed_by_the_broker,
    broker_metric,
    compacted_ledgers_named,
    internal_stats,
    queued_for,
    read_queue,
    rest,
    scan_orphans,
    wait_settled,
)
from tests.integration.helpers import admin_call, compact, produce_keyed, topic_with_schema
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.core.verification import bookkeeper_rejection
from worker.formats.ledger_metadata import LedgerMetadata
from worker.formats.message import LedgerComponent
from worker.formats.metadata_paths import hierarchical_ledger_path
from worker.formats.topic_name import TopicName

AVRO_V2 = json.dumps(
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "name", "type": ["null", "string"], "default": None},
            {"name": "extra", "type": ["null", "string"], "default": None},
        ],
    }
)


class Poller:
    """Calls ``poll`` every 50 ms on a thread of its own until stopped; ``poll`` records what it needs."""

    def __init__(self, poll: Callable[[], None]) -> None:
        self.poll = poll
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # a read racing a write: poll again
                pass
            self._stop.wait(0.05)

    def __enter__(self) -> Poller:
        self.poll()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(5)


async def test_a_compactions_replaced_ledger_is_queued_before_the_topic_stops_naming_it(
    ext_stack: ExtStack, ext_admin: PulsarAdmin, unique: str, tmp_path: Path, ext_harnesses: list[WorkerHarness]
) -> None:
    ns = f"public/ext-compact-{unique}"
    await ext_admin.ensure_namespace(ns)
    t = TopicName.parse(f"persistent://{ns}/keyed")
    produce_keyed(ext_stack.service_url, t, 12)
    await compact(ext_stack, t)
    first = compacted_ledgers_named(internal_stats(ext_stack, t))
    assert len(first) == 1, first
    [old] = first
    produce_keyed(ext_stack.service_url, t, 12)
    forgotten_at: dict[int, float] = {}

    def poll() -> None:
        if old not in forgotten_at and old not in compacted_ledgers_named(internal_stats(ext_stack, t)):
            forgotten_at[old] = time.time() * 1000

    with Poller(poll):
        await compact(ext_stack, t)

        async def replaced() -> bool:
            return old in forgotten_at

        await eventually(replaced, timeout=30, what="the topic naming its new compacted ledger")
    queued = queued_for(ext_stack.service_url, str(t))
    info, published = queued[("LEDGER", old)]
    assert info.ledger_component is LedgerComponent.COMPACTED_LEDGER
    assert published <= forgotten_at[old], f"queued at {published}, the topic stopped naming it at {forgotten_at[old]}"
    assert assert_signed_by_the_broker(ext_stack, str(t)) >= 1
    assert {k for k, (i, _) in queued.items() if i.ledger_component is LedgerComponent.COMPACTED_LEDGER} == {
        ("LEDGER", old)
    }, "a first compaction replaces nothing and queues nothing"

    w = worker_on_extension_queue(ext_stack, tmp_path, "compact")
    ext_harnesses.append(w)
    w.start()
    outcomes = await wait_settled(w, str(t), {("LEDGER", old)})
    print(f"{t}: compacted ledger {old} replaced, settled {outcomes}")
    assert outcomes[("LEDGER", old)] in SETTLED
    assert scan_orphans(ext_stack, tmp_path, ns) == []


async def test_a_deleted_topics_compacted_ledger_is_queued_before_pulsar_deletes_it(
    ext_stack: ExtStack, ext_admin: PulsarAdmin, unique: str, tmp_path: Path, ext_harnesses: list[WorkerHarness]
) -> None:
    ns = f"public/ext-compact-del-{unique}"
    await ext_admin.ensure_namespace(ns)
    t = TopicName.parse(f"persistent://{ns}/keyed")
    produce_keyed(ext_stack.service_url, t, 12)
    await compact(ext_stack, t)
    [compacted] = compacted_ledgers_named(internal_stats(ext_stack, t))
    zk = KazooClient(hosts=ext_stack.zookeeper_hosts)
    zk.start(timeout=15)
    gone_at: dict[int, float] = {}

    def poll() -> None:
        if compacted not in gone_at and zk.exists(hierarchical_ledger_path(compacted)) is None:
            gone_at[compacted] = time.time() * 1000

    try:
        with Poller(poll):
            await ext_admin.delete_topic(t)

            async def deleted() -> bool:
                return compacted in gone_at

            await eventually(deleted, timeout=60, what="Pulsar deleting the compacted ledger with its topic")
    finally:
        zk.stop()
        zk.close()
    queued = queued_for(ext_stack.service_url, str(t))
    info, published = queued[("LEDGER", compacted)]
    assert info.ledger_component is LedgerComponent.COMPACTED_LEDGER
    assert published <= gone_at[compacted], f"queued at {published}, deleted at {gone_at[compacted]}"
    w = worker_on_extension_queue(ext_stack, tmp_path, "compact-del")
    ext_harnesses.append(w)
    w.start()
    outcomes = await wait_settled(w, str(t), set(queued))
    print(f"{t}: deleted with compacted ledger {compacted}, settled {outcomes}")
    assert set(outcomes.values()) <= SETTLED
    assert scan_orphans(ext_stack, tmp_path, ns) == []


async def test_schema_ledgers_are_queued_before_pulsar_deletes_them(
    ext_stack: ExtStack, ext_admin: PulsarAdmin, unique: str, tmp_path: Path, ext_harnesses: list[WorkerHarness]
) -> None:
    ns = f"public/ext-schema-{unique}"
    await ext_admin.ensure_namespace(ns)
    forced, with_topic = TopicName.parse(f"persistent://{ns}/forced"), TopicName.parse(f"persistent://{ns}/gone")
    ledgers: dict[TopicName, set[int]] = {}
    for t in (forced, with_topic):
        topic_with_schema(ext_stack.service_url, t)
        await ext_admin.upload_schema(t, "AVRO", AVRO_V2)  # a second version: a second ledger
        ledgers[t] = {int(s["ledgerId"]) for s in (await ext_admin.internal_stats(t))["schemaLedgers"]}
        assert len(ledgers[t]) == 2, ledgers[t]
    zk = KazooClient(hosts=ext_stack.zookeeper_hosts)
    zk.start(timeout=15)
    gone_at: dict[int, float] = {}
    locator_gone_at: dict[str, float] = {}

    def poll() -> None:
        now = time.time() * 1000
        for t, ids in ledgers.items():
            for lid in ids - set(gone_at):
                if zk.exists(hierarchical_ledger_path(lid)) is None:
                    gone_at[lid] = now
            if t.schema_name not in locator_gone_at and zk.exists(f"/schemas/{t.schema_name}") is None:
                locator_gone_at[t.schema_name] = now

    try:
        with Poller(poll):
            rest(
                ext_stack,
                "DELETE",
                f"/admin/v2/schemas/{forced.tenant}/{forced.namespace}/{forced.local_name}/schema?force=true",
            )
            await ext_admin.delete_topic(with_topic)

            async def all_gone() -> bool:
                return len(gone_at) == 4 and len(locator_gone_at) == 2

            await eventually(all_gone, timeout=60, what="the schema ledgers and locators deleted by Pulsar")
    finally:
        zk.stop()
        zk.close()

    w = worker_on_extension_queue(ext_stack, tmp_path, "schema")
    ext_harnesses.append(w)
    w.start()
    for t, ids in ledgers.items():
        queued = queued_for(ext_stack.service_url, str(t))
        for lid in ids:
            info, published = queued[("LEDGER", lid)]
            assert info.ledger_component is LedgerComponent.SCHEMA_STORAGE and info.schema_id == t.schema_name
            assert published <= gone_at[lid], f"schema ledger {lid}: queued at {published}, deleted at {gone_at[lid]}"
            assert published <= locator_gone_at[t.schema_name]
        assert assert_signed_by_the_broker(ext_stack, str(t)) >= 2
        outcomes = await wait_settled(w, str(t), {("LEDGER", lid) for lid in ids})
        print(f"{t}: schema ledgers {sorted(ids)}, settled {outcomes}")
        assert set(outcomes.values()) <= SETTLED
    assert scan_orphans(ext_stack, tmp_path, ns) == []


async def test_a_schema_ledger_of_a_topic_whose_name_encodes_names_the_topic_as_pulsar_does(
    ext_stack: ExtStack,
    ext_admin: PulsarAdmin,
    ext_bookie: BookieClient,
    unique: str,
    tmp_path: Path,
    ext_harnesses: list[WorkerHarness],
) -> None:
    """The schema id carries the topic's local name URL-encoded (``a%3Ab``); the message names the topic as Pulsar
    does (``a:b``), and the ledger's own metadata proves it is that topic's (the worker's identity rule, on the
    metadata BookKeeper held before Pulsar deleted the ledger). Before the fix the message named ``a%3Ab``: the
    worker rejected it as a forgery (``schema_mismatch``)."""
    ns = f"public/ext-schema-names-{unique}"
    await ext_admin.ensure_namespace(ns)
    topics = [TopicName.parse(f"persistent://{ns}/{local}") for local in ("a:b", "k=v w", "été")]
    held: dict[int, LedgerMetadata] = {}
    for t in topics:
        topic_with_schema(ext_stack.service_url, t)
        assert t.schema_name != f"{ns}/{t.local_name}", "the name does not encode: nothing is tested"
        for s in (await ext_admin.internal_stats(t))["schemaLedgers"]:
            md = await ext_bookie.get_metadata(int(s["ledgerId"]))
            assert md is not None and md.custom_metadata.get("pulsar/schemaId") == t.schema_name, md
            held[md.ledger_id] = md
        await ext_admin.delete_topic(t)  # Pulsar deletes its schema with it
    w = worker_on_extension_queue(ext_stack, tmp_path, "schema-names")
    ext_harnesses.append(w)
    w.start()
    for t in topics:
        queued = queued_for(ext_stack.service_url, str(t))
        infos = [info for info, _ in queued.values() if info.ledger_component is LedgerComponent.SCHEMA_STORAGE]
        names = sorted({i.topic_name for i, _ in read_queue(ext_stack.service_url)})
        assert infos, f"no schema ledger queued under {str(t)!r}; the queue names {names}"
        for info in infos:
            assert info.topic_name == str(t) and info.schema_id == t.schema_name, info
            why = bookkeeper_rejection(info, held[info.ledger_id])
            assert why is None, (info, why)
        outcomes = await wait_settled(w, str(t), {("LEDGER", i.ledger_id) for i in infos})
        assert set(outcomes.values()) <= SETTLED, outcomes
    assert w.metric("ledger_deletion_rejected_total", reason="schema_mismatch") == 0
    assert scan_orphans(ext_stack, tmp_path, ns) == []


async def test_a_compaction_that_keeps_failing_queues_its_compacted_ledger_once(
    ext_stack: ExtStack, ext_admin: PulsarAdmin, ext_bookie: BookieClient, unique: str
) -> None:
    """A compaction that fails leaves the topic the compacted ledger it had, and the broker tries it again: that
    ledger is queued by the first try, not by each one (before the fix every try queued another copy, and each
    copy reached the DLQ after its attempts). The failure is real: a closed ledger the compaction must read is
    deleted from BookKeeper under the topic, so every try fails reading it."""
    ns = f"public/ext-compact-once-{unique}"
    await ext_admin.ensure_namespace(ns)
    await ext_admin.set_retention(ns, -1, -1)
    keyed = TopicName.parse(f"persistent://{ns}/keyed")
    produce_keyed(ext_stack.service_url, keyed, 12)
    await compact(ext_stack, keyed)
    [current] = compacted_ledgers_named(internal_stats(ext_stack, keyed))
    compacted_up_to = max(ml_ledger_ids(await ext_admin.internal_stats(keyed)))
    produce_keyed(ext_stack.service_url, keyed, 12)
    *closed, _ = [lid for lid in ml_ledger_ids(await ext_admin.internal_stats(keyed)) if lid > compacted_up_to]
    assert closed, "no closed ledger written after the first compaction"
    await ext_bookie.delete_ledger(closed[0])
    skipped = broker_metric(ext_stack, "ledger_deletion_broker_compacted_requeues_skipped_total")
    for _ in range(2):
        assert await compaction_outcome(ext_stack, keyed) == "ERROR"
    assert compacted_ledgers_named(internal_stats(ext_stack, keyed)) == {current}
    copies = [
        info
        for info, _ in read_queue(ext_stack.service_url)
        if info.topic_name == str(keyed) and info.ledger_id == current
    ]
    assert len(copies) == 1, f"compacted ledger {current} queued {len(copies)} times"
    assert copies[0].ledger_component is LedgerComponent.COMPACTED_LEDGER
    assert broker_metric(ext_stack, "ledger_deletion_broker_compacted_requeues_skipped_total") - skipped == 1


async def compaction_outcome(stack: ExtStack, topic: TopicName) -> str:
    """Start a compaction of ``topic`` and wait for its outcome: ``SUCCESS`` or ``ERROR``."""
    admin_call(stack, "PUT", topic, "compaction")

    async def done() -> str | None:
        status = admin_call(stack, "GET", topic, "compaction")["status"]
        return None if status == "RUNNING" else str(status)

    return str(await eventually(done, timeout=120, interval=1, what="compaction"))
