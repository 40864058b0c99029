"""``audit --send``: the orphans of one audit run, read back from its Parquet report, queued through phase 1."""

from __future__ import annotations

import uuid
from typing import Any

from worker.core.offload_driver_metadata import driver_metadata
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.operations.scanner import Decision, Verdict
from worker.settings import Settings


def _offload_info(settings: Settings, o: dict[str, Any]) -> Any:
    target = next(t for t in settings.offload.s3_targets if t.bucket == o["bucket"])
    ctx = OffloadContext.from_uuid(uuid.UUID(o["uuid"]), target.driver, driver_metadata(target))
    return PendingDeleteLedgerInfo(
        topic_name=o["topic"],
        ledger_component=LedgerComponent.MANAGED_LEDGER,
        ledger_type=LedgerType.OFFLOAD_LEDGER,
        ledger_id=int(o["ledger_id"]),
        offload_context=ctx,
        properties={"source": "audit", "why": o["why"]},
    )


def orphan_infos(spark: Any, settings: Settings, report_dir: str, run_id: str) -> list[Any]:
    """The run's orphans as pending deletions: ledgers as LEDGER, offload attempts as OFFLOAD_LEDGER."""
    import os

    from pyspark.sql import functions as F

    infos = []
    mine = (F.col("run_id") == run_id) & (F.col("verdict") == "orphan")
    led = spark.read.parquet(f"{report_dir}/ledgers").where(mine)
    for r in led.collect():
        d = Decision(
            ledger_id=r["ledger_id"],
            verdict=Verdict.ORPHAN,
            why=r["why"],
            component=r["component"],
            topic=r["topic"],
            cursor=r["cursor"],
            schema_id=r["schema_id"],
        )
        infos.append(d.to_info({"source": "audit", "scan_id": run_id, "why": d.why}))
    if os.path.isdir(f"{report_dir}/objects"):
        ob = spark.read.parquet(f"{report_dir}/objects").where(mine)
        infos.extend(_offload_info(settings, r.asDict()) for r in ob.collect())
    return infos


async def send_orphans(settings: Settings, infos: list[Any]) -> tuple[int, int]:
    """(sent, failed)."""
    # Lazy: no worker.nightly module loads the Pulsar client on import (Spark executors import them).
    from worker.operations.phase1 import PendingDeleteSender, SendFailed

    sent = failed = 0
    if not infos:
        return 0, 0
    async with PendingDeleteSender(settings, source="audit") as sender:
        for info in infos:
            try:
                await sender.send_pending_delete(info)
                sent += 1
            except SendFailed:
                failed += 1
    return sent, failed
