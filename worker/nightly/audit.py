"""The cluster-scale orphan audit, on Spark: the scanner's anti-join over BookKeeper, plus the offload buckets.

BookKeeper (``audit_ledgers``): the ledger metadata is read from the metadata store directly, the
``/ledgers`` tree split into input partitions by subtree (``/ledgers/00/0000`` holds ids 0-9999, ...),
parsed with BookKeeper's own serialization (``worker.backends.bookie_http.parse_serialized_metadata``). Rows are then
partitioned by owner topic and each partition runs **the scanner itself** (``worker.operations.scanner.Scanner``,
fed the metadata already read instead of the bookie HTTP API): same owner mapping, age rule, live sets
(fetched once per topic, after the metadata was read), "gone" proof and verdicts as ``scan --dry-run``.
Without a metadata store (``zookeeper.metadata_store_url``) the bookie HTTP API is the fallback listing.

Offload buckets (``audit_buckets``): every configured S3 target listed, partitioned by key prefix (the
first hex digit of the offload uuid); objects named ``{uuid}-ledger-{id}[-index]`` are grouped per
offload attempt, their ``ManagedLedgerName`` read, and judged against what the topic records: topic gone
(proven as the worker proves it), ledger gone (not in the topic's ledger list), or another uuid recorded
(a failed attempt): orphans, with their bytes. The rule is the decision core's: an attempt is in use
while its ledger is listed and the topic records this uuid, or none.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.backends.ledger_listing import MetadataListing as _Listing
from worker.backends.ledger_listing import ledger_subtrees, read_subtrees
from worker.backends.stores import optional_stores
from worker.broker.admin import open_admin
from worker.broker.snapshot_cache import snapshot_cache
from worker.core.freed_bytes import human_bytes
from worker.core.ledger_owner import owner_of
from worker.core.open_ledger import open_kind
from worker.errors import BackendError
from worker.formats.ledger_metadata import LedgerMetadata, parse_metadata, parse_serialized_metadata
from worker.formats.message import LedgerComponent
from worker.formats.metadata_store_url import parse_metadata_service_uri
from worker.formats.topic_name import TopicName
from worker.nightly.audit_objects import audit_buckets
from worker.nightly.spark import judged_partitions, on_driver, write_report
from worker.operations.scanner import LISTING_TTL_S, Decision, Scanner, Verdict
from worker.settings import Settings, ZooKeeperSettings

LEDGER_DECISION_SCHEMA = (
    "ledger_id long, verdict string, why string, component string, topic string, namespace string, "
    "cursor string, schema_id string, age_s double, size long, state string"
)
# The metadata rows: ``data`` is a znode's bytes (BookKeeper's serialization), ``bookie_json`` the bookie
# HTTP fallback's JSON for the ledger; one of the two. Both are data, parsed, never deserialized into
# objects: what a znode holds is anyone's to write.
METADATA_SCHEMA = "ledger_id long, data binary, ctime long, owner string, bookie_json string"


# ---- BookKeeper: the /ledgers tree as input partitions ------------------------------------------------


def owner_key(ledger_id: int, data: bytes, ctime_ms: int) -> str:
    """The owner topic, the key the judging stage is partitioned by; "" when there is none to fetch."""
    try:
        # ValueError covers Unmapped (the owner rule's refusal) and unparseable metadata.
        owner = owner_of(parse_serialized_metadata(ledger_id, data, ctime_ms).custom_metadata)
    except ValueError:
        return ""
    return str(owner.topic) if owner is not None else ""


async def judge_ledgers(
    settings: Settings,
    rows: Sequence[tuple[int, bytes | None, int, str | None]],
    *,
    min_age_s: float,
    namespaces: Sequence[str],
) -> list[dict[str, Any]]:
    """Run the scanner over these ledgers (one partition: its topics' live sets fetched once each). Rows
    are (ledger id, znode bytes, ctime, bookie JSON) as :data:`METADATA_SCHEMA`."""
    s = settings
    metadata: dict[int, LedgerMetadata] = {}
    out: list[dict[str, Any]] = []
    for lid, data, ctime, bookie_json in rows:
        try:
            if data is not None:
                metadata[lid] = parse_serialized_metadata(lid, data, ctime)
            else:
                metadata[lid] = parse_metadata(lid, {str(lid): json.loads(bookie_json or "null")})
        except (ValueError, BackendError) as e:
            out.append(Decision(lid, Verdict.SKIPPED, f"unparseable ledger metadata: {e}").to_dict())
    async with open_admin(s.pulsar) as admin, optional_stores(s.zookeeper) as zk:
        snapshots = snapshot_cache(admin, s.worker, zk, ttl_s=0, not_found_ttl_s=LISTING_TTL_S)
        scanner = Scanner(
            _Listing(metadata), snapshots, zk.pulsar if zk else None, min_age_s=min_age_s, namespaces=namespaces
        )
        report = await scanner.scan()
    out.extend(d.to_dict() for d in report.decisions)
    for d in out:
        d["namespace"] = "/".join(d["topic"].split("://", 1)[-1].split("/")[:2]) if d.get("topic") else None
    return out


def _judge_ledger_rows(min_age_s: float, namespaces: list[str]) -> Any:
    """Judges a partition of :data:`METADATA_SCHEMA` rows on an executor (:func:`judged_partitions`)."""

    def judge(settings: Settings, pdf: Any) -> list[dict[str, Any]]:
        import pandas as pd

        rows = [
            (int(a), None if b is None else bytes(b), int(c), None if j is None or pd.isna(j) else str(j))
            for a, b, c, j in zip(pdf.ledger_id, pdf.data, pdf.ctime, pdf.bookie_json, strict=True)
        ]
        return asyncio.run(judge_ledgers(settings, rows, min_age_s=min_age_s, namespaces=namespaces))

    return judge


def read_ledger_metadata(spark: Any, settings: Settings, ledgers_root: str | None = None) -> Any:
    """DataFrame (:data:`METADATA_SCHEMA`) of every ledger in BookKeeper's store (under ``ledgers_root`` when
    given): one partition per subtree (at most 10,000 ledgers), read together and handed to Spark as Arrow
    batches."""
    zs = bookkeeper_at(settings.zookeeper, ledgers_root)
    uri = zs.bookkeeper_uri  # BookKeeper's metadata store: the ledgers are there
    if not uri:
        return _bookie_listing(spark, settings)
    subtrees = ledger_subtrees(uri, zs.timeout_s)
    paths = spark.sparkContext.parallelize([(p,) for p in subtrees], max(1, len(subtrees))).toDF("path string")
    return paths.mapInArrow(_read_subtrees_partition(uri, zs.timeout_s), METADATA_SCHEMA)


def bookkeeper_at(zs: ZooKeeperSettings, ledgers_root: str | None) -> ZooKeeperSettings:
    """The settings with BookKeeper's store at ``ledgers_root`` of the same servers (``audit --ledgers-root``)."""
    if ledgers_root is None or not zs.bookkeeper_uri:
        return zs
    url = parse_metadata_service_uri(zs.bookkeeper_uri)
    uri = f"{url.scheme}://{url.servers.replace(',', ';')}/{ledgers_root.strip('/')}"
    return zs.model_copy(update={"metadata_service_uri": uri})


def _read_subtrees_partition(uri: str, timeout: float) -> Any:
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        paths = [p for batch in batches for p in batch.column("path").to_pylist()]
        for base in paths:
            ids, data, ctimes, owners = [], [], [], []
            for lid, d, ctime in read_subtrees(uri, [base], timeout):
                ids.append(lid)
                data.append(d)
                ctimes.append(ctime)
                owners.append(owner_key(lid, d, ctime))
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(ids, pa.int64()),
                    pa.array(data, pa.binary()),
                    pa.array(ctimes, pa.int64()),
                    pa.array(owners, pa.string()),
                    pa.nulls(len(ids), pa.string()),
                ],
                names=[c.split()[0] for c in METADATA_SCHEMA.split(", ")],
            )

    return run


def _bookie_listing(spark: Any, settings: Settings) -> Any:
    """Fallback without ZooKeeper: ids listed and metadata read through the bookie HTTP API."""

    async def ids() -> list[int]:
        async with new_session(settings.bookkeeper.request_timeout_s) as s:
            return await BookieClient(settings.bookkeeper.endpoints, s).list_ledger_ids()

    urls, timeout = settings.bookkeeper.endpoints, settings.bookkeeper.request_timeout_s

    def read(part: Iterator[int]) -> Iterator[tuple[Any, ...]]:
        async def go() -> list[tuple[Any, ...]]:
            out = []
            async with new_session(timeout) as s:
                bookie = BookieClient(urls, s)
                for lid in part:
                    md = await bookie.get_metadata(lid)
                    if md is not None:
                        # The bookie's own JSON, parsed again by the judging stage; owner "" spreads by
                        # ledger id below.
                        out.append((lid, None, md.ctime_ms or 0, "", json.dumps(md.raw)))
            return out

        return iter(asyncio.run(go()))

    all_ids = asyncio.run(ids())
    n = max(1, spark.sparkContext.defaultParallelism)
    rdd = spark.sparkContext.parallelize(all_ids, n).mapPartitions(read)
    return spark.createDataFrame(rdd, METADATA_SCHEMA)


@dataclass
class AuditSummary:
    run_id: str
    ledgers: dict[str, int] = field(default_factory=dict)  # verdict -> count
    orphans: list[tuple[str, str, str, int, int]] = field(default_factory=list)  # class, kind, ns, n, bytes
    objects: dict[str, int] = field(default_factory=dict)  # verdict -> object sets
    report_path: str = ""
    duration_s: float = 0.0
    # Idle topics' ledgers past their retention (``trim-idle``'s dry run): not orphans, no broker trims them.
    # (topics, ledgers, bytes); None when not computed, and why in ``held_past_retention_unread``.
    held_past_retention: tuple[int, int, int] | None = None
    held_past_retention_unread: str | None = None

    @property
    def orphan_bytes(self) -> int:
        """Every orphan's bytes: the ledgers' metadata lengths plus the offloaded objects' sizes."""
        return sum(b for *_, b in self.orphans)

    def by_class(self) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for cls, _kind, _ns, n, b in self.orphans:
            c, nb = out.get(cls, (0, 0))
            out[cls] = (c + n, nb + b)
        return out

    def table(self) -> str:
        lines = [f"{'CLASS':<10} {'ORPHAN KIND':<22} {'NAMESPACE':<28} {'COUNT':>7} {'BYTES':>12}"]
        for cls, kind, ns, n, b in sorted(self.orphans):
            lines.append(f"{cls:<10} {kind:<22} {ns:<28} {n:>7} {b:>12}")
        for cls, (n, b) in sorted(self.by_class().items()):
            lines.append(f"{cls:<10} {'total':<22} {'':<28} {n:>7} {b:>12}")
        lines.append(f"\norphan bytes: {human_bytes(self.orphan_bytes)} ({self.orphan_bytes} bytes)")
        if self.held_past_retention is not None:
            topics, ledgers, nbytes = self.held_past_retention
            lines.append(
                f"held past retention by idle topics: {human_bytes(nbytes)} ({nbytes} bytes) in {ledgers} ledgers "
                f"of {topics} topics (not orphans: `trim-idle` lists them, `trim-idle --apply` has them trimmed)"
            )
        elif self.held_past_retention_unread is not None:
            lines.append(f"held past retention by idle topics: not computed ({self.held_past_retention_unread})")
        led = ", ".join(f"{k} {v}" for k, v in sorted(self.ledgers.items()))
        obj = ", ".join(f"{k} {v}" for k, v in sorted(self.objects.items())) or "none"
        lines.append(f"\nrun {self.run_id}: ledgers: {led}; offloaded object sets: {obj}; report {self.report_path}")
        return "\n".join(lines)


def audit_ledgers(
    spark: Any,
    settings: Settings,
    *,
    min_age_s: float,
    namespaces: Sequence[str] = (),
    ledgers_root: str | None = None,
    partitions: int | None = None,
) -> Any:
    """The scanner's decisions for every ledger, as a DataFrame of :data:`LEDGER_DECISION_SCHEMA`."""
    md = read_ledger_metadata(spark, settings, ledgers_root)
    # About two subtrees' worth of ledgers a partition (each partition holds its rows while it judges them):
    # bounded memory per task, and more topics in flight at once than the task slots alone would give.
    n = partitions or max(spark.sparkContext.defaultParallelism, md.rdd.getNumPartitions() // 2)
    judge = judged_partitions(settings, LEDGER_DECISION_SCHEMA, _judge_ledger_rows(min_age_s, list(namespaces)))
    return md.repartition(n, "owner").mapInPandas(judge, LEDGER_DECISION_SCHEMA)


# ---- offload buckets -----------------------------------------------------------------------------------


async def prove_stores(settings: Settings, ledgers_root: str | None = None) -> None:
    """The operator commands' proof of both metadata stores (``prove_metadata_stores``), for the ledgers
    root the audit reads (``ledgers_root``, else BookKeeper's store's)."""
    # Lazy: no worker.nightly module loads the Pulsar client on import (Spark executors import them).
    from worker.broker.preflight import prove_metadata_stores

    zs = bookkeeper_at(settings.zookeeper, ledgers_root)
    async with open_admin(settings.pulsar) as admin, optional_stores(zs) as zk:
        assert zk is not None
        await prove_metadata_stores(zk, admin, TopicName.parse(settings.topics.pending))


def run_audit(
    spark: Any,
    settings: Settings,
    *,
    report_dir: str,
    run_id: str,
    min_age_s: float,
    namespaces: Sequence[str] = (),
    buckets: bool = True,
    ledgers_root: str | None = None,
    partitions: int | None = None,
) -> AuditSummary:
    """Both audits, written as Parquet under ``report_dir/{ledgers,objects}/run_date=...``; the summary
    is computed from what was written."""
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    run_date = datetime.now(UTC).strftime("%Y-%m-%d")
    summary = AuditSummary(run_id, report_path=report_dir)

    def stamp(df: Any) -> Any:
        return df.withColumn("run_id", F.lit(run_id)).withColumn("run_date", F.lit(run_date))

    # Both metadata stores proven on the driver before anything is read: a decoy ledgers root would report
    # (and with --send queue) every ledger of another cluster, or none of ours.
    if settings.zookeeper.metadata_store_url:
        on_driver(prove_stores(settings, ledgers_root))
    # Planned first (lazy but for the targets' start check): a missing bucket stops the audit before the
    # ledgers' half runs, not after it.
    objs = None
    if buckets and settings.offload.s3_targets:
        objs = audit_buckets(spark, settings, min_age_s=min_age_s, partitions=partitions)
    ledgers = audit_ledgers(
        spark, settings, min_age_s=min_age_s, namespaces=namespaces, ledgers_root=ledgers_root, partitions=partitions
    )
    led = write_report(stamp(ledgers), f"{report_dir}/ledgers").where(F.col("run_id") == run_id)
    summary.ledgers = {r["verdict"]: int(r["n"]) for r in led.groupBy("verdict").agg(F.count("*").alias("n")).collect()}
    for r in (
        led.where(F.col("verdict") == "orphan")
        .groupBy("why", "namespace")
        .agg(F.count("*").alias("n"), F.sum("size").alias("b"))
        .collect()
    ):
        kind = _kind(r["why"])
        cls = "bookkeeper_open" if kind.startswith("open_") else "bookkeeper"
        summary.orphans.append((cls, kind, r["namespace"] or "?", int(r["n"]), int(r["b"] or 0)))
    if objs is not None:
        if namespaces:
            objs = objs.where(F.col("namespace").isin(list(namespaces)))
        ob = write_report(stamp(objs), f"{report_dir}/objects").where(F.col("run_id") == run_id)
        summary.objects = {
            r["verdict"]: int(r["n"]) for r in ob.groupBy("verdict").agg(F.count("*").alias("n")).collect()
        }
        for r in (
            ob.where(F.col("verdict") == "orphan")
            .groupBy("orphan_class", "namespace")
            .agg(F.count("*").alias("n"), F.sum("bytes").alias("b"))
            .collect()
        ):
            summary.orphans.append(("tiered", r["orphan_class"], r["namespace"] or "?", int(r["n"]), int(r["b"] or 0)))
    if settings.zookeeper.metadata_store_url:
        held_past_retention(summary, settings, namespaces)
    summary.duration_s = time.monotonic() - t0
    return summary


def held_past_retention(summary: AuditSummary, settings: Settings, namespaces: Sequence[str]) -> None:
    """The idle topics' ledgers past their retention, read on the driver as ``trim-idle`` reads them (Pulsar's
    metadata store, no topic loaded). A failure here is reported in the summary, never the audit's failure: the
    orphans' half stands on its own."""
    # Lazy: no worker.nightly module loads the Pulsar client on import (Spark executors import them).
    from worker.operations.idle_trim import FindReport, find_idle_past_retention

    async def find() -> FindReport:
        async with optional_stores(settings.zookeeper) as stores:
            return await find_idle_past_retention(settings, stores, namespaces=namespaces)

    try:
        found = on_driver(find())
    except (BackendError, OSError) as e:
        summary.held_past_retention_unread = f"{type(e).__name__}: {e}"
        return
    summary.held_past_retention = (len(found.past), found.ledgers, found.size)


def _kind(why: str) -> str:
    """The scanner's orphan reasons, folded into the audit's orphan kinds. An open data or cursor ledger
    nothing names (``worker.core.open_ledger``) is its own kind and class (``bookkeeper_open``): the worker
    recovers it before its delete, and its bytes are unknown (an open ledger's metadata records none)."""
    if "gone" in why:
        return "topic_gone"
    for component in (LedgerComponent.MANAGED_CURSOR, LedgerComponent.MANAGED_LEDGER):
        if why.startswith(open_kind(component)):
            return open_kind(component).replace(" ", "_")
    return "unreferenced"
