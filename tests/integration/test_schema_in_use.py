"""Scanner and worker agree on a deleted topic's schema ledgers (one rule: ``worker.core.schema_in_use``).

What Pulsar 4.0.8 does, observed on the local stack: deleting a topic deletes its schema storage (the
registry's locator ``/schemas/<schemaId>`` and its ledgers); a schema can be registered for a name with no
topic (the admin API accepts it, the topic stays absent); deleting a schema without ``force`` writes a
tombstone version: ``GET .../schema`` then answers 404 ``Schema not found`` while the locator still lists
every version's ledger.

The scanner (and the nightly audit, which runs the scanner's code) must not queue what the worker would
hold (its verdicts: orphan = the worker would delete, in use = the worker holds it), and the worker must
not delete what the registry still references.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import pytest

from testkit.harness import create_ledgers
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import cli, fresh_namespace, settings_of, topic_with_schema, worker_config
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.core.decision import Outcome
from worker.daemon.decider import open_decider
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.nightly.audit import judge_ledgers

pytestmark = pytest.mark.integration


def delete_schema(stack: Stack, topic: TopicName) -> None:
    """``DELETE .../schema`` without ``force``: a tombstone version, the locator keeps every ledger."""
    req = urllib.request.Request(
        f"{stack.admin_url}/admin/v2/schemas/{topic.tenant}/{topic.namespace}/{topic.local_name}/schema",
        method="DELETE",
    )
    urllib.request.urlopen(req, timeout=30).close()


def schema_metadata(topic: TopicName) -> dict[str, str]:
    """Custom metadata exactly as Pulsar writes it on a schema ledger of ``topic``."""
    return {"application": "pulsar", "component": "schema", "pulsar/schemaId": topic.schema_name}


async def test_scanner_and_worker_agree_on_a_deleted_topics_schema_ledgers(
    stack: Stack, unique: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    ns = await fresh_namespace(admin, f"ldw-schema-{unique}")
    names = {k: TopicName.parse(f"persistent://{ns}/{k}-{unique}") for k in ("kept", "tombstoned", "plain")}
    for t in names.values():
        topic_with_schema(stack.service_url, t)
        assert await admin.delete_topic(t), f"{t} was not deleted"
    zk = Stores(f"zk:{stack.zookeeper_hosts}")
    await zk.start()
    try:
        # Deleting a topic deleted its schema storage.
        assert [await zk.pulsar.schema_ledgers(t.schema_name) for t in names.values()] == [None, None, None]
        # "kept": the topic is gone, its schema registered again; plus a schema ledger of that name the
        # registry does not list (a version Pulsar failed to delete looks exactly like this).
        await admin.upload_schema(names["kept"], "STRING", "")
        # "tombstoned": the topic is gone, a schema registered, then deleted (no force).
        await admin.upload_schema(names["tombstoned"], "STRING", "")
        delete_schema(stack, names["tombstoned"])
        assert await admin.schema_info(names["tombstoned"]) is None  # the admin API: "Schema not found"
        # "plain": the topic and its schema are gone; a schema ledger of it is left.
        [stray_kept, stray_plain] = [create_ledgers(stack, 1, schema_metadata(names[k]))[0] for k in ("kept", "plain")]
        registry = {k: await zk.pulsar.schema_ledgers(t.schema_name) for k, t in names.items()}
    finally:
        await zk.close()
    assert registry["plain"] is None
    assert registry["kept"] and stray_kept not in registry["kept"]
    assert registry["tombstoned"] and len(registry["tombstoned"]) == 2  # the version and its tombstone

    h = worker_config(make_worker, f"schema-{unique}")
    await asyncio.sleep(max(0.0, settings_of(h).worker.min_ledger_age_s + 0.5))
    r = cli(h.config_path, "scan", "--dry-run", "--json", "--full", "-n", ns, "--min-age", "0s")
    assert r.returncode == 0, r.stderr[-3000:]
    report: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    scanned = {
        d["ledger_id"]: d
        for d in report["decisions"] + report["orphans"]
        if d.get("component") == LedgerComponent.SCHEMA_STORAGE.value
    }
    expected = {stray_kept: "orphan", stray_plain: "orphan"}
    expected |= {lid: "in_use" for k in ("kept", "tombstoned") for lid in registry[k] or ()}
    assert {lid: scanned.get(lid, {}).get("verdict") for lid in expected} == expected

    # The nightly audit judges them with the scanner's code (one partition of it, without Spark).
    zk = Stores(f"zk:{stack.zookeeper_hosts}")
    await zk.start()
    try:
        rows = []
        for lid in scanned:
            got_md = await zk.bookkeeper.read_ledger_metadata(lid)
            assert got_md is not None
            rows.append((lid, got_md[0], int(got_md[1].ctime), None))
    finally:
        await zk.close()
    audited = await judge_ledgers(settings_of(h), rows, min_age_s=0, namespaces=[ns])
    assert {d["ledger_id"]: d["verdict"] for d in audited} == {lid: d["verdict"] for lid, d in scanned.items()}

    # The worker, on the very messages the scanner would queue (and on those it holds).
    worker_verdict = {"orphan": Outcome.WOULD_DELETE, "in_use": Outcome.IN_USE}
    async with open_decider(settings_of(h), dry_run=True) as decider:
        got = {}
        for lid, d in scanned.items():
            info = PendingDeleteLedgerInfo(
                d["topic"], LedgerComponent.SCHEMA_STORAGE, LedgerType.LEDGER, lid, schema_id=d["schema_id"]
            )
            got[lid] = (await decider.decide_info(info)).outcome
    assert got == {lid: worker_verdict[d["verdict"]] for lid, d in scanned.items()}, (got, scanned)
