"""Pulsar 5.0's scalable topics (PIP-460) on the 5.0 stack: a segment is a managed ledger of its own
(``tenant/ns/segment/<topic>/<hash start>-<hash end>-<id>``), and its ledgers are found live, orphaned and
deleted like any other topic's. Skipped on a 4.x stack, which has no scalable topics.

The topic is made through the admin API (``PUT /admin/v2/scalable/...``) and written through the V5 client
(tests/integration/java/ProduceScalable.java); the orphans are real BookKeeper ledgers carrying a segment's
managed-ledger name, as Pulsar writes it on the segment's own ledgers."""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

from testkit.harness import create_ledgers
from testkit.java_programs import java_command
from testkit.stack import broker_version
from testkit.topics import eventually
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import cli, fresh_namespace, worker_config
from worker.backends.bookie_http import BookieClient
from worker.backends.stores import Stores
from worker.broker.admin import PulsarAdmin
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def scalable_stack(stack: Stack) -> Stack:
    version = broker_version(stack)
    if int(version.split(".")[0]) < 5:
        pytest.skip(f"scalable topics need Pulsar 5.0 (this stack runs {version}: make test-pulsar5)")
    return stack


def create_scalable_topic(stack: Stack, ns: str, name: str, segments: int) -> list[TopicName]:
    """The scalable topic ``topic://<ns>/<name>`` with ``segments`` initial segments: their names."""
    base = f"{stack.admin_url}/admin/v2/scalable/{ns}/{name}"
    put = urllib.request.Request(
        f"{base}?numInitialSegments={segments}", method="PUT", data=b"{}", headers={"Content-Type": "application/json"}
    )
    urllib.request.urlopen(put, timeout=30).close()
    with urllib.request.urlopen(base, timeout=30) as r:
        layout = json.load(r)
    names = (
        f"segment://{ns}/{name}/{s['hashRange']['start']:04x}-{s['hashRange']['end']:04x}-{s['segmentId']}"
        for s in layout["segments"].values()
    )
    return [TopicName.parse(n) for n in sorted(names)]


def produce_scalable(stack: Stack, topic: str, count: int) -> None:
    r = subprocess.run(
        java_command("ProduceScalable", stack.service_url, topic, str(count)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"SENT={count}" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


def segment_orphans(stack: Stack, ml_name: str, count: int) -> list[int]:
    return create_ledgers(
        stack, count, {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": ml_name}
    )


async def segment_ledgers(stack: Stack, segment: TopicName) -> set[int]:
    """The ledgers the segment's managed-ledger znode lists, with its cursors' ledgers."""
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        md = await zk.pulsar.stored_topic(segment)
    assert md is not None, f"{segment} has no managed ledger"
    return set(md.ledger_ids) | {c.cursors_ledger_id for c in md.cursors.values() if c.cursors_ledger_id >= 0}


async def test_segment_ledgers_are_found_live_orphaned_and_deleted(
    scalable_stack: Stack, unique: str, admin: PulsarAdmin, bookie: BookieClient, make_worker: WorkerFactory
) -> None:
    stack = scalable_stack
    ns = await fresh_namespace(admin, f"ldw-segments-{unique}")
    name = f"scalable-{unique}"
    segments = create_scalable_topic(stack, ns, name, 2)
    assert [s.segment for s in segments] == ["0000-7fff-0", "8000-ffff-1"]
    produce_scalable(stack, f"topic://{ns}/{name}", 40)
    live = {s: await segment_ledgers(stack, s) for s in segments}
    for s, ids in live.items():
        # 5 entries a ledger on this stack: the keys spread 40 messages over both segments, several ledgers each.
        assert len(ids) >= 2, (s, ids)
        for lid in ids:
            md = await bookie.get_metadata(lid)
            assert md is not None and md.custom_metadata["pulsar/managed-ledger"] == s.managed_ledger_name
    # Orphans: ledgers of a live segment that its managed ledger does not list, and of a segment its scalable
    # topic never had (no managed ledger, not in the layout: gone).
    stray = segment_orphans(stack, segments[0].managed_ledger_name, 2)
    gone_segment = TopicName.parse(f"segment://{ns}/{name}/0000-ffff-9")
    of_gone = segment_orphans(stack, gone_segment.managed_ledger_name, 2)
    h = worker_config(make_worker, f"segments-{unique}")

    r = cli(h.config_path, "scan", "--dry-run", "--json", "--full", "--namespace", ns, "--min-age", "0s")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    mine = {d["ledger_id"]: d for d in report["decisions"]}
    for s, ids in live.items():
        for lid in ids:
            assert (mine[lid]["verdict"], mine[lid]["topic"]) == ("in_use", str(s)), mine[lid]
    found = {d["ledger_id"]: d for d in report["orphans"]}
    assert set(found) == set(stray) | set(of_gone), found
    assert {found[lid]["why"] for lid in stray} == {"not in its topic's ledger list"}
    assert {found[lid]["topic"] for lid in of_gone} == {str(gone_segment)}
    assert {found[lid]["why"] for lid in of_gone} == {"topic gone"}

    # Queued by the scanner, deleted by the worker; the segments keep every ledger they list.
    r = cli(h.config_path, "scan", "--namespace", ns, "--min-age", "0s")
    assert r.returncode == 0, r.stderr[-3000:]
    h.start()
    orphans = set(stray) | set(of_gone)

    async def orphans_deleted() -> bool:
        return all([await bookie.get_metadata(lid) is None for lid in orphans])

    await eventually(orphans_deleted, timeout=180, interval=1, what="the segments' orphans deleted by the worker")
    for s, ids in live.items():
        assert await segment_ledgers(stack, s) == ids
        for lid in ids:
            assert await bookie.get_metadata(lid) is not None, f"live ledger {lid} of {s} was deleted"
    assert h.metric("ledger_deletion_deleted_total") == len(orphans)
    report = json.loads(
        cli(h.config_path, "scan", "--dry-run", "--json", "--namespace", ns, "--min-age", "0s")
        .stdout.strip()
        .splitlines()[-1]
    )
    assert report["orphans"] == []
