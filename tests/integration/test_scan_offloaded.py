"""``scan-offloaded`` on the real stack: Pulsar's scanOffloadedLedgers over a bucket of its own (a namespace whose
offload policies name it), read the audit's way. docs/nightly.md compares it with the audit (bench.offload_scan)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from testkit.orphans import delete_topic_metadata_keep_ledgers
from testkit.topics import produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import cli, fresh_namespace, worker_config
from tests.integration.offload_helpers import offload_topic
from worker.broker.admin import PulsarAdmin
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


@pytest.fixture
def bucket(stack: Stack) -> Iterator[tuple[Any, str]]:
    s3 = boto3.client(
        "s3",
        endpoint_url=stack.s3_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    name = f"ldw-scanoff-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    yield s3, name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=o["Key"])
    s3.delete_bucket(Bucket=name)


async def test_pulsars_scan_read_the_audits_way(
    stack: Stack, unique: str, admin: PulsarAdmin, bucket: tuple[Any, str], make_worker: WorkerFactory
) -> None:
    s3, name = bucket
    ns = await fresh_namespace(admin, f"ldw-scanoff-{unique}")
    runtime = await admin.broker_runtime_config()
    await admin.set_namespace_policy(
        ns,
        "offloadPolicies",
        {
            "offloadersDirectory": runtime["offloadersDirectory"],
            "managedLedgerOffloadDriver": "aws-s3",
            "s3ManagedLedgerOffloadBucket": name,
            "s3ManagedLedgerOffloadRegion": "us-east-1",
            "s3ManagedLedgerOffloadServiceEndpoint": stack.s3_endpoint,
        },
    )
    live, gone = f"persistent://{ns}/live", f"persistent://{ns}/gone"
    try:
        for t in (live, gone):
            produce(stack.service_url, t, 11)
        live_ids = await offload_topic(admin, TopicName.parse(live))
        assert s3.list_objects_v2(Bucket=name).get("KeyCount"), "the namespace did not offload into its own bucket"
        gone_ids = await offload_topic(admin, TopicName.parse(gone))
        await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, gone)
        # What a failed earlier attempt leaves: the live topic's first ledger under a uuid it does not record.
        real = next(
            o["Key"] for o in s3.list_objects_v2(Bucket=name)["Contents"] if o["Key"].endswith(f"-ledger-{live_ids[0]}")
        )
        stale = str(uuid.uuid4())
        for suffix in ("", "-index"):
            src = {"Bucket": name, "Key": real + suffix}
            s3.copy_object(Bucket=name, Key=f"{stale}-ledger-{live_ids[0]}{suffix}", CopySource=src)
        h = worker_config(make_worker, f"scanoff-{unique}")

        r = cli(h.config_path, "scan-offloaded", "-n", ns, "--min-age", "0s", "--all", "--json")
        assert r.returncode == 0, r.stderr[-3000:]
        report = json.loads(r.stdout)
        got = {(a["uuid"], a["ledger_id"]): a for a in report["attempts"]}
        assert report["objects"] == 2 * len(got) == 2 * (len(live_ids) + len(gone_ids) + 1)
        assert all(len(a["keys"]) == 2 and a["bytes"] > 0 for a in got.values()), "data and index, one attempt"
        verdicts = {k: (a["pulsar_status"], a["verdict"], a["orphan_class"], a["topic"]) for k, a in got.items()}
        assert verdicts[(stale, live_ids[0])] == ("BAD-UUID", "orphan", "uuid_mismatch", live)
        assert sorted(lid for (_, lid), v in verdicts.items() if v[3] == gone) == sorted(gone_ids)
        assert {v[:3] for v in verdicts.values() if v[3] == gone} == {("NOT-FOUND", "orphan", "not_listed")}
        assert {v[:3] for (u, _), v in verdicts.items() if v[3] == live and u != stale} == {("OK", "in_use", None)}

        # For a person: only the orphans, and a summary; with a minimum age the fresh ones are kept.
        r = cli(h.config_path, "scan-offloaded", "-n", ns, "--min-age", "1h")
        assert r.returncode == 0, r.stderr[-3000:]
        rows = [line for line in r.stdout.splitlines() if f"{ns}/" in line]
        assert len(rows) == len(gone_ids) + 1 and all("too_young" in row for row in rows), r.stdout
        assert f"orphan 0, too_young {len(rows)}, in_use {len(live_ids)}" in " ".join(r.stdout.split()), r.stdout
    finally:
        await admin.delete_topic(TopicName.parse(live), force=True)
