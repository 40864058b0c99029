"""The audit on Spark local[2]: ledger for ledger what ``scan --dry-run`` decides, and the offload bucket
audit finding real offloaded objects no topic references (topic deleted without its offloaded copies; an
offload attempt the topic does not record), queued as OFFLOAD_LEDGER pending deletions with ``--send``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.harness import WorkerHarness, create_ledgers, free_port, pulsar_ml_metadata
from testkit.orphans import delete_topic_metadata_keep_ledgers
from testkit.topics import produce
from tests.conftest import REPO, Stack
from tests.integration.helpers import bookie_length, fresh_namespace, quiet_logger
from tests.integration.nightly_fixtures import pushed, start_pushgateway
from tests.integration.offload_helpers import offload_topic
from worker.broker.admin import PulsarAdmin
from worker.core.freed_bytes import human_bytes
from worker.formats.message import LedgerType, decode
from worker.formats.topic_name import TopicName

# Real Spark jobs on a shared 2-core machine: minutes each, more under load.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


def _scan(config: Path, namespace: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "worker.cli", "scan", "--dry-run", "--json", "--full", "-n", namespace]
    out = subprocess.run(
        [*cmd, "--min-age", "1s", "--config", str(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _read_all(service_url: str, topic: str) -> list[bytes]:
    import pulsar

    client = pulsar.Client(service_url, logger=quiet_logger())
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(bytes(reader.read_next(timeout_millis=5000).data()))
        return out
    finally:
        client.close()


def _s3(stack: Stack) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=stack.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


async def test_audit_equals_scan_and_finds_orphaned_offloaded_objects(
    stack: Stack,
    unique: str,
    admin: PulsarAdmin,
    tmp_path: Path,
    spark: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A namespace of its own: scan and audit run a minute apart, and the shared test namespace's topics
    # (other tests' cursors rolling, topics reloading) change their ledgers in between.
    ns = await fresh_namespace(admin, f"ldw-audit-{unique}")
    ghost = f"persistent://{ns}/aghost-{unique}"
    orphans = create_ledgers(stack, 3, pulsar_ml_metadata(ghost))
    lengths = {lid: bookie_length(stack, lid) for lid in orphans}
    live = f"persistent://{ns}/alive-{unique}"
    produce(stack.service_url, live, 4)
    # A live offloaded topic, plus a copy of one of its objects under an offload uuid it does not record
    # (what a failed earlier attempt leaves behind).
    kept = f"persistent://{ns}/akept-{unique}"
    produce(stack.service_url, kept, 16)
    kept_ids = await offload_topic(admin, TopicName.parse(kept))
    s3 = _s3(stack)
    real = next(
        o["Key"]
        for o in s3.list_objects_v2(Bucket=stack.s3_bucket).get("Contents", [])
        if o["Key"].endswith(f"-ledger-{kept_ids[0]}")
        and s3.head_object(Bucket=stack.s3_bucket, Key=o["Key"])["Metadata"].get("managedledgername")
        == TopicName.parse(kept).managed_ledger_name
    )
    stale_uuid = str(uuid.uuid4())
    s3.copy_object(
        Bucket=stack.s3_bucket,
        Key=f"{stale_uuid}-ledger-{kept_ids[0]}",
        CopySource={"Bucket": stack.s3_bucket, "Key": real},
    )
    # A topic deleted without its offloaded copies (nor its BookKeeper ledgers).
    doomed = f"persistent://{ns}/adoomed-{unique}"
    produce(stack.service_url, doomed, 16)
    doomed_ids = await offload_topic(admin, TopicName.parse(doomed))
    await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, doomed)
    await asyncio.sleep(1.5)  # past --min-age 1s for every ledger above

    h = WorkerHarness(stack, tmp_path, f"audit-{unique}")
    scan = await asyncio.to_thread(_scan, h.config_path, ns)
    reports = tmp_path / "audit"
    from worker.cli import main

    gw_port = free_port()
    gw = start_pushgateway(gw_port)
    try:
        # In a thread: the command runs its own event loop (phase 1's sender), as it does from a shell.
        rc = await asyncio.to_thread(
            main,
            [
                *("audit", "--config", str(h.config_path), "--send", "-n", ns, "--min-age", "1s"),
                *("--report-dir", str(reports), "--pushgateway", f"127.0.0.1:{gw_port}"),
            ],
        )
        text = pushed(gw_port)
    finally:
        gw.terminate()
        gw.wait(timeout=10)
    assert rc == 0
    printed = capsys.readouterr().out
    ledgers = [r.asDict() for r in spark.read.parquet(str(reports / "audit" / "ledgers")).collect()]
    objects = [r.asDict() for r in spark.read.parquet(str(reports / "audit" / "objects")).collect()]

    # Ledger for ledger, the scanner's verdicts and reasons (scan --full lists orphans apart).
    by_scan = {d["ledger_id"]: (d["verdict"], d["why"]) for d in scan["decisions"] + scan["orphans"]}
    by_audit = {r["ledger_id"]: (r["verdict"], r["why"]) for r in ledgers}
    assert by_audit == by_scan
    for lid in orphans:
        assert by_audit[lid] == ("orphan", "topic gone")
    # The live topic's offloaded ledgers are in use (their BookKeeper copies may already be reclaimed).
    assert {by_audit[i][0] for i in kept_ids if i in by_audit} <= {"in_use"}

    mine = {(r["topic"], r["ledger_id"], r["uuid"]): r for r in objects if r["topic"] in (kept, doomed)}
    gone = [r for (t, _, _), r in mine.items() if t == doomed]
    assert sorted(r["ledger_id"] for r in gone) == sorted(doomed_ids)
    for r in gone:
        assert (r["verdict"], r["orphan_class"]) == ("orphan", "topic_gone")
        assert r["bytes"] > 0 and len(r["keys"]) == 2
    stale = mine[(kept, kept_ids[0], stale_uuid)]
    assert (stale["verdict"], stale["orphan_class"]) == ("orphan", "uuid_mismatch")
    assert {r["verdict"] for (t, _, u), r in mine.items() if t == kept and u != stale_uuid} == {"in_use"}

    # Orphan bytes: each orphan ledger's metadata length (read from the bookie before the audit), each
    # orphan object set's objects' sizes (S3 HEAD); summed in the printed summary and the pushed gauge.
    sizes = {r["ledger_id"]: r["size"] for r in ledgers}
    assert {lid: sizes[lid] for lid in orphans} == lengths
    for r in [*gone, stale]:
        assert r["bytes"] == sum(int(s3.head_object(Bucket=stack.s3_bucket, Key=k)["ContentLength"]) for k in r["keys"])
    ledger_bytes = sum(r["size"] for r in ledgers if r["verdict"] == "orphan")
    object_bytes = sum(r["bytes"] for r in objects if r["verdict"] == "orphan")
    gauge = {
        s.labels["class"]: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "ledger_deletion_audit_orphan_bytes" and s.labels.get("job") == "ledger_deletion_audit"
    }
    assert gauge["bookkeeper"] == ledger_bytes and gauge["tiered"] == object_bytes, gauge
    assert f"orphan bytes: {human_bytes(ledger_bytes + object_bytes)} ({ledger_bytes + object_bytes} bytes)" in printed

    # --send queued exactly the orphans, through phase 1, on this configuration's pending topic.
    queued = [decode(b) for b in _read_all(stack.service_url, h.topics["pending"])]
    assert sorted(i.ledger_id for i in queued if i.ledger_type is LedgerType.LEDGER) == sorted(
        lid for lid, (v, _) in by_audit.items() if v == "orphan"
    )
    offl = {(i.topic_name, i.ledger_id, str(i.offload_context.uuid)) for i in queued if i.offload_context}
    assert offl == {(t, lid, u) for (t, lid, u), r in mine.items() if r["verdict"] == "orphan"}
