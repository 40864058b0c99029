"""The nightly DLQ replay: every dead letter decided again by the worker's own decision core, on Spark.

Read the DLQ up to the end captured at planning, dedupe one row per claim (the whole payload's SHA-256, so a
forged copy never settles the genuine one), decide per partition with one
:class:`~worker.daemon.decider.Decider` (pinned with ``localCheckpoint``: deciding deletes, and runs once),
write the Parquet report and read it back (:class:`ReportNotReadBack` stops the run, nothing acknowledged),
then acknowledge exactly the rows with a final outcome. The steps and why a run killed anywhere is safe to
start again: docs/nightly.md, "``replay-dlq``". No secret travels in options or closures: each executor
reads the token and S3 keys itself (:func:`worker.nightly.spark.executor_settings`).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from worker.backends.tiered_storage import check_offload_targets
from worker.core.decision import FINAL, Outcome
from worker.core.freed_bytes import human_bytes
from worker.formats.message import FIRST_SEEN_MS, LAST_ERROR, REASON, RECONSUMETIMES
from worker.formats.topic_name import TopicName
from worker.nightly.spark import (
    InlineSecret,
    executor_settings,
    inline_secrets,
    on_driver,
    settings_on_executor,
    write_report,
)
from worker.settings import Settings

# The report's outcomes. The decision core's TRANSIENT is "still_failing" here: the ledger stays parked.
STILL_FAILING = "still_failing"
FINAL_OUTCOMES = tuple(o.value for o in Outcome if o in FINAL)
OUTCOMES = (*FINAL_OUTCOMES, Outcome.IN_USE.value, Outcome.TOO_YOUNG.value, STILL_FAILING, Outcome.WOULD_DELETE.value)

DECIDED_SCHEMA = (
    "claim string, ledger_id long, ledger_type string, topic string, component string, cursor_name string, "
    "schema_id string, offload_uuid string, outcome string, final boolean, route string, reason string, "
    "stage string, attempts int, first_seen timestamp, last_published timestamp, dlq_reason string, "
    "last_error string, messages int, message_ids array<binary>, message_id_strs array<string>, "
    "decode_error string, decided_at timestamp, freed_bytes long"
)


@dataclass(frozen=True)
class ReplayOptions:
    report_dir: str
    dry_run: bool = False
    concurrency: int | None = None  # per partition; default worker.max_inflight
    partitions: int | None = None  # default PARTITIONS_PER_SLOT x spark.default.parallelism
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    run_date: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d"))


@dataclass
class ReplaySummary:
    run_id: str
    run_date: str
    dry_run: bool
    read: int = 0  # dead letters read
    rows: dict[str, int] = field(default_factory=dict)  # outcome -> ledgers (report rows)
    messages: dict[str, int] = field(default_factory=dict)  # outcome -> dead letters
    acknowledged: int = 0
    # What the deleted rows freed (``Result.freed_bytes``, summed from the report read back); how many
    # deleted rows had no recorded size (a ledger never closed), left out of the sum.
    freed_bytes: int = 0
    freed_unknown: int = 0
    report_path: str = ""
    duration_s: float = 0.0

    def table(self) -> str:
        lines = [f"{'OUTCOME':<14} {'LEDGERS':>8} {'MESSAGES':>9}  SETTLED"]
        for o in OUTCOMES:
            if o in self.rows:
                settled = "ack" if o in FINAL_OUTCOMES and not self.dry_run else "stays"
                lines.append(f"{o:<14} {self.rows[o]:>8} {self.messages.get(o, 0):>9}  {settled}")
        lines.append(f"{'total':<14} {sum(self.rows.values()):>8} {sum(self.messages.values()):>9}")
        if Outcome.DELETED.value in self.rows:
            unknown = f"; {self.freed_unknown} deleted without a recorded size" if self.freed_unknown else ""
            lines.append(f"freed {human_bytes(self.freed_bytes)} ({self.freed_bytes} bytes){unknown}")
        mode = "dry run: nothing deleted, nothing acknowledged" if self.dry_run else f"acknowledged {self.acknowledged}"
        lines.append(f"\nrun {self.run_id}: {self.read} dead letters read; {mode}; report {self.report_path}")
        return "\n".join(lines)


def source_options(settings: Settings, topic: str, subscription: str | None) -> dict[str, str]:
    """The ``pulsar`` source's options: the token's file, never the token (options show in query plans
    and event logs; every executor reads the file itself)."""
    p = settings.pulsar
    if p.auth_token and p.auth_token_file is None:
        raise InlineSecret(f"the nightly jobs never ship a secret to their executors: {inline_secrets(settings)[0]}")
    opts = {"service_url": p.service_url, "admin_url": str(p.admin_url).rstrip("/"), "topic": topic}
    if subscription:
        opts["subscription"] = subscription
    if p.auth_token_file is not None:
        opts["token_file"] = str(p.auth_token_file)
    if p.tls_trust_certs_file:
        opts["tls_trust_certs_file"] = str(p.tls_trust_certs_file)
    return opts


# Topics differ in size and every row of a topic lands in one partition: with one partition per core a
# single large topic decides the run's length, and even equal topics hash unevenly over few partitions.
# Several partitions per slot let the slot that finishes first take the next one.
PARTITIONS_PER_SLOT = 4


def task_slots_per_executor(conf: dict[str, str], master: str) -> int:
    """How many tasks one executor runs at once: ``spark.executor.cores // spark.task.cpus``, or N for
    ``local[N]``. Without ``spark.executor.cores`` outside local mode, 1 (YARN's and Kubernetes' default)."""
    task_cpus = max(1, int(conf.get("spark.task.cpus", "1")))
    cores = conf.get("spark.executor.cores")
    if cores is None and master.startswith("local"):
        inner = master[len("local") :].strip("[]").split(",")[0]
        cores = str(os.cpu_count() or 1) if inner in ("*", "") else inner
    try:
        n = int(cores) if cores is not None else 1
    except ValueError:
        n = 1
    return max(1, n // task_cpus)


def per_task_settings(settings: Settings, slots: int) -> Settings:
    """The storage rate limit holds per executor: each of its ``slots`` concurrent tasks (one Decider,
    one token bucket each) gets an equal share of ``worker.deletes_per_second`` and of the burst."""
    if slots <= 1:
        return settings
    w = settings.worker
    worker = w.model_copy(
        update={"deletes_per_second": w.deletes_per_second / slots, "delete_burst": max(1, w.delete_burst // slots)}
    )
    return settings.model_copy(update={"worker": worker})


def read_dlq(spark: Any, settings: Settings) -> Any:
    t = settings.topics
    return spark.read.format("pulsar").options(**source_options(settings, t.dlq, t.dlq_replay_subscription)).load()


def dedupe(dlq: Any, partitions: int) -> Any:
    """One row per claim, every message id kept, newest DLQ reason/last error, oldest first-seen; the rows
    of one topic in one of ``partitions`` partitions. The claim is the whole payload: any narrower key lets a
    forged copy published first be decided for the genuine one. Grouped by (topic, claim) after partitioning
    by topic, so Spark plans one shuffle, not two."""
    from pyspark.sql import functions as F

    decodable = F.col("decode_error").isNull()
    claim = F.when(
        decodable,
        F.concat_ws("|", "ledger_type", F.col("ledger_id").cast("string"), F.sha2("payload", 256)),
        # An undecodable message is its own row: nothing about it can be trusted to group by.
    ).otherwise(F.concat(F.lit(f"{Outcome.INVALID.value}|"), "message_id_str"))
    props = F.col("properties")

    # Properties are whatever a publisher wrote: Spark's ANSI casts would fail the whole replay on one
    # hostile dead letter, so they are tried and clamped (garbage reads as absent, as in the daemon).
    def clamped(key: str, low: Any, high: Any) -> Any:
        # Read as a double so a huge number is clamped, not unreadable; least/greatest skip nulls, so an
        # unreadable value (or NaN) must stay null instead of becoming a bound.
        n = props.getItem(key).try_cast("double")
        clamped = F.least(F.greatest(n, low.cast("double")), high.cast("double")).cast("long")
        return F.when(n.isNull() | F.isnan(n), F.lit(None)).otherwise(clamped)

    first_seen_ms = F.coalesce(
        clamped(FIRST_SEEN_MS, F.lit(0), F.unix_millis(F.current_timestamp())), F.unix_millis("publish_time")
    )
    attempts = F.coalesce(clamped(RECONSUMETIMES, F.lit(0), F.lit(2**31 - 1)), F.lit(0))
    return (
        dlq.withColumn("claim", claim)
        .repartition(partitions, "topic_name")
        .groupBy("topic_name", "claim")
        .agg(
            F.first("payload").alias("payload"),  # one payload per claim
            F.first("ledger_id").alias("ledger_id"),
            F.first("ledger_type").alias("ledger_type"),
            F.first("ledger_component").alias("component"),
            F.first("cursor_name").alias("cursor_name"),
            F.first("schema_id").alias("schema_id"),
            F.first("offload_uuid").alias("offload_uuid"),
            F.max(attempts).cast("int").alias("attempts"),
            F.timestamp_millis(F.min(first_seen_ms)).alias("first_seen"),
            F.max("publish_time").alias("last_published"),
            F.max_by(props.getItem(REASON), "publish_time").alias("dlq_reason"),
            F.max_by(props.getItem(LAST_ERROR), "publish_time").alias("last_error"),
            F.count(F.lit(1)).cast("int").alias("messages"),
            F.collect_list("message_id").alias("message_ids"),
            F.collect_list("message_id_str").alias("message_id_strs"),
            F.first("decode_error").alias("decode_error"),
        )
        .withColumnRenamed("topic_name", "topic")
    )


def _outcome(result: Any) -> str:
    return STILL_FAILING if result.outcome is Outcome.TRANSIENT else str(result.outcome.value)


async def decide_rows(settings: Settings, rows: list[dict[str, Any]], *, dry_run: bool, concurrency: int) -> None:
    """Decide every row in place (adds outcome, final, route, reason, stage, decided_at). One Decider for
    all of them: one snapshot cache and one storage rate limiter per partition."""
    # Lazy: no worker.nightly module loads the Pulsar client on import (Spark executors import them).
    from worker.daemon.decider import open_decider

    sem = asyncio.Semaphore(concurrency)
    # The DLQ this replay read anchors Pulsar's store: a wrong store would make every topic look gone.
    dlq = TopicName.parse(settings.topics.dlq)
    async with open_decider(settings, dry_run=dry_run, prove_pulsar_store=dlq) as decider:

        async def one(r: dict[str, Any]) -> None:
            async with sem:
                _, res = await decider.decide(bytes(r["payload"]))
            r["outcome"] = _outcome(res)
            r["final"] = bool(res.final) and not dry_run
            r["route"] = res.route.value
            r["reason"] = res.reason
            r["stage"] = res.stage
            r["decided_at"] = datetime.now(UTC)
            r["freed_bytes"] = res.freed_bytes  # DELETED only; None: nothing freed here, or no size recorded

        await asyncio.gather(*(one(r) for r in rows))


def decide_partition(settings: Settings, dry_run: bool, concurrency: int) -> Any:
    """The ``mapInPandas`` function: runs on an executor, one asyncio loop per partition. It carries the
    settings with file paths in place of secrets (refused if a secret is inline)."""
    payload = executor_settings(settings)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        settings = settings_on_executor(payload)
        frames = list(batches)
        if not frames:
            return
        pdf = pd.concat(frames, ignore_index=True)
        if pdf.empty:
            return
        rows = pdf.to_dict("records")
        asyncio.run(decide_rows(settings, rows, dry_run=dry_run, concurrency=concurrency))
        out = pd.DataFrame(rows).drop(columns=["payload"])
        for col in ("message_ids", "message_id_strs"):
            out[col] = out[col].map(list)
        # Nullable: a column of ints and Nones would be float (NaN), which Arrow refuses as a long.
        out["freed_bytes"] = out["freed_bytes"].astype("Int64")
        yield out

    return run


def replay(spark: Any, settings: Settings, opts: ReplayOptions) -> ReplaySummary:
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    summary = ReplaySummary(opts.run_id, opts.run_date, opts.dry_run)
    sc = spark.sparkContext
    n = opts.partitions or PARTITIONS_PER_SLOT * sc.defaultParallelism
    concurrency = opts.concurrency or settings.worker.max_inflight
    task_settings = per_task_settings(settings, task_slots_per_executor(dict(sc.getConf().getAll()), sc.master))
    # Before anything is read: a secret given inline is refused here, not after the DLQ was read.
    decide = decide_partition(task_settings, opts.dry_run, concurrency)
    # The worker's start check, on the driver: a missing bucket or a dead endpoint stops the night here,
    # named, before the DLQ is read (each executor checks again, with the filesystem path it mounts).
    on_driver(check_offload_targets(settings.offload))
    # Pinned: the end captured at planning holds for every step below, and the DLQ is read once.
    dlq = read_dlq(spark, settings).localCheckpoint(eager=True)
    summary.read = dlq.count()
    # Pinned too: one action decides (and deletes); everything after reads what it decided, never
    # deciding again.
    decided = (
        dedupe(dlq, n)
        .mapInPandas(decide, DECIDED_SCHEMA)
        .withColumn("run_id", F.lit(opts.run_id))
        .withColumn("dry_run", F.lit(opts.dry_run))
        .withColumn("run_date", F.lit(opts.run_date))
        .localCheckpoint(eager=True)
    )
    expected = _settled(decided)
    summary.report_path = f"{opts.report_dir}/run_date={opts.run_date}"
    try:
        report = write_report(decided, opts.report_dir, lambda p: _report_written(p)).where(
            F.col("run_id") == opts.run_id
        )
        read_back = _settled(report)
    except Exception as e:  # Spark's errors for a path gone or unreadable are many: all mean the same here
        raise ReportNotReadBack(
            f"report {summary.report_path}: cannot write or read it back ({type(e).__name__}: {e}); "
            "nothing acknowledged"
        ) from e
    if read_back != expected:
        raise ReportNotReadBack(
            f"report {summary.report_path}: read back {read_back.rows} rows and {len(read_back.final_ids)} final "
            f"messages of the {expected.rows} rows and {len(expected.final_ids)} final messages written; "
            "nothing acknowledged"
        )
    for r in report.groupBy("outcome").agg(F.count(F.lit(1)).alias("n"), F.sum("messages").alias("m")).collect():
        summary.rows[r["outcome"]] = int(r["n"])
        summary.messages[r["outcome"]] = int(r["m"])
    deleted = report.where(F.col("outcome") == Outcome.DELETED.value)
    freed = deleted.agg(F.sum("freed_bytes").alias("b"), F.count_if(F.col("freed_bytes").isNull()).alias("u")).first()
    summary.freed_bytes, summary.freed_unknown = int(freed["b"] or 0), int(freed["u"] or 0)
    if not opts.dry_run:
        # The pinned decisions, proven above to be what the report holds (the files are not read again:
        # what was verified is what is acknowledged).
        ids = [bytes(m) for r in decided.where("final").select("message_ids").collect() for m in r["message_ids"]]
        summary.acknowledged = acknowledge(settings, ids)
    summary.duration_s = time.monotonic() - t0
    return summary


@dataclass(frozen=True)
class _Settled:
    """What a report says about one run: its row count and the messages its final rows settle."""

    rows: int
    messages: int
    final_ids: frozenset[str]


def _settled(rows: Any) -> _Settled:
    from pyspark.sql import functions as F

    total = rows.agg(F.count(F.lit(1)).alias("n"), F.sum("messages").alias("m")).first()
    final = rows.where("final").select(F.explode("message_id_strs").alias("id")).collect()
    return _Settled(int(total["n"]), int(total["m"] or 0), frozenset(r["id"] for r in final))


class ReportNotReadBack(RuntimeError):
    """The report written cannot be read back whole: settling rows it does not hold would leave no trace."""


def _report_written(path: str) -> None:
    """Runs between writing the report and reading it back (tests lose a file here)."""


def acknowledge(settings: Settings, message_ids: list[bytes]) -> int:
    """Acknowledge ``message_ids`` (``MessageId.serialize()`` bytes) on the replay subscription."""
    if not message_ids:
        return 0
    import pulsar

    # Lazy: no worker.nightly module loads the Pulsar client on import (Spark executors import them).
    from worker.broker.client import blocking_client

    client = blocking_client(settings.pulsar)
    try:
        consumer = client.subscribe(
            settings.topics.dlq,
            settings.topics.dlq_replay_subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            # Whatever the broker dispatches to this consumer is never acknowledged by it: small, so
            # little is held while we ack; it goes back to the subscription when the consumer closes.
            receiver_queue_size=1,
            # Never create the subscription at "latest": that would silently mark every dead letter done.
            initial_position=pulsar.InitialPosition.Earliest,
        )
        try:
            for b in message_ids:
                consumer.acknowledge(pulsar.MessageId.deserialize(b))
        finally:
            # Closing flushes the grouped acknowledgements before the broker sees the consumer go.
            consumer.close()
    finally:
        client.close()
    return len(message_ids)
