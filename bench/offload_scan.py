"""Pulsar's offloaded-object scanner beside the nightly audit's bucket half, on one bucket of the local stack
(``python -m bench.offload_scan``; ``BENCH_OFFLOAD_COPIES=100,1000`` the bucket sizes measured).

A namespace of its own offloads into a bucket of its own (namespace offload policies), so both scanners list
exactly this scene: topics whose closed ledgers were offloaded by Pulsar (in use); one of those topics deleted
from the metadata with its objects left behind (topic gone); one offloaded ledger dropped from its topic's list
(ledger gone); copies of a real offload attempt under uuids no topic records (what a failed attempt leaves: the
bucket is grown with these to each size measured); one such copy made last (younger than the minimum age); an
object without Pulsar's metadata. Then, per size:

- Pulsar: ``GET /admin/v2/namespaces/{ns}/scanOffloadedLedgers`` (``ledger-deletion-worker scan-offloaded``'s
  call), its objects grouped per attempt;
- the audit: ``worker.nightly.audit_objects.audit_buckets`` on Spark local[2] over the same bucket (the
  SparkSession's start reported apart), run first: the copy made last must still be young when it judges it.

What each finds, attempt by attempt, and how long each took: printed, and bench/out/offload_scan.json. The
namespace, its topics and the bucket are removed at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections import Counter
from typing import Any

from bench.env import OUT, stack
from worker.settings import Settings, load_settings

# Longer than the audit's run on this machine (its Spark stages), so the one copy made last is still young
# when the audit judges it; the audit runs first, then Pulsar's scan.
MIN_AGE_S = 90.0


def _s3(s: Any) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=s.s3_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


def _settings(s: Any, bucket: str) -> Settings:
    # The keys reach the Spark executors through the AWS credential chain (the environment), never inline.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    return load_settings(
        None,
        pulsar={"service_url": s.service_url, "admin_url": s.admin_url, "request_timeout_s": 1800},
        zookeeper={"metadata_store_url": f"zk:{s.zookeeper_hosts}"},
        offload={"s3_targets": [{"bucket": bucket, "region": "us-east-1", "endpoint": s.s3_endpoint}]},
        logging={"level": "WARNING"},
    )


async def _scene(s: Any, admin: Any, ns: str, bucket: str, s3: Any) -> dict[str, Any]:
    from testkit.orphans import delete_topic_metadata_keep_ledgers, drop_ledgers_from_metadata
    from testkit.topics import produce
    from worker.formats.topic_name import TopicName

    await admin.ensure_namespace(ns)
    await admin.set_retention(ns, -1, -1)
    runtime = await admin.broker_runtime_config()
    await admin.set_namespace_policy(
        ns,
        "offloadPolicies",
        {
            "offloadersDirectory": runtime["offloadersDirectory"],
            "managedLedgerOffloadDriver": "aws-s3",
            # Both spellings: the broker's aws-s3 driver reads the s3-prefixed ones.
            "managedLedgerOffloadBucket": bucket,
            "managedLedgerOffloadRegion": "us-east-1",
            "managedLedgerOffloadServiceEndpoint": s.s3_endpoint,
            "s3ManagedLedgerOffloadBucket": bucket,
            "s3ManagedLedgerOffloadRegion": "us-east-1",
            "s3ManagedLedgerOffloadServiceEndpoint": s.s3_endpoint,
        },
    )
    if (await admin.namespace_policy(ns, "offloadPolicies")).get("s3ManagedLedgerOffloadBucket") != bucket:
        raise RuntimeError(f"{ns} does not offload into {bucket}: stopping before anything lands elsewhere")
    topics = [f"persistent://{ns}/t{i}" for i in range(4)]
    offloaded = {}
    for t in topics:
        produce(s.service_url, t, 16)
        offloaded[t] = await _offload(admin, TopicName.parse(t))
        if not s3.list_objects_v2(Bucket=bucket).get("KeyCount"):
            raise RuntimeError(f"{t} was offloaded, but not into {bucket}")
    gone_topic, dropped_from, live = topics[0], topics[1], topics[2]
    await delete_topic_metadata_keep_ledgers(admin, s.zookeeper_hosts, gone_topic)
    dropped = offloaded[dropped_from][0]
    await drop_ledgers_from_metadata(admin, s.zookeeper_hosts, dropped_from, [dropped])
    # A real attempt of a live topic, to copy under uuids no topic records.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    lid = offloaded[live][0]
    real = next(k for k in keys if k.endswith(f"-ledger-{lid}"))
    stray = f"{uuid.uuid4()}-ledger-{10**12 + 7}"
    s3.put_object(Bucket=bucket, Key=stray, Body=b"not offloaded by Pulsar")
    return {
        "offloaded": offloaded,
        "gone_topic": gone_topic,
        "dropped": (dropped_from, dropped),
        "copy_of": (live, lid, real),
        "stray": stray,
        "copies": [],
    }


async def _offload(admin: Any, topic: Any) -> list[int]:
    """Every closed ledger of ``topic`` offloaded by Pulsar; the offloaded ids."""
    stats = await admin.internal_stats(topic)
    await admin.trigger_offload(topic, max(int(ld["ledgerId"]) for ld in stats["ledgers"]), 0)
    for _ in range(240):
        st = await admin.offload_status(topic)
        if st.get("status") in ("SUCCESS", "ERROR"):
            break
        await asyncio.sleep(0.5)
    if st.get("status") != "SUCCESS":
        raise RuntimeError(f"offload of {topic}: {st}")
    return [int(ld["ledgerId"]) for ld in (await admin.internal_stats(topic))["ledgers"] if ld.get("offloaded")]


def _copy(s3: Any, bucket: str, real: str, lid: int) -> str:
    u = str(uuid.uuid4())
    s3.copy_object(Bucket=bucket, Key=f"{u}-ledger-{lid}", CopySource={"Bucket": bucket, "Key": real})
    s3.copy_object(Bucket=bucket, Key=f"{u}-ledger-{lid}-index", CopySource={"Bucket": bucket, "Key": f"{real}-index"})
    return u


def _pulsar(settings: Settings, ns: str) -> tuple[float, dict[tuple[str, int], dict[str, Any]]]:
    from worker.commands.scan_offloaded import _scan, attempts
    from worker.formats.offloaded_scan import parse_offloaded_scan

    t0 = time.monotonic()
    scan = parse_offloaded_scan(asyncio.run(_scan(settings, ns, 1800)))
    took = time.monotonic() - t0
    found = attempts(scan.objects, min_age_s=MIN_AGE_S, now_ms=time.time() * 1000)
    return took, {(a["uuid"], a["ledger_id"]): a for a in found}


def _audit(spark: Any, settings: Settings) -> tuple[float, dict[tuple[str, int], dict[str, Any]]]:
    from worker.nightly.audit_objects import audit_buckets

    t0 = time.monotonic()
    rows = [r.asDict() for r in audit_buckets(spark, settings, min_age_s=MIN_AGE_S).collect()]
    return time.monotonic() - t0, {(r["uuid"], int(r["ledger_id"])): r for r in rows}


def _expected(scene: dict[str, Any], key: tuple[str, int]) -> str:
    """What this attempt is, by construction."""
    u, lid = key
    if scene["stray"] == f"{u}-ledger-{lid}":
        return "stray object (no Pulsar metadata)"
    if u == scene.get("young"):
        return "failed attempt, just made"
    if u in scene["copies"]:
        return "failed attempt (uuid no topic records)"
    if any(lid in ids for t, ids in scene["offloaded"].items() if t == scene["gone_topic"]):
        return "topic deleted"
    if lid == scene["dropped"][1]:
        return "ledger dropped from its topic"
    return "offloaded, in use"


def main() -> int:
    from testkit.admin import StagingAdmin
    from worker.broker.admin import open_admin
    from worker.nightly.spark import session

    s = stack()
    sizes = [int(x) for x in os.environ.get("BENCH_OFFLOAD_COPIES", "100,1000").split(",")]
    run = uuid.uuid4().hex[:8]
    ns, bucket = f"public/ldw-offscan-{run}", f"ldw-offscan-{run}"
    s3 = _s3(s)
    s3.create_bucket(Bucket=bucket)
    settings = _settings(s, bucket)
    results: dict[str, Any] = {"namespace": ns, "min_age_s": MIN_AGE_S, "runs": []}

    async def build() -> dict[str, Any]:
        async with open_admin(settings.pulsar) as admin:
            return await _scene(s, StagingAdmin.of(admin), ns, bucket, s3)

    spark = None
    try:
        scene = asyncio.run(build())
        t0 = time.monotonic()
        spark = session("local[2]", "bench-offload-scan")
        results["spark_session_start_s"] = round(time.monotonic() - t0, 2)
        _live, lid, real = scene["copy_of"]
        for size in sizes:
            while len(scene["copies"]) < size:
                scene["copies"].append(_copy(s3, bucket, real, lid))
            time.sleep(MIN_AGE_S + 1)  # every attempt so far is past the minimum age ...
            scene["young"] = _copy(s3, bucket, real, lid)  # ... but this one
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            objects = sum(len(p.get("Contents", [])) for p in pages)
            audit_s, by_audit = _audit(spark, settings)
            pulsar_s, by_pulsar = _pulsar(settings, ns)
            table: Counter[tuple[str, str, str]] = Counter()
            for key in set(by_pulsar) | set(by_audit):
                p, a = by_pulsar.get(key), by_audit.get(key)
                pulsar_says = f"{p['pulsar_status']} -> {p['verdict']}" if p else "(not listed)"
                audit_says = "(not listed)"
                if a:
                    audit_says = a["verdict"] + (f" ({a['orphan_class']})" if a["orphan_class"] else "")
                table[(_expected(scene, key), pulsar_says, audit_says)] += 1
            row = {
                "objects": objects,
                "attempts": len(by_audit),
                "pulsar_s": round(pulsar_s, 2),
                "audit_s": round(audit_s, 2),
                "findings": [
                    {"what": w, "pulsar": p, "audit": a, "attempts": n} for (w, p, a), n in sorted(table.items())
                ],
            }
            results["runs"].append(row)
            scene["copies"].append(scene.pop("young"))
            print(f"\n{objects} objects, {len(by_audit)} attempts: Pulsar {pulsar_s:.2f} s, audit {audit_s:.2f} s")
            for f in row["findings"]:
                print(f"  {f['attempts']:>5}  {f['what']:<40} Pulsar: {f['pulsar']:<28} audit: {f['audit']}")
    finally:
        if spark is not None:
            spark.stop()
        asyncio.run(_cleanup(settings, ns))
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for o in page.get("Contents", []):
                s3.delete_object(Bucket=bucket, Key=o["Key"])
        s3.delete_bucket(Bucket=bucket)
    print(f"\nSparkSession start: {results['spark_session_start_s']} s (not in the audit's times)")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "offload_scan.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


async def _cleanup(settings: Settings, ns: str) -> None:
    """The scene's topics deleted (their offloaded objects with them); the bucket is emptied after."""
    from worker.broker.admin import open_admin
    from worker.formats.topic_name import TopicName

    async with open_admin(settings.pulsar) as admin:
        for t in await admin.list_topics(ns):
            await admin.delete_topic(TopicName.parse(t), force=True)


if __name__ == "__main__":
    raise SystemExit(main())
