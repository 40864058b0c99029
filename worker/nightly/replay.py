"""The nightly DLQ replay: every dead letter re-decided by the worker's own decision core, on Spark.

1. Read the DLQ through the ``pulsar`` data source, on the replay subscription, up to the end captured
   when the job is planned.
2. One row per ledger: dedupe by (ledgerType, ledgerId), keeping every message id; undecodable dead
   letters stay one row each.
3. Partition by topic, so each executor fetches each topic's live state once (one ``Decider`` per
   partition: its snapshot cache and its storage rate limit), and run ``worker.decision`` on every row
   with bounded concurrency.
4. Write the Parquet report (partitioned by run date), print the summary.
5. Only then acknowledge, on the replay subscription, exactly the messages whose ledger reached a final
   outcome (deleted, already gone, rejected). Everything else stays for the next night.

A run killed at any point is safe to start again: nothing is acknowledged before the report holds it,
and a ledger deleted by the killed run is "already gone" for the next.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from worker.decision import Outcome

# What the replay reports (``ledger_deletion_nightly_rows{outcome}``); the first three are final.
FINAL_OUTCOMES = ("deleted", "already_gone", "rejected")
_OUTCOMES = {
    Outcome.DELETED: "deleted",
    Outcome.ALREADY_GONE: "already_gone",
    Outcome.REJECTED: "rejected",
    Outcome.IN_USE: "in_use",
    Outcome.TOO_YOUNG: "too_young",
    Outcome.TRANSIENT: "still_failing",
    # An undecodable dead letter cannot be replayed; it stays, for an operator (``dlq list`` shows it).
    Outcome.INVALID: "invalid",
    Outcome.WOULD_DELETE: "would_delete",
}


@dataclass(frozen=True)
class ReplayOptions:
    report_dir: str
    dry_run: bool = False
    concurrency: int = 16
    partitions: int | None = None  # decision partitions; default: Spark's default parallelism
    pushgateway: str | None = None


def report_schema() -> Any:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("run_id", StringType(), False),
            StructField("ledger_id", LongType(), True),
            StructField("topic", StringType(), True),
            StructField("component", StringType(), True),
            StructField("ledger_type", StringType(), True),
            StructField("outcome", StringType(), False),
            StructField("reason", StringType(), True),
            StructField("route", StringType(), True),
            StructField("attempts", IntegerType(), True),
            StructField("first_seen", TimestampType(), True),
            StructField("last_error", StringType(), True),
            StructField("message_ids", ArrayType(StringType()), False),
            StructField(
                "ack",
                ArrayType(
                    StructType(
                        [StructField("partition_topic", StringType()), StructField("message_id", BinaryType())]
                    )
                ),
                False,
            ),
            StructField("run_date", StringType(), False),
        ]
    )


def _ledger_rows(df: Any) -> Any:
    """One row per ledger (or per undecodable message), every message id kept."""
    from pyspark.sql import functions as F

    props = F.col("properties")
    key = F.when(
        F.col("decode_error").isNull(), F.concat_ws(":", F.col("ledger_type"), F.col("ledger_id").cast("string"))
    ).otherwise(F.concat(F.lit("invalid:"), F.hex(F.col("message_id"))))
    return (
        df.withColumn("key", key)
        .withColumn("attempts", props.getItem("RECONSUMETIMES").cast("int"))
        .withColumn("first_seen_ms", props.getItem("first_seen_ms").cast("long"))
        .withColumn("last_error", props.getItem("last_error"))
        .groupBy("key")
        .agg(
            F.first("payload").alias("payload"),
            F.first("topic_name").alias("topic_name"),
            F.first("ledger_component").alias("ledger_component"),
            F.first("ledger_type").alias("ledger_type"),
            F.first("ledger_id").alias("ledger_id"),
            F.first("decode_error").alias("decode_error"),
            F.max("attempts").alias("attempts"),
            F.min("first_seen_ms").alias("first_seen_ms"),
            F.max_by("last_error", "publish_time").alias("last_error"),
            F.collect_list(F.struct("partition_topic", "message_id")).alias("ack"),
        )
    )


def decide_partition(settings_json: dict[str, Any], dry_run: bool, concurrency: int, run_id: str, run_date: str):  # type: ignore[no-untyped-def]
    """The executor side: one Decider for the partition's rows (a partition holds whole topics)."""

    def run(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        batch = list(rows)
        if not batch:
            return iter(())
        return iter(asyncio.run(_decide_all(settings_json, dry_run, concurrency, run_id, run_date, batch)))

    return run


async def _decide_all(
    settings_json: dict[str, Any], dry_run: bool, concurrency: int, run_id: str, run_date: str, rows: list[Any]
) -> list[tuple[Any, ...]]:
    import pulsar

    from worker.decision import Result, Route, open_decider
    from worker.metrics import Metrics
    from worker.settings import Settings

    settings = Settings.model_validate(settings_json)
    sem = asyncio.Semaphore(concurrency)
    out: list[tuple[Any, ...]] = []
    async with open_decider(settings, Metrics(), dry_run=dry_run) as decider:

        async def one(row: Any) -> None:
            async with sem:
                if row.decode_error is not None:
                    res = Result(Outcome.INVALID, Route.NONE, row.decode_error)
                else:
                    _, res = await decider.decide(bytes(row.payload))
            first = row.first_seen_ms
            out.append(
                (
                    run_id,
                    row.ledger_id,
                    row.topic_name,
                    row.ledger_component,
                    row.ledger_type,
                    _OUTCOMES[res.outcome],
                    res.reason or None,
                    res.route.value,
                    row.attempts,
                    datetime.fromtimestamp(first / 1000, UTC) if first else None,
                    row.last_error,
                    [str(pulsar.MessageId.deserialize(bytes(a.message_id))) for a in row.ack],
                    [(a.partition_topic, bytes(a.message_id)) for a in row.ack],
                    run_date,
                )
            )

        await asyncio.gather(*(one(r) for r in rows))
    return out


def replay(spark: Any, settings: Any, opts: ReplayOptions) -> dict[str, Any]:
    """Run the replay; returns the summary (outcome -> ledgers, plus acknowledged message count)."""
    from pyspark.sql import functions as F

    from worker.nightly.source import register

    started = time.monotonic()
    run_id = uuid.uuid4().hex[:12]
    run_date = datetime.now(UTC).strftime("%Y-%m-%d")
    register(spark)
    s = settings
    reader = (
        spark.read.format("pulsar")
        .option("service_url", s.pulsar.service_url)
        .option("admin_url", str(s.pulsar.admin_url))
        .option("topic", s.topics.dlq)
        .option("subscription", s.topics.dlq_replay_subscription)
    )
    if s.pulsar.auth_token:
        reader = reader.option("auth_token", s.pulsar.auth_token)
    ledgers = _ledger_rows(reader.load())
    n = opts.partitions or spark.sparkContext.defaultParallelism
    decided = ledgers.repartition(n, "topic_name").rdd.mapPartitions(
        decide_partition(s.model_dump(mode="json"), opts.dry_run, opts.concurrency, run_id, run_date)
    )
    # The report is written first, in one action: the decisions run exactly once, and the
    # acknowledgements below come from what the report holds.
    spark.createDataFrame(decided, report_schema()).write.mode("append").partitionBy("run_date").parquet(
        opts.report_dir
    )
    report = spark.read.parquet(opts.report_dir).where(F.col("run_id") == run_id)
    counts = {r["outcome"]: int(r["count"]) for r in report.groupBy("outcome").count().collect()}
    acked = 0
    if not opts.dry_run:
        final = report.where(F.col("outcome").isin(*FINAL_OUTCOMES)).select(F.explode("ack").alias("a"))
        ids = [(r.a.partition_topic, bytes(r.a.message_id)) for r in final.collect()]
        acked = acknowledge(s, ids)
    summary = {
        "run_id": run_id,
        "run_date": run_date,
        "dry_run": opts.dry_run,
        "ledgers": counts,
        "acknowledged_messages": acked,
        "duration_s": round(time.monotonic() - started, 1),
        "report": opts.report_dir,
    }
    return summary


def acknowledge(settings: Any, ids: list[tuple[str, bytes]]) -> int:
    """Acknowledge the given messages on the replay subscription (by id, one consumer per partition)."""
    import pulsar

    from worker.pulsar_client import blocking_client

    if not ids:
        return 0
    by_topic: dict[str, list[bytes]] = {}
    for topic, mid in ids:
        by_topic.setdefault(topic, []).append(mid)
    client = blocking_client(settings.pulsar)
    try:
        for topic, mids in by_topic.items():
            consumer = client.subscribe(
                topic,
                settings.topics.dlq_replay_subscription,
                consumer_type=pulsar.ConsumerType.Shared,
                receiver_queue_size=1,
            )
            try:
                for mid in mids:
                    consumer.acknowledge(pulsar.MessageId.deserialize(mid))
            finally:
                consumer.close()  # flushes the grouped acknowledgements
    finally:
        client.close()
    return len(ids)


def render_summary(summary: dict[str, Any]) -> str:
    rows = [(k, str(v)) for k, v in sorted(summary["ledgers"].items())]
    rows.append(("acknowledged messages", str(summary["acknowledged_messages"])))
    width = max(len(k) for k, _ in rows)
    lines = [f"DLQ replay {summary['run_id']} ({summary['run_date']}{', dry run' if summary['dry_run'] else ''})"]
    lines += [f"  {k.ljust(width)}  {v}" for k, v in rows]
    lines.append(f"  report: {summary['report']}  ({summary['duration_s']} s)")
    return "\n".join(lines)
