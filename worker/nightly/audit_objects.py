"""The audit's second half: offloaded objects in the configured buckets (``{uuid}-ledger-{id}`` and its
``-index``) that no topic records (topic gone, ledger gone, another offload attempt's uuid), listed per
prefix on the executors and judged by the same offload rule the worker uses."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from worker.backends.stores import optional_stores
from worker.backends.tiered_storage import check_offload_targets
from worker.broker.admin import open_admin
from worker.broker.snapshot_cache import LiveSet, snapshot_cache
from worker.core.ledger_age import ledger_age
from worker.core.ledger_owner import topic_of_managed_ledger_name
from worker.core.offload_in_use import OffloadedCopyUse, offloaded_copy_use
from worker.formats.topic_name import InvalidTopicName
from worker.nightly.spark import executor_settings, judged_partitions, on_driver
from worker.settings import S3Target, Settings

OBJECT_SCHEMA = (
    "bucket string, uuid string, ledger_id long, keys array<string>, bytes long, last_modified timestamp, "
    "managed_ledger string, verdict string, orphan_class string, why string, topic string, namespace string"
)


OFFLOAD_KEY = re.compile(
    r"^(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-ledger-(?P<id>\d+)(?P<index>-index)?$"
)


HEX = "0123456789abcdef"


def _s3(target: dict[str, Any], timeout_s: float) -> Any:
    """A client for ``target`` (an :class:`S3Target` dumped: key file paths, never keys), the keys read
    from their files here, on the executor; without any, the executor's AWS credential chain."""
    import botocore.config
    import botocore.session

    t = S3Target.model_validate(target)
    return botocore.session.get_session().create_client(
        "s3",
        region_name=t.region,
        endpoint_url=str(t.endpoint) if t.endpoint else None,
        aws_access_key_id=t.access_key_id,
        aws_secret_access_key=t.secret_access_key,
        config=botocore.config.Config(connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 3}),
    )


def list_prefix(target: dict[str, Any], prefix: str, timeout_s: float) -> Iterator[tuple[Any, ...]]:
    """Offloaded objects of one target under one key prefix, with their ``ManagedLedgerName``."""
    s3 = _s3(target, timeout_s)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=target["bucket"], Prefix=prefix):
        for obj in page.get("Contents", []):
            m = OFFLOAD_KEY.match(obj["Key"])
            if m is None:
                continue
            head = s3.head_object(Bucket=target["bucket"], Key=obj["Key"])
            md = {k.lower(): v for k, v in (head.get("Metadata") or {}).items()}
            yield (
                target["bucket"],
                obj["Key"],
                m.group("uuid"),
                int(m.group("id")),
                int(obj["Size"]),
                obj["LastModified"],
                md.get("managedledgername"),
            )


async def judge_objects(settings: Settings, sets: list[dict[str, Any]], *, min_age_s: float) -> None:
    """Judge offload attempts in place (verdict, orphan_class, why, topic, namespace)."""
    from uuid import UUID

    s = settings
    now = datetime.now(UTC)
    async with open_admin(s.pulsar) as admin, optional_stores(s.zookeeper) as zk:
        # One audit run is one instant: a topic's offload records are read once.
        snapshots = snapshot_cache(admin, s.worker, zk, ttl_s=3600)
        for o in sets:
            o.update(verdict="skipped", orphan_class=None, topic=None, namespace=None)
            ml = o.get("managed_ledger")
            if not ml:
                o["why"] = "no ManagedLedgerName metadata"
                continue
            try:
                topic = topic_of_managed_ledger_name(ml)  # the worker's parse of the same metadata
            except InvalidTopicName as e:
                o["why"] = f"unparseable ManagedLedgerName: {e}"
                continue
            o["topic"], o["namespace"] = str(topic), topic.namespace_name
            created_ms = o["last_modified"].timestamp() * 1000
            if not ledger_age(created_ms, now_ms=now.timestamp() * 1000, min_age_ms=min_age_s * 1000).old_enough:
                o["verdict"], o["why"] = "too_young", f"younger than {min_age_s:g}s (an offload may be running)"
                continue
            try:
                # The live set is only the route: proof of absence is the worker's (admin + metadata store).
                snap = await snapshots.get(topic)
                if not isinstance(snap, LiveSet):
                    o["verdict"], o["orphan_class"], o["why"] = "orphan", "topic_gone", "topic gone"
                    continue
                assert zk is not None  # a LiveSet or a proven absence needs no store; the uuid check does
                info = await zk.pulsar.read_managed_ledger(topic)
            except Exception as e:
                o["why"] = f"live state unavailable: {type(e).__name__}: {e}"
                continue
            lid = int(o["ledger_id"])
            ledger = info.ledger(lid) if info is not None else None
            recorded = ledger.offload.uuid if ledger is not None and ledger.offload is not None else None
            # The worker's rule (worker.daemon.decider): a listed ledger's copy without a recorded uuid is in use.
            use = offloaded_copy_use(listed=lid in snap.ml_ledgers, recorded_uuid=recorded, copy_uuid=UUID(o["uuid"]))
            if use is OffloadedCopyUse.LEDGER_GONE:
                o["verdict"], o["orphan_class"], o["why"] = "orphan", use.value, "ledger not in its topic's list"
            elif use is OffloadedCopyUse.OTHER_ATTEMPT:
                o["verdict"], o["orphan_class"] = "orphan", use.value
                o["why"] = f"the topic records offload {recorded}: a failed earlier attempt"
            else:
                o["verdict"], o["why"] = "in_use", "its ledger is listed with this offload"


def _judge_object_rows(min_age_s: float) -> Any:
    """Judges a partition of :data:`OBJECT_SCHEMA`'s offload attempts on an executor (:func:`judged_partitions`)."""

    def judge(settings: Settings, pdf: Any) -> list[dict[str, Any]]:
        import pandas as pd

        sets: list[dict[str, Any]] = pdf.to_dict("records")
        for o in sets:
            o["last_modified"] = pd.Timestamp(o["last_modified"]).to_pydatetime().astimezone(UTC)
            o["keys"] = list(o["keys"])
        asyncio.run(judge_objects(settings, sets, min_age_s=min_age_s))
        return sets

    return judge


def audit_buckets(spark: Any, settings: Settings, *, min_age_s: float, partitions: int | None = None) -> Any:
    """One row per offload attempt (bucket, uuid, ledger) of every configured S3 target."""
    from pyspark.sql import functions as F

    executor_settings(settings)  # refuses inline keys before they could travel in the listing's closure
    # The worker's start check: a missing bucket or a dead endpoint stops the audit here, named.
    on_driver(check_offload_targets(settings.offload))
    targets = [t.model_dump(mode="json") for t in settings.offload.s3_targets]
    timeout = settings.offload.request_timeout_s
    work = [(t, p) for t in targets for p in HEX]
    rdd = spark.sparkContext.parallelize(work, max(1, min(len(work), 64))).flatMap(
        lambda tp: list_prefix(tp[0], tp[1], timeout)
    )
    objects = spark.createDataFrame(
        rdd,
        "bucket string, key string, uuid string, ledger_id long, size long, last_modified timestamp, "
        "managed_ledger string",
    )
    sets = objects.groupBy("bucket", "uuid", "ledger_id").agg(
        F.sort_array(F.collect_list("key")).alias("keys"),
        F.sum("size").alias("bytes"),
        F.max("last_modified").alias("last_modified"),
        F.max("managed_ledger").alias("managed_ledger"),
    )
    n = partitions or spark.sparkContext.defaultParallelism
    return sets.repartition(n, "managed_ledger").mapInPandas(
        judged_partitions(settings, OBJECT_SCHEMA, _judge_object_rows(min_age_s)), OBJECT_SCHEMA
    )
