"""Version-1 topic names (``persistent://tenant/cluster/namespace/topic``) end to end on the real stack: a v1
namespace (Pulsar 4.0.8 still creates and serves them; the broker's own health check lives in one), its
orphans found by ``scan --dry-run``, queued by ``scan``, and deleted by the worker, which verifies them
against the managed-ledger name Pulsar writes for a v1 topic (``tenant/cluster/ns/persistent/...``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from testkit.harness import create_ledgers, pulsar_ml_metadata
from testkit.orphans import delete_topic_metadata_keep_ledgers, drop_ledgers_from_metadata
from testkit.stack import broker_version
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import cli, count_messages, last_json, live_ids, worker_config
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


def v1_namespace(stack: Stack, name: str) -> str:
    """A v1 namespace (tenant/cluster/namespace) made through the v1 admin API, with infinite retention."""
    with urllib.request.urlopen(f"{stack.admin_url}/admin/v2/clusters", timeout=30) as r:
        cluster = json.loads(r.read())[0]
    ns = f"public/{cluster}/{name}"
    for method, path, body in [
        ("PUT", f"/admin/namespaces/{ns}", None),
        ("POST", f"/admin/namespaces/{ns}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}),
    ]:
        req = urllib.request.Request(
            f"{stack.admin_url}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(req, timeout=30).close()
        except urllib.error.HTTPError as e:
            # Pulsar 5.0 serves no version-1 admin API (its /admin/namespaces resources answer Jetty's 404): no v1
            # namespace can be made there, so none exists on a cluster that started on 5.0.
            if e.code == 404 and method == "PUT" and broker_version(stack).startswith("5."):
                pytest.skip(f"Pulsar {broker_version(stack)} serves no version-1 admin API: no v1 namespace to test")
            raise
    return ns


async def test_v1_orphans_are_found_queued_and_deleted(
    stack: Stack, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    ns = v1_namespace(stack, f"ldw-v1-{unique}")
    live = TopicName.parse(f"persistent://{ns}/live-{unique}")
    assert live.cluster is not None
    produce(stack.service_url, str(live), 20)
    dropped = set(
        await drop_ledgers_from_metadata(
            admin, stack.zookeeper_hosts, live, ml_ledger_ids(await admin.internal_stats(live))[:2]
        )
    )
    gone = TopicName.parse(f"persistent://{ns}/gone-{unique}")
    produce(stack.service_url, str(gone), 8)
    gone_ids = set(await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, gone))
    ghost = create_ledgers(stack, 2, pulsar_ml_metadata(f"persistent://{ns}/ghost-{unique}"))
    planted = dropped | gone_ids | set(ghost)
    readable = count_messages(stack.service_url, str(live))
    h = worker_config(make_worker, f"v1-{unique}")

    r = cli(h.config_path, "scan", "--dry-run", "--json", "--full", "-n", ns, "--min-age", "0s")
    assert r.returncode == 0, r.stderr[-3000:]
    report = last_json(r.stdout)
    found = {d["ledger_id"]: d for d in report["orphans"]}
    assert planted <= set(found), sorted(planted - set(found))
    assert {found[lid]["topic"] for lid in dropped} == {str(live)}
    assert all(d["why"] == "topic gone" for lid, d in found.items() if lid in gone_ids | set(ghost))
    assert report["counts"]["skipped"] == 0, report["decisions"]
    live_now = await live_ids(admin, live)
    assert not live_now & set(found)
    assert {d["verdict"] for d in report["decisions"] if d["ledger_id"] in live_now} <= {"in_use"}

    r = cli(h.config_path, "scan", "-n", ns, "--min-age", "0s", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    sent = {d["ledger_id"] for d in last_json(r.stdout)["sent"]}
    assert planted <= sent
    h.start()

    async def all_deleted() -> bool:
        return all([await bookie.get_metadata(lid) is None for lid in sent])

    await eventually(all_deleted, timeout=180, interval=1, what="every v1 orphan deleted by the worker")
    for lid in await live_ids(admin, live):
        assert await bookie.get_metadata(lid) is not None, f"live ledger {lid} of {live} was deleted"
    assert count_messages(stack.service_url, str(live)) == readable
    assert h.metric("ledger_deletion_rejected_total") == 0
